"""Rules from rounds 60 and 61 of blind cases (and two shapes rounds 58-59 showed): a stack dump named after its
rank and host places that rank on that host."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict
from nvrx_hpc.attribution.file_hosts import rank_file_host


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def _dump(pid: int, frames: list[str]) -> list[str]:
    return [f"Process {pid}: /usr/bin/python3 -u train_cls.py", "Python v3.10.12 (/usr/bin/python3.10)", "",
            f'Thread {pid} (active): "MainThread"', *frames]


def test_a_stack_dump_named_after_its_rank_and_host_places_the_odd_rank(tmp_path):
    reduce = ["    all_reduce (torch/distributed/distributed_c10d.py:2288)", "    evaluate (train_cls.py:311)"]
    gather = ["    all_gather_into_tensor (torch/distributed/distributed_c10d.py:2951)",
              "    evaluate (train_cls.py:318)"]
    timeouts = [f"[rank{r}]:[E302 12:31:15.790940 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective "
                f"operation timeout: WorkNCCL(SeqNum=58231, OpType={'ALLGATHER' if r == 6 else 'ALLREDUCE'}, "
                f"NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600051 milliseconds before timing out."
                for r in range(8)]
    v = _verdict(tmp_path, {"train.log": timeouts, "pyspy/gn12_rank0.txt": _dump(401772, reduce),
                            "pyspy/gn13_rank6.txt": _dump(388190, gather)})
    assert v.category is Category.DISTRIBUTED_HANG
    assert v.culprit.ranks == (6,) and v.culprit.nodes == ("gn13",)


def test_names_that_hold_no_host_place_nothing():
    for name in ("rank3.log", "train_rank3.log", "pyspy_rank5_pid9931.txt", "node1_rank6.txt", "rank12_gpu3.txt"):
        assert rank_file_host(name) is None, name
    assert rank_file_host("stack-rank6-gpu-a07.log") == "gpu-a07"
