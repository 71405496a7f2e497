"""Rules drawn from round 99 after its first contact was scored: a kernel panic is its node lost, a disk that only
one node's ranks found full is that node's, scipy's Hungarian matching on a NaN cost is the loss gone bad, and
torchpack's `dist-run -H` places ranks as mpirun's does."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category


def _timeouts(ranks, host_of):
    return [f"{host_of(r)}:{1000 + r}:{2000 + r} [{r % 4}] NCCL INFO comm 0x55e0 rank {r} nranks 8 cudaDev {r % 4} "
            f"busId {r % 4 + 1}a000 - Init COMPLETE" for r in range(8)] + [
        f"[E ProcessGroupNCCL.cpp:587] [Rank {r}] Watchdog caught collective operation timeout: "
        "WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1803314 milliseconds before timing out."
        for r in ranks]


def test_a_kernel_panic_is_its_node_lost_with_every_rank_on_it(tmp_path):
    out = _timeouts(range(4), lambda r: "f12u02" if r < 4 else "f12u06")
    vmcore = ["[1212324.990112] BUG: kernel NULL pointer dereference, address: 0000000000000008",
              "[1212325.028009] Kernel panic - not syncing: Fatal exception"]
    v = _verdict(tmp_path, {"ddp.out": out, "f12u06_vmcore-dmesg.txt": vmcore})
    assert v.category is Category.HOST and list(v.culprit.nodes) == ["f12u06"]
    assert list(v.culprit.ranks) == [4, 5, 6, 7]


def test_a_disk_only_one_nodes_ranks_found_full_is_that_nodes(tmp_path):
    log = [f"{r}: OSError: [Errno 28] No space left on device" for r in (16, 18, 21)]
    log += ["srun: error: gn-c06: tasks 8-15: Aborted (core dumped)", "srun: error: gn-c05: tasks 0-7: Aborted",
            "srun: error: gn-c08: tasks 24-31: Aborted (core dumped)",
            "srun: error: gn-c07: tasks 17,19-20,22-23: Aborted (core dumped)",
            "srun: error: gn-c07: tasks 16,18,21: Killed"]
    v = _verdict(tmp_path, {"slurm-5520917.out": log})
    assert v.category is Category.HOST and list(v.culprit.nodes) == ["gn-c07"] and not v.culprit.ranks


def test_hungarian_matching_on_a_nan_cost_is_numerical(tmp_path):
    log = ["[1,13]<stderr>:  File \"scipy/optimize/_lsap.py\", line 93, in linear_sum_assignment",
           "[1,13]<stderr>:ValueError: matrix contains invalid numeric entries"]
    v = _verdict(tmp_path, {"slurm-4471823.out": log})
    assert v.category is Category.NUMERICAL and list(v.culprit.ranks) == [13]


def test_torchpacks_dist_run_host_list_places_the_ranks(tmp_path):
    log = ["+ torchpack dist-run -np 16 -H av-gpu17:8,av-gpu18:8 python tools/train.py configs/x.yaml",
           "[1,13]<stderr>:RuntimeError: shapes cannot be multiplied (4x3 and 5x6)"]
    assert list(_verdict(tmp_path, {"slurm-4471823.out": log}).culprit.nodes) == ["av-gpu18"]
