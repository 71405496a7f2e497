"""Round 22's rules, one small case each: a quota error's rank from the one task that exited on its own,
pdsh's address prefix, and launcher ends that differ are not one teardown."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_a_quota_error_with_no_rank_is_the_one_task_that_exited_on_its_own(tmp_path):
    out = ["Traceback (most recent call last):", '  File "tools/train.py", line 121, in <module>',
           "OSError: [Errno 122] Disk quota exceeded",
           "srun: error: gpu-e01: task 0: Exited with exit code 1",
           "slurmstepd: error: *** STEP 7781.0 ON gpu-e01 CANCELLED AT 2024-12-09T06:49:31 ***",
           "srun: error: gpu-e01: tasks 1-7: Terminated", "srun: error: gpu-e02: tasks 8-15: Terminated"]
    v = analyze_run(write_run(tmp_path, {"slurm-7781.out": out})).verdict
    assert v.category is Category.HOST and not v.restartable
    assert (v.culprit.ranks, v.culprit.nodes) == ((0,), ("gpu-e01",))


def test_pdshs_address_prefix_is_stripped_and_names_the_line_host(tmp_path):
    out = ["10.52.0.22: gpu-scalar02:30951:31127 [7] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
           "10.52.0.21<44511> failed : Software caused connection abort"]
    v = analyze_run(write_run(tmp_path, {"slurm-230411.out": out})).verdict
    assert v.category is Category.NETWORK and v.culprit.nodes == ("gpu-scalar02",)


def test_launchers_that_end_differently_on_each_node_are_not_one_teardown(tmp_path):
    def end(host: str, stamp: str, local: int, code: int) -> str:
        return (f"{host}: [2023-10-16 {stamp},579] [ERROR] [launch.py:321:sigkill_handler] ['python', '-u', "
                f"'train.py', '--local_rank={local}'] exits with return code = {code}")

    mapping = ("gpu-m01: [2023-10-16 05:01:02,100] [INFO] [launch.py:163:main] global_rank_mapping=defaultdict("
               "<class 'list'>, {'gpu-m01': [0, 1, 2, 3], 'gpu-m02': [4, 5, 6, 7]})")
    out = [mapping, end("gpu-m01", "07:06:02", 1, -9), end("gpu-m02", "07:36:03", 0, -6)]
    v = analyze_run(write_run(tmp_path, {"slurm-5521.out": out})).verdict
    assert v.category is Category.UNKNOWN
    assert (v.culprit.ranks, v.culprit.nodes) == ((1,), ("gpu-m01",))


def test_horovods_ready_ranks_name_the_one_missing_and_mpiruns_slots_its_host(tmp_path):
    ready = ", ".join(str(r) for r in (5, 0, 7, 2, 1, 6, 4))
    out = ["mpirun -np 8 -H cn-s01:4,cn-s02:4 -bind-to none -map-by slot python train.py",
           "WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and "
           "are waiting for remainder of ranks for more than 60 seconds. This may indicate that different ranks are "
           f"trying to submit different tensors. Stalled ops: DistributedSGD_Allreduce_0 [ready ranks: {ready}]"]
    v = analyze_run(write_run(tmp_path, {"slurm-2290417.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert (v.culprit.ranks, v.culprit.nodes) == ((3,), ("cn-s01",))


def test_mpirun_mapping_by_node_places_no_rank_by_slots(tmp_path):
    out = ["mpirun -np 8 -H cn-s01:4,cn-s02:4 --map-by node python train.py",
           "WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks and "
           "are waiting for remainder of ranks. Stalled ops: op_0 [ready ranks: 0, 1, 2, 4, 5, 6, 7]"]
    v = analyze_run(write_run(tmp_path, {"slurm-2290418.out": out})).verdict
    assert v.culprit.ranks == (3,) and v.culprit.nodes == ()
