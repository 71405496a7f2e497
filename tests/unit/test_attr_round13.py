"""Round 13's rules, one small case each: an InfiniBand adapter's async event, mpirun's timestamped tags,
TorchX role prefixes with Megatron's `Rank N, node H`, torchrun under srun with a cgroup OOM, NCCL channel
lines tying a pid to its rank, a user's cancel after stack dumps inside a collective, a Horovod stall beside
the missing rank's own exception, and a silent rank placed by its torchrun block."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

_WD = ("[rank{r}]:[E901 05:20:03.1 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
       "timeout: WorkNCCL(SeqNum=460631, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
       "600021 milliseconds before timing out.")


def test_an_adapters_async_event_names_its_host_not_the_peers_that_lost_it(tmp_path):
    out = [*(f"node48:3405{i}:3412{i} [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error"
             for i in range(4)),
           "node51:73076:73185 [4] transport/net_ib.cc:1238 NCCL WARN NET/IB : Got completion from peer node48<37948> "
           "with error 12, opcode 2, len 1, vendor err 129",
           "node45:21911:22068 [7] transport/net_ib.cc:1238 NCCL WARN NET/IB : Got completion from peer "
           "10.1.0.48<37950> with error 12, opcode 0, len 32764, vendor err 129"]
    v = analyze_run(write_run(tmp_path, {"slurm-918233.out": out})).verdict
    assert v.category is Category.NETWORK and (v.culprit.ranks, v.culprit.nodes) == ((), ("node48",))


def test_mpiruns_timestamped_tags_place_a_catastrophic_adapter_error(tmp_path):
    out = [f"2019-06-02T15:36:10.1{r}Z: [1,{r}]<stdout>:world_size=8 rank={r} host=gn0{5 + r // 4}" for r in range(8)]
    out += [f"2019-06-02T16:08:41.66{r}Z: [1,{r}]<stdout>:gn06:81{r}:86{r} [{r - 4}] transport/net_ib.cu:80 NCCL WARN "
            "NET/IB : Got async event : local catastrophic error" for r in (4, 5, 6, 7)]
    out += ["2019-06-02T16:08:56.467Z: [1,1]<stdout>:gn05:40122:40170 [1] transport/net_ib.cu:773 NCCL WARN NET/IB : "
            "Got completion with error 12, opcode 1, len 0, vendor err 129"]
    v = analyze_run(write_run(tmp_path, {"slurm-104522.out": out})).verdict
    assert v.category is Category.NETWORK and (v.culprit.ranks, v.culprit.nodes) == ((), ("gn06",))
    assert v.root_cause.endswith("cascade") and "2019-06-02 16:08:41" in v.root_cause


def test_torchx_role_prefixes_and_megatrons_rank_node_line_place_a_nan(tmp_path):
    out = ["i.pretrain/0 [default2]:[rank10]: RuntimeError: Rank 10, node gpu-h03, device 2, iteration -1: Unexpected "
           "result nan (message='found NaN in local grad norm for bucket #0 in backward pass')",
           *(f"i.pretrain/0 [default{r}]:[rank{r}]:[E813 07:25:09.6 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog "
             "caught collective operation timeout: WorkNCCL(SeqNum=2207, OpType=_REDUCE_SCATTER_BASE, NumelIn=5, "
             "NumelOut=1, Timeout(ms)=600000) ran for 600037 milliseconds before timing out." for r in range(4))]
    v = analyze_run(write_run(tmp_path, {"log-nemo_3318842_0.out": out})).verdict
    assert v.category is Category.NUMERICAL and (v.culprit.ranks, v.culprit.nodes) == ((10,), ("gpu-h03",))


def test_srun_running_torchrun_makes_the_oom_task_a_launcher_and_names_the_sigkilled_rank(tmp_path):
    out = ["+ srun -N 2 --ntasks-per-node=1 torchrun --nnodes=2 --nproc-per-node=4 --rdzv-backend=c10d "
           "--rdzv-endpoint=cn-284:29400 rnn.py returnn.config",
           "slurmstepd: error: Detected 1 oom_kill event in StepId=2817345.0. Some of the step tasks have been OOM "
           "Killed.",
           "Root Cause (first observed failure):", "[0]:", "  time      : 2024-01-04_11:48:25",
           "  host      : cn-285.hpc.example.org", "  rank      : 6 (local_rank: 2)", "  exitcode  : -9 (pid: 1873023)",
           "srun: error: cn-285: task 1: Out Of Memory",
           "srun: error: cn-284: task 0: Exited with exit code 1"]
    v = analyze_run(write_run(tmp_path, {"slurm-2817345.out": out})).verdict
    assert v.category is Category.HOST and (v.culprit.ranks, v.culprit.nodes) == ((6,), ("cn-285",))


def test_nccl_channel_lines_tie_a_pid_to_its_rank(tmp_path):
    out = ["gpu-d05: gpu-d05:21877:21990 [2] NCCL INFO Channel 00 : 6[5e000] -> 7[86000] via direct shared memory",
           "gpu-d05: gpu-d05:21877:21990 [2] NCCL INFO Channel 01 : 6[5e000] -> 7[86000] via direct shared memory",
           "gpu-d05: gpu-d05:21878:21991 [3] NCCL INFO Channel 00/0 : 6[5e000] -> 7[86000] [receive] via NET/IB/0",
           "gpu-d05: gpu-d05:21877:21990 [2] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space "
           "left on device",
           "gpu-d04: [2021-05-10 14:03:41,008] [INFO] [launch.py:149:sigkill_handler] Killing subprocess 31002"]
    df = ["gpu-d05$ df -h /dev/shm", "Filesystem      Size  Used Avail Use% Mounted on",
          "tmpfs           252G  252G     0 100% /dev/shm"]
    v = analyze_run(write_run(tmp_path, {"slurm-661204.out": out, "df_devshm.txt": df})).verdict
    assert v.category is Category.HOST and (v.culprit.ranks, v.culprit.nodes) == ((6,), ("gpu-d05",))


def test_a_users_cancel_after_stacks_inside_a_collective_is_a_hang(tmp_path):
    out = ["2022-10-20 14:05:10 | INFO | train_inner | epoch 003:    500 / 852 loss=4.615, num_updates=2204",
           "slurmstepd: error: *** STEP 77310.0 ON a100-n01 CANCELLED AT 2022-10-20T18:02:47 ***",
           "slurmstepd: error: *** JOB 77310 ON a100-n01 CANCELLED AT 2022-10-20T18:02:47 ***"]
    dumps = ["Process 3119013: /opt/conda/bin/python3.8 /opt/conda/bin/fairseq-train data",
             "Thread 0x7F0B2D9F1740 (active): \"MainThread\"",
             "    all_reduce (torch/distributed/distributed_c10d.py:1322)",
             "    all_reduce (fairseq/distributed/utils.py:496)"]
    v = analyze_run(write_run(tmp_path, {"slurm-77310.out": out, "py-spy-dumps.txt": dumps})).verdict
    assert v.category is Category.DISTRIBUTED_HANG  # naming no one, not restartable since round 40


def test_a_horovod_stall_naming_a_rank_leaves_that_ranks_own_exception_the_cause(tmp_path):
    out = ["[1,3]<stderr>:Traceback (most recent call last):",
           "[1,3]<stderr>:  File \"/usr/lib/python3.7/gzip.py\", line 482, in read",
           "[1,3]<stderr>:    raise EOFError(\"Compressed file ended before the \"",
           "[1,3]<stderr>:EOFError: Compressed file ended before the end-of-stream marker was reached",
           "[1,2]<stderr>:[2020-03-30 14:21:07.881932: W horovod/common/stall_inspector.cc:105] One or more tensors "
           "were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder "
           "of ranks for more than 60 seconds.",
           "[1,2]<stderr>:Missing ranks:",
           "[1,2]<stderr>:3: [broadcast.conv1.bias, broadcast.conv1.weight]"]
    v = analyze_run(write_run(tmp_path, {"hvd-mnist-5120044.out": out})).verdict
    assert v.category is Category.APPLICATION and v.culprit.ranks == (3,) and not v.restartable


def test_the_silent_rank_takes_the_node_of_its_torchrun_block(tmp_path):
    out = ["+ srun --ntasks-per-node=1 torchrun --nnodes 2 --nproc_per_node 4 --rdzv_endpoint gpu-c01:29512 train.py",
           *(_WD.format(r=r) for r in range(1, 8))]
    for r in range(1, 8):
        out += ["[0]:", "  time      : 2025-09-01_05:20:04", f"  host      : gpu-c0{1 + r // 4}",
                f"  rank      : {r} (local_rank: {r % 4})", f"  exitcode  : -6 (pid: 5120{r})"]
    v = analyze_run(write_run(tmp_path, {"slurm-881204.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and (v.culprit.ranks, v.culprit.nodes) == ((0,), ("gpu-c01",))


def test_a_pid_in_two_communicators_is_not_ranked_by_its_channel_lines(tmp_path):
    out = ["n1:4242:4300 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/IPC",
           "n1:4242:4301 [1] NCCL INFO Channel 00/0 : 9[1] -> 10[2] via P2P/IPC",
           "n1:4242:4300 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space left on device"]
    v = analyze_run(write_run(tmp_path, {"slurm-5.out": out})).verdict
    assert v.category is Category.HOST and v.culprit.ranks == () and v.culprit.nodes == ("n1",)
