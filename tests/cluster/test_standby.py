"""`nvrx-hpc run --standby` on the real local cluster: the next attempt's ranks start, import torch and wait
in a standby srun step while the attempt before them trains; on a fault the launcher gives that step its go
and it becomes the next attempt (launcher/standby_step.py). The training is examples/train_ckpt.py, 2 nodes
x 2 gloo ranks and a spare node; each fault is injected for real and the final hash must equal the
fault-free run's."""

from __future__ import annotations

import re

from _faults import SLOW, events, final_hash, first, kinds, sim_xid79, submit, transcript, wait_iteration, wait_job


def _labels(log_text: str) -> set[int]:
    return {int(m.group(1)) for m in re.finditer(r"^(\d+): ", log_text, re.M)}


def test_a_crashed_rank_restarts_in_the_waiting_standby_step(cluster, tmp_path, ckpt_baseline):
    """Rank 3 SIGKILLed at step 5: the standby step started at attempt 0's first iteration takes over as
    attempt 1 on the same nodes; its tasks on the spare node exit; the restored run ends with the same hash."""
    job, run_dir = submit(cluster, tmp_path, "sb-crash", nodes=2, spares=1, fault="crash:rank=3:step=5",
                          run_args=("--standby",))  # fmt: skip
    assert wait_job(cluster, job)["state"] == "COMPLETED", transcript(tmp_path, "sb-crash")
    used = first(run_dir, "launcher.standby.used")
    starts = [e["detail"] for e in events(run_dir) if e["kind"] == "launcher.step.started"]
    assert [s["standby"] for s in starts] == [False, True], starts
    # the nodes attempt 0 trained on (n1 and n2, or n2 and n3 when Slurm gave the job n[2-4])
    assert used["detail"]["restart"] == 1 and used["detail"]["nodes"] == starts[0]["nodes"], (used, starts)
    assert "launcher.standby.dropped" not in kinds(run_dir)
    log = (run_dir / "logs" / "step-1.log").read_text()
    # labelled with its rank, as srun labels a training step (the script prints on rank 0 only)
    assert _labels(log) == {0} and "0: resumed from step" in log, log[-2000:]
    assert final_hash(run_dir) == ckpt_baseline


def test_sim_xid_node_is_replaced_by_the_spare_through_the_standby_step(cluster, tmp_path, ckpt_baseline):
    """Simulated GPU (sim backend, chosen explicitly): an Xid 79 on n2 mid-run. n2 is excluded, and the
    standby step's tasks on n1 and the spare n3 become attempt 1's ranks 0-3 (n3's as ranks 2 and 3)."""
    job, run_dir = submit(cluster, tmp_path, "sb-xid", nodes=2, spares=1, fault=SLOW,
                          run_args=("--standby", "--health-interval", "1"),
                          env_line="export NVRX_HEALTH__GPU_BACKEND=sim\n")  # fmt: skip
    wait_iteration(run_dir, 3)
    with sim_xid79(cluster, job, "n2"):
        assert wait_job(cluster, job)["state"] == "COMPLETED", transcript(tmp_path, "sb-xid")
    assert [e["node"] for e in events(run_dir) if e["kind"] == "launcher.node.excluded"] == ["n2"]
    used = first(run_dir, "launcher.standby.used")
    assert used["detail"]["nodes"] == ["n1", "n3"], used
    # rank 0's task on n1 is task 0 of the standby step; ranks 2 and 3 are its tasks 4 and 5 (on n3)
    assert _labels((run_dir / "logs" / "step-1.log").read_text()) == {0}
    assert final_hash(run_dir) == ckpt_baseline
