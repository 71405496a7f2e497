"""In-process restart under `nvrx-hpc run --inprocess` on the real local cluster (examples/train_inprocess.py).

Three jobs of 2 nodes x 2 gloo ranks side by side. One runs through. One, with a warm spare rank on each node,
meets in turn a rank raising, a rank SIGKILLed (its rank goes to a spare) and a rank hanging outside the
collective (declared lost after the soft timeout, killed by its agent, replaced by the second spare): all three
are recovered in the one step, which ends as a success although srun reports the killed task. The third has
no spare rank: its SIGKILLed rank escalates, the launcher stops and restarts the step. All end with the same
model hash.
"""

from __future__ import annotations

import sys
from pathlib import Path

from _faults import REPO, bb_dir, events, final_hash, kinds, sbatch_exec, transcript, wait_job

TRAIN = REPO / "examples" / "train_inprocess.py"
STEPS = 30
FAULTS = "raise@5:1,sigkill@10:2,hang@15:3"


def _submit(cluster, tmp_path: Path, name: str, faults: str, spare_ranks: int = 1) -> tuple[str, Path]:
    run_dir = tmp_path / name
    argv = [sys.executable, "-m", "nvrx_hpc", "run", "--spares", "0", "--run-dir", str(run_dir), "--stop-grace", "2",
            "--tasks-per-node", "2", "--inprocess", "--spare-ranks", str(spare_ranks), "--heartbeat-timeout", "60",
            "--", sys.executable, str(TRAIN), "--steps", str(STEPS), "--step-time", "0.05", "--hidden", "32",
            "--bb-dir", bb_dir(cluster, tmp_path, name), "--faults", faults]  # fmt: skip
    env = {"NVRX_INPROCESS__PG_TIMEOUT_S": "3", "NVRX_INPROCESS__SOFT_TIMEOUT_S": "3"}
    return sbatch_exec(cluster, tmp_path, name, argv, env), run_dir


def test_raise_sigkill_and_hang_recover_in_process_and_a_loss_without_spare_escalates(cluster, tmp_path):
    clean, clean_dir = _submit(cluster, tmp_path, "ip-clean", "")
    faulty, faulty_dir = _submit(cluster, tmp_path, "ip-faults", FAULTS)
    bare, bare_dir = _submit(cluster, tmp_path, "ip-nospare", "sigkill@8:1", spare_ranks=0)
    assert wait_job(cluster, clean, timeout=300)["state"] == "COMPLETED", transcript(tmp_path, "ip-clean")
    assert wait_job(cluster, faulty, timeout=300)["state"] == "COMPLETED", transcript(tmp_path, "ip-faults")
    assert wait_job(cluster, bare, timeout=300)["state"] == "COMPLETED", transcript(tmp_path, "ip-nospare")

    assert "inprocess.restart" not in kinds(clean_dir) and kinds(clean_dir).count("launcher.step.started") == 1
    restarts = [e for e in events(faulty_dir) if e["kind"] == "inprocess.restart"]
    reasons = " | ".join(e["reason"] for e in restarts)
    assert "died" in reasons and "declared lost" in reasons, reasons
    lost = sorted({slot for e in restarts for slot in e["detail"]["lost"]})
    assert len(lost) == 2, restarts  # the killed rank and the hung one
    meetings = [e for e in events(faulty_dir) if e["kind"] == "inprocess.meeting" and e["detail"]["replaced"]]
    assert meetings, "no spare took a lost rank's place"
    # all three recovered in the one step; srun's exit code (the killed task's) is not a failure
    assert kinds(faulty_dir).count("launcher.step.started") == 1, transcript(tmp_path, "ip-faults")
    assert "launcher.step.lost_ranks_exit" in kinds(faulty_dir)
    # no spare rank: the loss restarts the step once
    assert "inprocess.no_spare" in kinds(bare_dir)
    assert kinds(bare_dir).count("launcher.step.started") == 2, transcript(tmp_path, "ip-nospare")
    assert final_hash(faulty_dir) == final_hash(clean_dir) == final_hash(bare_dir)
