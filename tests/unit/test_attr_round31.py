"""Rules from round 31 of blind cases: torch.distributed.launch's `CalledProcessError` quotes the command of the
local rank that failed, and a single node's launch command makes that local rank the global one; a rank whose
watchdog reports the same all-reduce as everyone else's but of another size took another path."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

ECC = "RuntimeError: cuda runtime error (39) : uncorrectable ECC error encountered at THCCachingHostAllocator.cpp:265"


def test_the_legacy_launchers_failed_command_names_the_rank_of_a_gpu_fault(tmp_path):
    log = ["$ python -m torch.distributed.launch --nproc_per_node=8 train.py --dataset cityscapes --cv 0",
           "Traceback (most recent call last):",
           ECC,
           "Traceback (most recent call last):",
           "subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', '--local_rank=5', '--cv', "
           "'0']' returned non-zero exit status 1."]
    v = analyze_run(write_run(tmp_path, {"train_cityscapes_ft.log": log})).verdict
    assert v.category is Category.GPU_HARDWARE and v.culprit.ranks == (5,)


def test_a_launch_over_several_nodes_leaves_the_local_rank_unmapped(tmp_path):
    log = ["$ python -m torch.distributed.launch --nnodes=2 --node_rank=$NODE --nproc_per_node=8 train.py",
           ECC,
           "subprocess.CalledProcessError: Command '['/usr/bin/python', '-u', 'train.py', '--local_rank=5']' returned "
           "non-zero exit status 1."]
    v = analyze_run(write_run(tmp_path, {"train.log": log})).verdict
    assert v.culprit.ranks != (5,)  # local rank 5 of an unknown node is not global rank 5


def _watchdog(rank: int, op: str, numel: int) -> str:
    return (f"[rank{rank}]:[E313 14:38:02.118401553 ProcessGroupNCCL.cpp:607] [Rank {rank}] Watchdog caught collective "
            f"operation timeout: WorkNCCL(SeqNum=2089, OpType={op}, NumelIn={numel}, NumelOut={numel}, "
            "Timeout(ms)=600000) ran for 600002 milliseconds before timing out.")


def test_the_rank_reducing_another_size_in_the_same_all_reduce_is_named(tmp_path):
    out = [_watchdog(r, "ALLREDUCE", 2 if r == 4 else 6582528) for r in range(6)]
    v = analyze_run(write_run(tmp_path, {"train.log": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (4,)
    assert v.restartable is False


def test_all_to_all_sizes_may_differ_by_rank(tmp_path):
    # uneven splits give each rank its own size: no one stands out (round 94 names the one rank alone in a size all
    # the others share, round 89c's short last batch)
    sizes = {1: 6100480, 4: 2}
    out = [_watchdog(r, "ALLTOALL_BASE", sizes.get(r, 6582528)) for r in range(6)]
    v = analyze_run(write_run(tmp_path, {"train.log": out})).verdict
    assert v.culprit.ranks not in ((4,), (1, 4))
