"""Round 20's rules, one small case each: a collector's second stamp before NCCL's prefix and an adapter's
fatal QP event, srun tasks that were one launcher per node, and an mp.spawn worker's error under srun's
label."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_an_adapters_fatal_qp_event_under_two_stamps_names_its_host(tmp_path):
    out = ["2025-11-09 15:39:31.043 +08:00 [2025-11-09 07:39:30] h100-28:238:1219 [0] transport/net_ib.cc:180 NCCL "
           "WARN NET/IB : mlx5_ib0:1 async fatal event on QP (0x7f69f01519a8): local access violation work queue "
           "error",
           "2025-11-09 15:39:31.150 +08:00 [2025-11-09 07:39:31] h100-27:230:1310 [0] transport/net_ib.cc:2451 NCCL "
           "WARN NET/IB : Got completion from peer 172.16.12.34<38081> with status=12 opcode=0 len=0 vendor err 129"]
    v = analyze_run(write_run(tmp_path, {"train-job-551902.log": out})).verdict
    assert v.category is Category.NETWORK and v.culprit.nodes == ("h100-28",)


def test_srun_tasks_one_per_node_are_launchers_whose_blocks_place_the_silent_rank(tmp_path):
    out = [f"[rank{r}]:[E719 03:25:41.1 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=199, OpType=_REDUCE_SCATTER_BASE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
           "ran for 600000 milliseconds before timing out." for r in range(12) if r != 9]  # fmt: skip
    out += [f"srun: error: gpu-m0{3 + t}: task {t}: Exited with exit code 1" for t in range(3)]
    v = analyze_run(write_run(tmp_path, {"slurm-402117.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert (v.culprit.ranks, v.culprit.nodes) == ((9,), ("gpu-m05",))


def test_an_mp_spawn_workers_error_under_srun_label_is_its_global_ranks(tmp_path):
    out = ["0: [2021-10-25 21:40:02,118 INFO] Use GPU: 0 for training, global rank 0 of 8",
           "1: Traceback (most recent call last):", "1: torch.multiprocessing.spawn.ProcessRaisedException:",
           "1: -- Process 2 terminated with the following error:", "1: Traceback (most recent call last):",
           "1: RuntimeError: DataLoader worker (pid 12847) is killed by signal: Killed.",
           "srun: error: cn-g14: task 1: Exited with exit code 1", "srun: error: cn-g13: task 0: Terminated"]
    dmesg = ["[Mon Oct 25 22:44:51 2021] oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,"
             "mems_allowed=0-1,global_oom,task_memcg=/slurm/uid_1207/job_120977/step_0/task_1,task=python,"
             "pid=12847,uid=1207",
             "[Mon Oct 25 22:44:51 2021] Out of memory: Killed process 12847 (python) total-vm:39281640kB, "
             "anon-rss:26472932kB, file-rss:0kB, shmem-rss:12kB, UID:1207 pgtables:54280kB oom_score_adj:0"]
    v = analyze_run(write_run(tmp_path, {"slurm-120977.out": out, "cn-g14_dmesg-T.txt": dmesg})).verdict
    assert v.category is Category.HOST
    assert (v.culprit.ranks, v.culprit.nodes) == ((6,), ("cn-g14",))


def test_rays_actor_died_error_is_the_cascade_of_a_failure_elsewhere(tmp_path):
    out = ["ray.exceptions.ActorDiedError: The actor died unexpectedly before finishing this task."]
    v = analyze_run(write_run(tmp_path, {"ray-4410.out": out})).verdict
    assert v.category is Category.UNKNOWN
