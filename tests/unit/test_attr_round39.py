"""Rules from round 39 of blind cases: a NIC whose health warning went `back to normal` is not the cause of a later
failure; an OFI completion error saying the peer's host is down is a weak network error, so the node failure it
followed is the root; in a Horovod stall listing every rank, the one rank waiting on other tensors diverged."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_a_nic_warning_that_went_back_to_normal_is_not_the_cause(tmp_path):
    kern = [
        "Apr 08 03:41:12 dgx-b15 kernel: mlx5_core 0000:54:00.0: poll_health:835:(pid 0): device's health "
        "compromised - reached miss count",
        "Apr 08 03:41:27 dgx-b15 kernel: mlx5_core 0000:54:00.0: poll_health:835:(pid 0): Health issue observed, "
        "High temperature, severity 4 (WARNING): Sensor 0 back to normal",
        "Apr 08 04:06:21 dgx-b15 kernel: NVRM: Xid (PCI:0000:b7:00): 79, pid='<unknown>', name=<unknown>, GPU has "
        "fallen off the bus.",
    ]
    v = analyze_run(write_run(tmp_path, {"journalctl-k-dgx-b15.txt": kern})).verdict
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("dgx-b15",)


def test_a_peer_host_down_is_the_node_failures_cascade(tmp_path):
    lines = [
        "[rank3]: NET/OFI Request 0x7f21c8036e10 completed with error. RC: 112. Error: 112 (Host is down). "
        "Completed length: 0",
        "srun: error: Node failure on gpu-spot-dy-p4d24xlarge-2",
        "slurmstepd: error: *** JOB 2291 ON gpu-spot-dy-p4d24xlarge-1 CANCELLED AT 2024-11-19T05:06:31 DUE TO NODE "
        "FAILURE, SEE SLURMCTLD LOG FOR DETAILS ***",
    ]
    v = analyze_run(write_run(tmp_path, {"slurm-2291.out": lines})).verdict
    assert v.category is Category.HOST and "gpu-spot-dy-p4d24xlarge-2" in v.culprit.nodes


def _stall(missing: dict[int, str]) -> list[str]:
    head = ("[1,0]<stderr>:[2024-02-13 11:07:28.  4412: W horovod/common/stall_inspector.cc:105] One or more tensors "
            "were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder "
            "of ranks for more than 60 seconds. Missing ranks:")
    return [head, *(f"[1,0]<stderr>:{r}: [{tensors}]" for r, tensors in missing.items())]


def test_the_one_rank_of_a_horovod_stall_waiting_on_other_tensors_diverged(tmp_path):
    grads = "allreduce.grad.encoder.weight, allreduce.grad.encoder.bias"
    missing = {r: grads for r in range(8)} | {5: "allgather.valid_stats.loss, allgather.valid_stats.acc"}
    v = analyze_run(write_run(tmp_path, {"horovodrun.log": _stall(missing)})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (5,)


def test_a_horovod_stall_split_in_two_halves_names_no_one_of_them(tmp_path):
    grads, valid = "allreduce.grad.encoder.weight", "allgather.valid_stats.loss"
    missing = {r: grads if r < 4 else valid for r in range(8)}
    v = analyze_run(write_run(tmp_path, {"horovodrun.log": _stall(missing)})).verdict
    assert len(v.culprit.ranks) != 1
