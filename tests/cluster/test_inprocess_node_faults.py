"""Node faults recovered in-process under `nvrx-hpc run --inprocess` (examples/train_inprocess.py, real gloo ranks).

One job of 4 nodes: n1 and n2 train (2 ranks each), n3 and n4 are spare nodes whose tasks all wait as warm
spare ranks in the same step. n2 loses power (its slurmd, slurmstepds and tasks SIGKILLed at once, as
benchmarks/recovery.py does): its agent link drops and its ranks move to the spares on n3. Then n3 gets a
simulated Xid 79 (the simulated GPU backend, chosen explicitly): its agent kills its tasks and the ranks move
again, to n4. Both are recovered in the one srun step, both nodes are excluded, no rank is ever given to a
slot of a failed node, and the final model equals a fault-free run's, bit for bit.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from _faults import (
    REPO,
    bb_dir,
    events,
    final_hash,
    kill_all,
    kinds,
    processes_of_node,
    revive_node,
    sbatch_exec,
    transcript,
    wait_iteration,
    wait_job,
)  # fmt: skip

TRAIN = REPO / "examples" / "train_inprocess.py"
STEPS = 120
WIDTH = 2  # tasks per node: 2 ranks, no spare rank on the training nodes


def _argv(cluster, tmp_path: Path, name: str, spares: int) -> list[str]:
    return [sys.executable, "-m", "nvrx_hpc", "run", "--spares", str(spares), "--run-dir", str(tmp_path / name),
            "--stop-grace", "2", "--tasks-per-node", "2", "--inprocess", "--spare-ranks", "0",
            "--heartbeat-timeout", "60", "--health-interval", "1",
            "--", sys.executable, str(TRAIN), "--steps", str(STEPS), "--step-time", "0.1", "--hidden", "32",
            "--bb-dir", bb_dir(cluster, tmp_path, name)]  # fmt: skip


def _nvrx(cluster, *args: str) -> None:
    done = cluster.run([sys.executable, "-m", "nvrx_hpc", "cluster", *args, "--state-dir", str(cluster.state_dir)],
                       timeout=60)
    assert done.returncode == 0, done.stderr


def _recovered(run_dir: Path, after: float, timeout: float = 120) -> float:
    """When every rank was back in the training function in a round started after `after`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        started = [e for e in events(run_dir) if e["kind"] == "inprocess.round.started" and e["time"] > after]
        if len({e["rank"] for e in started}) == 4:
            return max(e["time"] for e in started)
        time.sleep(0.3)
    raise AssertionError(f"the ranks of {run_dir} were not back in the training within {timeout} s")


def test_a_lost_node_and_a_simulated_xid_are_recovered_in_process_in_one_step(cluster, tmp_path):
    env = {"NVRX_INPROCESS__PG_TIMEOUT_S": "3", "NVRX_INPROCESS__SOFT_TIMEOUT_S": "3",
           "NVRX_HEALTH__GPU_BACKEND": "sim"}  # fmt: skip
    run_dir = tmp_path / "ip-nodes"
    argv = _argv(cluster, tmp_path, "ip-nodes", spares=2)
    job = sbatch_exec(cluster, tmp_path, "ip-nodes", argv, env, nodes=4)
    try:
        wait_iteration(run_dir, 10)
        victims = processes_of_node(cluster.state_dir, "n2")
        lost_at = time.time()
        kill_all(victims)
        back = _recovered(run_dir, lost_at)
        xid_at = time.time()
        _nvrx(cluster, "inject-gpu-fault", "n3", "xid=79")
        back_xid = _recovered(run_dir, xid_at)
        assert wait_job(cluster, job, timeout=300)["state"] == "COMPLETED", transcript(tmp_path, "ip-nodes")
    finally:
        cluster.run(["scancel", job], timeout=30)
        _nvrx(cluster, "clear-gpu-faults")
        revive_node(cluster, "n2")
        if cluster.dev.backend.node("n3").drained:
            cluster.dev.backend.resume(["n3"])
    seen = events(run_dir)
    assert kinds(run_dir).count("launcher.step.started") == 1, transcript(tmp_path, "ip-nodes")
    spare_nodes = next(e for e in seen if e["kind"] == "launcher.step.started")["detail"]["spare_nodes"]
    assert spare_nodes == ["n3", "n4"]
    restarts = [e for e in seen if e["kind"] == "inprocess.restart"]
    reasons = " | ".join(e["reason"] for e in restarts)
    assert "node agent on n2 lost" in reasons and "n3 failed health check" in reasons, reasons
    lost = sorted({slot for e in restarts for slot in e["detail"]["lost"]})
    # every task of n2, then of n3 (and the refill tasks started on n3 after n2's loss, slots from 8 on)
    refilled = {s: e["node"] for e in seen if e["kind"] == "inprocess.refill.started" for s in e["detail"]["slots"]}
    assert [s for s in lost if s < 8] == [2, 3, 4, 5], restarts
    assert all(refilled.get(s) == "n3" for s in lost if s >= 8), (restarts, refilled)
    assert "n2" not in refilled.values(), refilled
    excluded = [e["node"] for e in seen if e["kind"] == "launcher.node.excluded"]
    assert excluded == ["n2", "n3"], excluded
    # the ranks went to n3's slots, then to n4's; never to a slot of a node already lost
    moves = [(e["time"], e["detail"]["replaced"]) for e in seen if e["kind"] == "inprocess.meeting"
             and e["detail"]["replaced"]]  # fmt: skip
    taken = {int(rank): slot for _, replaced in sorted(moves) for rank, slot in replaced.items()}
    assert taken == {2: 6, 3: 7}, moves
    assert all(slot // WIDTH in (2, 3) for _, replaced in moves for slot in replaced.values()), moves
    print(f"node loss recovered in {back - lost_at:.2f} s, Xid in {back_xid - xid_at:.2f} s")
    assert "launcher.restart" not in kinds(run_dir)

    clean = sbatch_exec(cluster, tmp_path, "ip-clean", _argv(cluster, tmp_path, "ip-clean", spares=0), env)
    assert wait_job(cluster, clean, timeout=300)["state"] == "COMPLETED", transcript(tmp_path, "ip-clean")
    assert final_hash(tmp_path / "ip-clean") == final_hash(run_dir)
