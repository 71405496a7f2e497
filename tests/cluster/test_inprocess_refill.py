"""Refill steps under `nvrx-hpc run --inprocess` on the real local cluster (examples/train_inprocess.py, gloo).

2 nodes x 2 ranks with one warm spare task per node: 2 spare tasks at the start. Four ranks are SIGKILLed one
after another, each well after the one before was recovered (the training paces its steps): more losses than
there were spare tasks. After each, the launcher starts a refill step that tops the spare tasks up again; its
tasks join the running job and later take lost ranks. All four are absorbed in the one training step (no
second step, no `inprocess.no_spare`), the job finishes, and the model equals a fault-free run's, bit for bit.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _faults import REPO, bb_dir, events, final_hash, kinds, sbatch_exec, transcript, wait_job

TRAIN = REPO / "examples" / "train_inprocess.py"
STEPS = 140
FAULTS = "sigkill@5:1,sigkill@40:2,sigkill@75:3,sigkill@110:0"  # ~10 s apart at 0.3 s a step
OWN_SLOTS = 6  # 2 nodes x (2 ranks + 1 spare)


def _submit(cluster, tmp_path: Path, name: str, faults: str) -> tuple[str, Path]:
    run_dir = tmp_path / name
    argv = [sys.executable, "-m", "nvrx_hpc", "run", "--spares", "0", "--run-dir", str(run_dir), "--stop-grace", "2",
            "--tasks-per-node", "2", "--inprocess", "--spare-ranks", "1", "--heartbeat-timeout", "60",
            "--", sys.executable, str(TRAIN), "--steps", str(STEPS), "--step-time", "0.3", "--hidden", "32",
            "--bb-dir", bb_dir(cluster, tmp_path, name), "--faults", faults]  # fmt: skip
    env = {"NVRX_INPROCESS__PG_TIMEOUT_S": "3", "NVRX_INPROCESS__SOFT_TIMEOUT_S": "3"}
    return sbatch_exec(cluster, tmp_path, name, argv, env), run_dir


def test_more_rank_losses_than_spare_tasks_are_absorbed_in_one_step_by_refill_steps(cluster, tmp_path):
    clean, clean_dir = _submit(cluster, tmp_path, "refill-clean", "")
    faulty, run_dir = _submit(cluster, tmp_path, "refill-faults", FAULTS)
    assert wait_job(cluster, faulty, timeout=400)["state"] == "COMPLETED", transcript(tmp_path, "refill-faults")
    assert wait_job(cluster, clean, timeout=300)["state"] == "COMPLETED", transcript(tmp_path, "refill-clean")

    seen = events(run_dir)
    assert kinds(run_dir).count("launcher.step.started") == 1, transcript(tmp_path, "refill-faults")
    assert "inprocess.no_spare" not in kinds(run_dir) and "launcher.restart" not in kinds(run_dir)
    restarts = [e for e in seen if e["kind"] == "inprocess.restart"]
    lost = sorted({slot for e in restarts for slot in e["detail"]["lost"]})
    assert len(lost) == 4, restarts  # every kill was a loss, more than the 2 spare tasks of the step
    started = [s for e in seen if e["kind"] == "inprocess.refill.started" for s in e["detail"]["slots"]]
    joined = {e["detail"]["slot"] for e in seen if e["kind"] == "inprocess.refill.joined"}
    assert started and min(started) == OWN_SLOTS and len(set(started)) == len(started), started
    assert joined and joined <= set(started), (joined, started)
    # refill slots took lost ranks; every refill step ran on a node of the training step (none was lost)
    took = {slot for e in seen if e["kind"] == "inprocess.meeting" for slot in e["detail"]["replaced"].values()}
    assert took & set(started), (took, started)
    step_nodes = next(e for e in seen if e["kind"] == "launcher.step.started")["detail"]["nodes"]
    assert {e["node"] for e in seen if e["kind"] == "inprocess.refill.started"} <= set(step_nodes)
    # every refill step ended with the training step: none outlived it
    ended = [e for e in seen if e["kind"] == "inprocess.refill.ended"]
    step_end = next(e["time"] for e in seen if e["kind"] == "launcher.step.ended")
    assert len(ended) == len({e["detail"]["slots"][0] for e in seen if e["kind"] == "inprocess.refill.started"})
    assert all(e["time"] <= step_end for e in ended)
    assert final_hash(run_dir) == final_hash(clean_dir)
