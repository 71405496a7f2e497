"""Round 17's rules, one small case each: torchrun's box and UCX's crash prefix under srun's labels, a bare
SIGBUS, the kernel's OOM kill of a DeepSpeed rank, one node's network errors, the last torchrun block, a
transport error raised as a RuntimeError, and NCCL's old `Ring` lines read for a kernel log's pid."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_a_crash_under_srun_labels_takes_the_rank_of_torchruns_box_for_its_pid(tmp_path):
    out = ["+ srun --label --nodes=2 --ntasks-per-node=1 -- torchrun --nnodes=2 --nproc_per_node=4 train.py",
           "0: g1002:2128869:2129101 [0] NCCL INFO comm 0x5573 rank 0 nranks 8 cudaDev 0 busId 1b000 - Init COMPLETE",
           "1: [g1003:977423 :0:977423] Caught signal 11 (Segmentation fault: address not mapped to object)",
           "1: E0909 13:02:52.734000 977412 torch/distributed/elastic/multiprocessing/api.py:833] failed (exitcode: "
           "-11) local_rank: 2 (pid: 977423) of binary: /usr/bin/python",
           "1: Root Cause (first observed failure):", "1: [0]:", "1:   time      : 2024-09-09_13:02:52",
           "1:   host      : g1003", "1:   rank      : 6 (local_rank: 2)", "1:   exitcode  : -11 (pid: 977423)",
           "0: torch.distributed.elastic.rendezvous.api.RendezvousClosedError",
           "srun: error: g1003: task 1: Exited with exit code 1"]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"slurm-5512.out": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH
    assert (v.culprit.ranks, v.culprit.nodes) == ((6,), ("g1003",))


def test_a_bare_sigbus_is_not_called_a_crash(tmp_path):
    out = ["Root Cause (first observed failure):", "[0]:", "  time      : 2023-11-24_06:18:31",
           "  host      : a100-08", "  rank      : 10 (local_rank: 2)", "  exitcode  : -7 (pid: 94)",
           "  traceback : Signal 7 (SIGBUS) received by PID 94"]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"train.out": out})).verdict
    assert v.category is Category.HOST  # round 47: most often a /dev/shm that ran out, the host's (was unknown)
    assert (v.culprit.ranks, v.culprit.nodes) == ((10,), ("a100-08",))


def test_the_kernels_oom_kill_names_the_rank_deepspeeds_launcher_saw_sigkilled(tmp_path):
    out = ["gpu-b02: [2023-05-17 14:02:14,901] [INFO] [launch.py:161:main] global_rank_mapping=defaultdict(<class "
           "'list'>, {'gpu-b02': [0, 1], 'gpu-b03': [2, 3]})",
           "gpu-b03: [2023-05-17 14:15:22,170] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 41876",
           "gpu-b03: [2023-05-17 14:15:22,171] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 41877",
           "gpu-b03: [2023-05-17 14:15:22,982] [ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'train.py', "
           "'--local_rank=1'] exits with return code = -9"]  # fmt: skip
    dmesg = ["[Wed May 17 14:13:57 2023] Out of memory: Killed process 41877 (python) total-vm:78080448kB, "
             "anon-rss:70123456kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:140000kB oom_score_adj:0"]
    v = analyze_run(write_run(tmp_path, {"slurm-7.out": out, "gpu-b03.dmesg": dmesg})).verdict
    assert v.category is Category.HOST
    assert (v.culprit.ranks, v.culprit.nodes) == ((3,), ("gpu-b03",))


def test_network_errors_of_several_ranks_of_one_node_name_the_node_not_a_rank(tmp_path):
    out = [f"[rank{8 + r}]:gpu-r12:9222{r}:92751 [{r}] transport/net_ib.cc:1696 NCCL WARN NET/IB : Got completion "
           f"from peer 172.19.24.107<41622> with status=12 opcode=0 len=0 vendor err 129 (Send)"
           for r in (4, 6)]  # fmt: skip
    out += [f"[rank{r}]: ncclRemoteError: A call failed possibly due to a network error" for r in (12, 14)]
    v = analyze_run(write_run(tmp_path, {"ray-4412.out": out})).verdict
    assert v.category is Category.NETWORK
    assert (v.culprit.ranks, v.culprit.nodes) == ((), ("gpu-r12",))


def test_the_last_torchrun_block_is_on_the_one_host_left(tmp_path):
    out = ["+ srun torchrun --nnodes 2 --nproc_per_node 2 --rdzv_backend c10d --rdzv_endpoint gpu-d01:29611 t.py",
           "[INFO] distributed init: world_size=4"]
    out += [f"[rank{r}]:[E423 09:46:05.80 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=20731, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
            "1800011 milliseconds before timing out." for r in (0, 1, 2)]  # fmt: skip
    out += ["Root Cause (first observed failure):", "[0]:", "  time      : 2024-04-23_09:46:07",
            "  host      : gpu-d01", "  rank      : 0 (local_rank: 0)", "  exitcode  : -6 (pid: 88471)",
            "srun: error: gpu-d01: task 0: Exited with exit code 1", "srun: error: gpu-d02: task 1: Terminated"]
    v = analyze_run(write_run(tmp_path, {"slurm-99310.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert (v.culprit.ranks, v.culprit.nodes) == ((3,), ("gpu-d02",))


def test_a_transport_error_raised_as_a_runtime_error_is_the_networks(tmp_path):
    out = ["2: Traceback (most recent call last):", '2:   File "trainer.py", line 88, in run',
           "2: RuntimeError: transport retry counter exceeded (this error originated at "
           "tensorpipe/transport/ibv/connection_impl.cc:478)",
           "srun: error: gpu-k03: task 2: Exited with exit code 1", "srun: error: gpu-k01: task 0: Terminated"]
    v = analyze_run(write_run(tmp_path, {"slurm-88214.out": out})).verdict
    assert v.category is Category.NETWORK and v.restartable
    assert "gpu-k03" in v.culprit.nodes


def test_an_xids_pid_takes_its_rank_from_nccls_ring_lines_in_the_job_log(tmp_path):
    out = ["gpu-b14:48212:48283 [3] NCCL INFO Ring 00 : 11[3c000] -> 12[5e000] via P2P/IPC",
           "gpu-b14:48213:48284 [4] NCCL INFO Ring 00 : 12[5e000] -> 13[62000] via P2P/IPC",
           "RuntimeError: cuda runtime error (39) : uncorrectable ECC error encountered"]
    dmesg = ["[Tue Oct  8 08:05:59 2019] NVRM: Xid (PCI:0000:3c:00): 48, pid=48212, An uncorrectable double bit "
             "error (DBE) has been detected on GPU in the framebuffer at partition 6, subpartition 0."]
    v = analyze_run(write_run(tmp_path, {"slurm-771203.out": out, "gpu-b14.dmesg": dmesg})).verdict
    assert v.category is Category.GPU_HARDWARE
    assert (v.culprit.ranks, v.culprit.nodes) == ((11,), ("gpu-b14",))
