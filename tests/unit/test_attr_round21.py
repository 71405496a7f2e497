"""Round 21's rules, one small case each: srun's tasks under DeepSpeed's per-node launcher, and a launcher's
SIGKILL placed on the host srun reports `Out Of Memory`."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

_MAPPING = ("[2023-02-03 02:41:12,903] [INFO] [launch.py:161:main] global_rank_mapping=defaultdict(<class 'list'>, "
            "{'gpu-c03': [0, 1, 2, 3], 'gpu-c04': [4, 5, 6, 7]})")


def test_a_cgroup_oom_under_deepspeeds_per_node_launcher_names_the_killed_rank_not_srun_task(tmp_path):
    out = [_MAPPING, _MAPPING,
           "slurmstepd: error: Detected 1 oom_kill event in StepId=3318406.0. Some of the step tasks have been OOM "
           "Killed.",
           "[2023-02-03 03:17:53,901] [ERROR] [launch.py:324:sigkill_handler] ['python', '-u', 'train.py', "
           "'--local_rank=3'] exits with return code = -9",
           "srun: error: gpu-c04: task 1: Out Of Memory",
           "srun: error: gpu-c03: task 0: Exited with exit code 250"]
    v = analyze_run(write_run(tmp_path, {"slurm-3318406.out": out})).verdict
    assert v.category is Category.HOST
    # not rank 7: DeepSpeed's `--local_rank=3` is its last process's command, whichever ended (round 23)
    assert (v.culprit.ranks, v.culprit.nodes) == ((), ("gpu-c04",))


def test_torch_2_5_watchdog_progress_and_a_stuck_watchdogs_dump_name_the_rank_behind(tmp_path):
    pg = "ProcessGroupNCCL.cpp:{}] [PG ID 0 PG GUID 0(default_pg) Rank {}]"
    out = [f"gpu-r07: [rank5]:[E625 22:02:10.118 {pg.format(1743, 5)} ProcessGroupNCCL's watchdog got stuck for 480 "
           "seconds without making progress in monitoring enqueued collectives.",
           f"gpu-r07: [rank5]:[E625 22:02:10.118 {pg.format(1533, 5)} ProcessGroupNCCL preparing to dump debug info.",
           f"gpu-r07: [rank5]:[E625 22:02:10.118 {pg.format(1581, 5)} Last enqueued NCCL work: 700, last completed "
           "NCCL work: 700."]
    for r in (0, 1, 2, 3, 4, 6, 7):
        host = "gpu-r06" if r < 4 else "gpu-r07"
        out += [f"{host}: [rank{r}]:[E625 22:08:36.393 {pg.format(632, r)} Watchdog caught collective operation "
                "timeout: WorkNCCL(SeqNum=701, OpType=_ALLGATHER_BASE, NumelIn=16, NumelOut=128, Timeout(ms)=1800000) "
                "ran for 1800030 milliseconds before timing out.",
                f"{host}: [rank{r}]:[E625 22:08:36.393 {pg.format(2271, r)} failure detected by watchdog at work "
                "sequence id: 701 PG status: last enqueued work: 701, last completed work: 700"]
    v = analyze_run(write_run(tmp_path, {"slurm-772301.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert (v.culprit.ranks, v.culprit.nodes) == ((5,), ("gpu-r07",))


def test_a_lost_nodes_launcher_is_the_task_missing_from_sruns_list(tmp_path):
    out = ["Running: srun torchrun --nnodes=4 --nproc_per_node=4 --rdzv_backend=c10d --rdzv_endpoint=c021:29400 "
           "train.py",
           "srun: error: Node failure on c023",
           "slurmstepd: error: *** STEP 2291.0 ON c021 CANCELLED AT 2021-09-11T18:54:07 DUE TO NODE FAILURE, SEE "
           "SLURMCTLD LOG FOR DETAILS ***",
           "srun: error: c021: task 0: Terminated", "srun: error: c022: task 1: Terminated",
           "srun: error: c024: task 3: Terminated"]
    v = analyze_run(write_run(tmp_path, {"slurm-2291.out": out})).verdict
    assert v.category is Category.HOST
    assert (v.culprit.ranks, v.culprit.nodes) == ((8, 9, 10, 11), ("c023",))
