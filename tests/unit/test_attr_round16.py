"""Round 16's rules, one small case each: milabench's `bench.host [stderr]` prefix and a console that wraps
the watchdog's line, a launcher's report of a rank's crash signal, Ray losing a node, and a launcher's exit
line placed by the exit code srun saw."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def _wrapped_timeout(host: str, rank: int) -> list[str]:
    return [f"dinov2-nodes.{host} [stderr] [rank{rank}]:[E909 09:55:29.3 ProcessGroupNCCL.cpp:607] [Rank {rank}] "
            "Watchdog caught collective operation timeout: ",
            f"dinov2-nodes.{host} [stderr] WorkNCCL(SeqNum=2070, OpType=REDUCE, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600030 milliseconds before timing out."]  # fmt: skip


def test_a_wrapped_watchdog_line_under_a_bench_host_prefix_names_the_silent_rank_and_its_host(tmp_path):
    out = ["dinov2-nodes.cn-d003 [start] torchrun --nnodes=2 --nproc-per-node=4 main.py"]
    for rank in (0, 1, 3, 4, 5, 6, 7):
        out += _wrapped_timeout("cn-d003" if rank < 4 else "cn-d004", rank)
    v = analyze_run(write_run(tmp_path, {"dinov2-nodes.log": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert (v.culprit.ranks, v.culprit.nodes) == ((2,), ("cn-d003",))


def test_an_exception_under_a_bench_host_prefix_is_that_ranks_on_that_host(tmp_path):
    out = ["diffusion-nodes.cn-n001.server.example [stderr] [rank11]: Traceback (most recent call last):",
           'diffusion-nodes.cn-n001.server.example [stderr] [rank11]:   File "main.py", line 54, in models',
           "diffusion-nodes.cn-n001.server.example [stderr] [rank11]: FileNotFoundError: [Errno 2] No such file or "
           "directory: '/tmp/cache/unet/model.safetensors'",
           "diffusion-nodes.cn-n002.server.example [stderr] [rank0]:[E911 14:13:30.5 ProcessGroupNCCL.cpp:607] "
           "[Rank 0] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, "
           "NumelOut=1, Timeout(ms)=600000) ran for 600000 milliseconds before timing out."]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"diffusion-nodes.log": out})).verdict
    assert v.category is Category.APPLICATION
    assert (v.culprit.ranks, v.culprit.nodes) == ((11,), ("cn-n001",))


def test_a_launcher_seeing_a_rank_end_by_sigsegv_reports_a_crash_before_the_peers_remote_errors(tmp_path):
    out = ["e21: [2023-05-20 12:07:44,510] [INFO] [launch.py:162:main] global_rank_mapping=defaultdict(<class "
           "'list'>, {'e21': [0, 1], 'e22': [2, 3]})",
           "e22: [2023-05-20 12:09:28,803] [ERROR] [launch.py:434:sigkill_handler] ['python', '-u', 'main.py', "
           "'--local_rank=1'] exits with return code = -11",
           "e21: RuntimeError: NCCL communicator was aborted on rank 1.  Original reason for failure was: NCCL error: "
           "remote process exited or there was a network error, NCCL version 2.14.3",
           "e21: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
           "prematurely."]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"slurm-560318.out": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.restartable
    assert (v.culprit.ranks, v.culprit.nodes) == ((), ("e22",))  # local rank 1 is e22's last child (round 23)


def test_ray_marking_a_node_dead_names_that_nodes_host_and_its_ranks(tmp_path):
    out = ["Starting HEAD at gpu-h01 (10.8.2.31)", "Starting WORKER 1 at gpu-h02 (10.8.2.32)",
           "Starting WORKER 2 at gpu-h03 (10.8.2.33)"]
    out += [f"(RayTrainWorker pid={700 + r}, ip=10.8.2.3{1 + r // 2}) Setting up process group for: env:// "
            f"[rank={r}, world_size=6]" for r in (0, 2, 4)]
    out += ["2024-04-11 15:10:16,464\tWARNING worker.py:2037 -- The node with node id: 5c7a1e and address: 10.8.2.32 "
            "and node name: 10.8.2.32 has been marked dead because the detector has missed too many heartbeats.",
            "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
            "srun: error: gpu-h02: task 1: Exited with exit code 1",
            "srun: error: gpu-h01: task 0: Exited with exit code 1"]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"slurm-5518.out": out})).verdict
    assert v.category is Category.HOST and v.restartable
    assert (v.culprit.ranks, v.culprit.nodes) == ((2, 3), ("gpu-h02",))


def test_a_launchers_exit_line_without_a_host_is_placed_by_the_exit_code_srun_saw(tmp_path):
    out = ["[2023-04-17 03:01:22,411] [INFO] [launch.py:161:main] global_rank_mapping=defaultdict(<class 'list'>, "
           "{'gpu-j01': [0, 1], 'gpu-j02': [2, 3]})",
           "[2023-04-17 03:02:34,106] [ERROR] [launch.py:434:sigkill_handler] ['python', '-u', 'main.py', "
           "'--local_rank=0'] exits with return code = -9",
           "[2023-04-17 03:02:36,532] [ERROR] [launch.py:434:sigkill_handler] ['python', '-u', 'main.py', "
           "'--local_rank=1'] exits with return code = -15",
           "srun: error: gpu-j01: task 0: Exited with exit code 247",
           "srun: error: gpu-j02: task 1: Exited with exit code 241"]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"slurm-66120.out": out})).verdict
    assert v.category is Category.UNKNOWN
    assert (v.culprit.ranks, v.culprit.nodes) == ((0,), ("gpu-j01",))
