"""Round 24b's rules, one small case each: NCCL's SHM segment on a full /dev/shm is the host's, a runner's
`[host:rank]:` prefix, Horovod's `Stalled ops:` line with its ready ranks, a user's cancel after a stall
report, and horovodrun's per-worker exit lines placed by its `-H` host list."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_nccls_shm_segment_on_a_full_dev_shm_is_the_hosts_and_names_its_rank(tmp_path):
    out = ["node2: node2:7001:7050 [1] NCCL INFO comm 0x55f7 rank 3 nranks 4 cudaDev 1 busId 3d000 commId 0x9f - "
           "Init START",
           "node2: node2:7001:7050 [1] misc/shmutils.cc:72 NCCL WARN Error: failed to extend /dev/shm/nccl-Ab12Cd "
           "to 9637892 bytes",
           "node2: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1275, unhandled system "
           "error (run with NCCL_DEBUG=INFO for details), NCCL version 2.18.1"]
    v = analyze_run(write_run(tmp_path, {"slurm-41.out": out})).verdict
    assert v.category is Category.HOST and v.restartable
    assert (v.culprit.ranks, v.culprit.nodes) == ((3,), ("node2",))


def test_a_runners_host_rank_prefix_is_stripped_so_the_same_exception_on_every_rank_is_the_applications(tmp_path):
    out = [f"[gpu-{1 + r // 2}:{r}]:[rank{r}]: KeyError: 't5905'" for r in range(4)]
    v = analyze_run(write_run(tmp_path, {"slurm-42.out": out})).verdict
    assert v.category is Category.APPLICATION and not v.restartable


def _stall(ready: str) -> list[str]:
    return ["WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks "
            "and are waiting for remainder of ranks for more than 60 seconds.",
            f"Stalled ops: allreduce.fc.weight [ready ranks: {ready}], allreduce.fc.bias [ready ranks: {ready}]"]


def test_a_users_cancel_after_horovods_stall_reports_is_the_hangs_end_and_the_missing_rank_its_culprit(tmp_path):
    out = ["+ mpirun -np 8 -H hv-01:4,hv-02:4 -bind-to none -map-by slot python train_hvd.py",
           *_stall("0, 1, 2, 3, 4, 6, 7"), *_stall("7, 6, 4, 3, 2, 1, 0"),
           "slurmstepd: error: *** JOB 40518 ON hv-01 CANCELLED AT 2018-07-03T16:41:07 ***"]
    v = analyze_run(write_run(tmp_path, {"slurm-40518.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert (v.culprit.ranks, v.culprit.nodes) == ((5,), ("hv-02",))


def test_horovodruns_first_worker_exit_is_placed_by_its_host_list(tmp_path):
    out = ["+ horovodrun -np 4 -H gpu-k21:2,gpu-k22:2 python mnist.py",
           "Process 3 exit with status code 137.", "Terminating remaining workers after failure of Process 3.",
           "Process 0 exit with status code 143.", "Process 1 exit with status code 143.",
           "Process 2 exit with status code 143.",
           "RuntimeError: Horovod detected that one or more processes exited with non-zero status, thus causing the "
           "job to be terminated. The first process to do so was:"]
    v = analyze_run(write_run(tmp_path, {"slurm-266015.out": out})).verdict
    assert v.category is Category.UNKNOWN  # SIGKILL, and nothing says who sent it
    assert (v.culprit.ranks, v.culprit.nodes) == ((3,), ("gpu-k22",))
