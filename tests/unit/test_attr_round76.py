"""Rules from round 76 of blind cases: each node's local ranks under srun's labels, the fabric manager failing to
start, `last -x`'s crash, an ibstat port down when nothing else failed, NCCL's call log naming the rank that called
another collective, and dumps under a loop's `pid N RANK=R` banners."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict
from nvrx_hpc.attribution.coll_ops import odd_collective, sample_collectives


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def test_a_local_rank_under_srun_label_counts_on_its_own_node(tmp_path):
    out = [f"{n}: NODE_RANK={n} host={host} CUDA_VISIBLE_DEVICES=0,1,2,3 MASTER_ADDR=tgpu-03 MASTER_PORT=29517"
           for n, host in enumerate(("tgpu-03", "tgpu-07"))]
    out += [f"{n}: W0610 09:14:22.917241 {2004411 + 10000 * n} torch/distributed/run.py:779] Setting OMP_NUM_THREADS "
            "environment variable for each process to be 1 in default" for n in (0, 1)]
    out += [f"{n}: [default{lr}]:[plmfit] INFO  rank {4 * n + lr} world_size 8 local_rank {lr} -> cuda:{lr}"
            for n in (0, 1) for lr in range(4)]
    out += ["1: [default1]:Traceback (most recent call last):",
            '1: [default1]:  File "/cluster/home/cnet/plmfit/plmfit/__main__.py", line 88, in <module>',
            "1: [default1]:RuntimeError: CUDA error: unspecified launch failure",
            "slurmstepd: error: NVML: Failed to get usage(15): GPU is lost"]
    out += [f"0: [default{r}]:[rank{r}]:[E610 10:01:39.69 ProcessGroupNCCL.cpp:1515] [PG 0 Rank {r}] Process group "
            "watchdog thread terminated with exception: NCCL error: remote process exited or there was a network "
            "error, NCCL version 2.20.5" for r in range(4)]  # fmt: skip
    out += ["1: ============================================================", "1: train.py FAILED",
            "1: ------------------------------------------------------------", "1: Failures:"]
    for i, (rank, local) in enumerate(((4, 0), (6, 2), (7, 3)), start=1):
        out += [f"1: [{i}]:", "1:   time      : 2024-06-10_10:01:40", "1:   host      : tgpu-07",
                f"1:   rank      : {rank} (local_rank: {local})", f"1:   exitcode  : -6 (pid: {2014432 + local})",
                "1:   error_file: <N/A>"]
    out += ["1: ------------------------------------------------------------",
            "1: Root Cause (first observed failure):", "1: [0]:", "1:   time      : 2024-06-10_10:01:37",
            "1:   host      : tgpu-07", "1:   rank      : 5 (local_rank: 1)", "1:   exitcode  : 1 (pid: 2014433)",
            "1:   error_file: <N/A>", "1: ============================================================",
            "srun: error: tgpu-07: task 1: Exited with exit code 1",
            "srun: error: tgpu-03: task 0: Exited with exit code 1"]
    v = _verdict(tmp_path, {"slurm-4471902.out": out})
    assert v.category is Category.GPU_HARDWARE
    assert v.culprit.ranks == (5,) and v.culprit.nodes == ("tgpu-07",)


def test_a_fabric_manager_that_failed_to_start_is_every_rank_of_its_node(tmp_path):
    out = [f"[init] rank={r} local_rank={r % 8} host={'dgx-c12' if r < 8 else 'dgx-c14'}" for r in range(16)]
    out += ["[rank3]:[E912 03:31:02.1 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
            "1800021 milliseconds before timing out."]  # fmt: skip
    journal = ["Sep 12 02:58:47 dgx-c14 nv-fabricmanager[3911]: fabric manager NVSwitch device count 3 is not "
               "matching with expected 4 devices from the topology",
               "Sep 12 02:58:47 dgx-c14 systemd[1]: Failed to start NVIDIA fabric manager service."]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-77410.out": out, "fabricmanager_check.txt": journal})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("dgx-c14",)
    assert v.culprit.ranks == tuple(range(8, 16))


def test_sessions_cut_by_a_crash_are_the_host_going_down(tmp_path):
    session = ["[root@vision-srv02 ~]# last -x | head -4",
               "ali      pts/0        10.30.1.77       Thu Mar  9 11:52   still logged in",
               "reboot   system boot  4.18.0-425.10.1. Thu Mar  9 11:49   still running",
               "ali      pts/1        10.30.1.77       Thu Mar  9 11:45 - crash  (00:03)"]
    v = _verdict(tmp_path, {"journal_previous_boot.txt": session, "train.txt": ["Epoch 0/0  3%  71/2304"]})
    assert v.category is Category.HOST and v.culprit.nodes == ("vision-srv02",)


def test_a_port_down_on_one_host_when_nothing_failed_is_a_low_confidence_network_guess(tmp_path):
    ibstat = ["[root@gn42 ~]# ibstat", "CA 'mlx5_3'", "\tPort 1:", "\t\tState: Down", "\t\tPhysical state: Disabled"]
    v = _verdict(tmp_path, {"ibstat_gn42.txt": ibstat, "console.txt": ["rank 3: make_connection ..."]})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("gn42",) and v.confidence <= 0.3


def _coll_log(odd_rank: int | None) -> list[str]:
    procs = [(f"c12r2n0{3 + r // 4}", 51000 + r, f"0x7f{r:02d}2d465da0") for r in range(8)]
    lines = [f"{host}:{pid}:{pid} [{r % 4}] NCCL INFO comm {comm} rank {r} nranks 8 cudaDev {r % 4} busId c1000 - "
             "Init COMPLETE" for r, (host, pid, comm) in enumerate(procs)]  # fmt: skip
    for count in (0x3F2, 0x3F3):
        for r, (host, pid, comm) in enumerate(procs):
            kind = "AllGather" if r == odd_rank and count == 0x3F3 else "AllReduce"
            lines.append(f"{host}:{pid}:{pid} [{r % 4}] NCCL INFO {kind}: opCount {count:x} sendbuff 0x7f "
                         f"recvbuff 0x7f count 4718592 datatype 7 op 0 root 0 comm {comm} [nranks=8] stream 0x7ff7")
    return lines


def test_nccls_call_log_names_the_rank_that_called_another_collective(tmp_path):
    log = [*_coll_log(6), "srun: forcing job termination",
           "slurmstepd: error: *** STEP 221934.0 ON c12r2n03 CANCELLED AT 2021-10-08T16:47:21 ***"]
    v = _verdict(tmp_path, {"run_2node_coll.log": log})
    assert v.category is Category.DISTRIBUTED_HANG and v.restartable is False
    assert v.culprit.ranks == (6,) and v.culprit.nodes == ("c12r2n04",)


def test_a_call_log_where_every_rank_agrees_names_no_one():
    assert odd_collective([sample_collectives("\n".join(_coll_log(None)).encode())]) is None


def test_dumps_under_a_loops_pid_and_rank_banners_name_the_ranks_outside_the_collective(tmp_path):
    def dump(host: str, pid: int, rank: int, frame: str) -> list[str]:
        return [f"== {host} pid {pid} RANK={rank}", f"Process {pid}: /usr/bin/python pretrain_gpt.py",
                "Python v3.12.3 (/usr/bin/python3.12)", "", f'Thread {pid} (idle): "MainThread"', frame,
                "    train_step (megatron/training/training.py:1211)", ""]
    gather = "    all_gather_object (torch/distributed/distributed_c10d.py:3014)"
    p2p = "    synchronize (torch/cuda/__init__.py:985)"
    dumps = [line for r in range(8) for line in dump("dgx-b03" if r < 4 else "dgx-b04", 48000 + r, r,
                                                      p2p if r in (6, 7) else gather)]
    v = _verdict(tmp_path, {"pyspy_all_ranks.txt": dumps, "slurm-99821.out": ["iteration 1200 | loss 2.31"]})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (6, 7)


# ---- round 77 ----------------------------------------------------------------------------------------------------


def test_older_torchs_inline_rank_under_a_launchers_srun_label_is_the_rank(tmp_path):
    out = [f"{n}: [E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: "
           f"WorkNCCL(SeqNum=118344, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1802379 "
           "milliseconds before timing out." for r in range(1, 32) for n in (r // 8,)]  # fmt: skip
    out += [f"srun: error: hgx-a01{2 + n}: task {n}: Exited with exit code 1" for n in range(4)]
    v = _verdict(tmp_path, {"slurm-9930412.out": out})
    assert v.category is Category.DISTRIBUTED_HANG
    assert v.culprit.ranks == (0,) and v.culprit.nodes == ("hgx-a012",)


def test_a_one_node_dump_named_by_its_local_rank_and_taken_on_its_host(tmp_path):
    def dump(local: int, frames: list[str]) -> list[str]:
        pid = 30417 + local
        return [f'jhkim@gpu-n17:~$ sudo env "PATH=$PATH" py-spy dump --pid {pid}',
                f"Process {pid}: /usr/bin/python -u train_ft.py --local_rank={local} --bs 64",
                "Python v3.8.11 (/usr/bin/python3.8)", "", f'Thread {pid} (active): "MainThread"', *frames, ""]
    own = ["    _sync_params (torch/nn/parallel/distributed.py:1170)", "    validation (train_ft.py:212)"]
    barrier = ["    barrier (torch/distributed/distributed_c10d.py:2524)", "    train (train_ft.py:178)"]
    dumps = [line for local in range(4) for line in dump(local, own if local == 0 else barrier)]
    console = ["[E ProcessGroupNCCL.cpp:737] [Rank 1] Watchdog caught collective operation timeout: "
               "WorkNCCL(SeqNum=90211, OpType=BARRIER, Timeout(ms)=1800000) ran for 1800482 milliseconds before "
               "timing out."]  # fmt: skip
    v = _verdict(tmp_path, {"py-spy.txt": dumps, "console.txt": console})
    assert v.category is Category.DISTRIBUTED_HANG
    assert v.culprit.ranks == (0,) and v.culprit.nodes == ("gpu-n17",)


def test_a_prolog_failure_in_a_nodes_own_slurmd_log_names_that_node(tmp_path):
    slurmd = ["[2018-05-17T01:05:47.302] error: /etc/slurm/prolog.d: No such file or directory",
              "[2018-05-17T01:05:47.302] error: [job 23] prolog failed status=254:0"]
    v = _verdict(tmp_path, {"hpc-g2_slurmd.log": slurmd, "session.txt": ["$ srun -N2 hostname"]})
    assert v.category is Category.SCHEDULER and v.culprit.nodes == ("hpc-g2",)


def test_sallocs_node_failure_is_the_lost_node_and_its_ranks(tmp_path):
    hosts = ("worker-3", "worker-7", "worker-6", "worker-8")
    out = ["[mkrol@login-0 run]$ salloc -N4 --gpus-per-node=8 --exclusive -t 12:00:00",
           "salloc: Nodes worker-[3,6-8] are ready for job", "[mkrol@login-0 run]$ srun -l -N4 -n4 hostname | sort"]
    out += [f"{n}: {host}" for n, host in enumerate(hosts)]
    out += ["[mkrol@login-0 run]$ srun -l -N4 -n4 --ntasks-per-node=1 bash -c 'echo \"node_rank=$SLURM_NODEID "
            "host=$(hostname)\"; torchrun --nnodes=4 --nproc_per_node=8 --node_rank=$SLURM_NODEID train.py'"]
    out += [f"{n}: node_rank={n} host={host}" for n, host in enumerate(hosts)]
    out += [f"{n}: [rank{r}]:[E611 09:31:58.4 ProcessGroupNCCL.cpp:2271] [PG ID 1 PG GUID 1 Rank {r}] failure "
            "detected by watchdog at work sequence id: 5518 PG status: last enqueued work: 5518, last completed "
            "work: 5517" for n in (0, 1, 3) for r in range(8 * n, 8 * n + 8)]  # fmt: skip
    out += ["salloc: error: Node failure on worker-6"]
    out += [f"srun: error: {hosts[n]}: task {n}: Exited with exit code 1" for n in (0, 1, 3)]
    v = _verdict(tmp_path, {"salloc_terminal.txt": out})
    assert v.category is Category.HOST and v.culprit.nodes == ("worker-6",)
    assert v.culprit.ranks == tuple(range(16, 24))


def test_a_machine_check_names_the_one_process_that_crashed_on_its_node(tmp_path):
    out = [f"{r}: rank {r}/16 on cn12{1 + r // 4 + (r >= 12)} using cuda:{r % 4}" for r in range(16)]
    out += ["srun: error: cn125: task 13: Segmentation fault (core dumped)",
            "srun: error: cn125: tasks 12,14-15: Terminated"]
    kernel = ["Sep 30 20:41:17 cn125 kernel: mce: [Hardware Error]: Machine check events logged",
              "Sep 30 20:41:17 cn125 kernel: EDAC MC1: 1 CE memory read error on CPU_SrcID#1_Ha#0_Chan#2_DIMM#0"]
    v = _verdict(tmp_path, {"slurm-36.out": out, "cn125_journal.txt": kernel})
    assert v.category is Category.HOST and v.culprit.nodes == ("cn125",) and v.culprit.ranks == (13,)


# ---- round 78 ----------------------------------------------------------------------------------------------------


def test_rays_memory_monitor_names_the_node_of_the_worker_it_killed(tmp_path):
    log = ["(raylet) [2025-10-11 12:03:19,771 E 3529 3529] (raylet) node_manager.cc:3064: 1 Workers (tasks / actors) "
           "killed due to memory pressure (OOM), 0 Workers crashed due to other reasons at node (ID: 7c21e0d9, IP: "
           "10.4.77.21) over the last time period.",
           "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory.",
           "Memory on the node (IP: 10.4.77.21, ID: 7c21e0d9a4f3) where the task was running was 1.86TB / 1.95TB "
           "(0.953 / 0.95), which exceeds the memory usage threshold of 0.95."]  # fmt: skip
    v = _verdict(tmp_path, {"llamafactory_ray_train.log": log})
    assert v.category is Category.HOST and v.culprit.nodes == ("10.4.77.21",)


def test_an_sacct_table_pasted_out_of_line_names_no_host():
    table = b"\n".join([
        b"JobID                     JobName  Partition        NodeList    Elapsed      State ExitCode     MaxRSS",
        b"------------ -------------------- ---------- --------------- ---------- ---------- -------- ----------",
        b"712044                  skyrl-h100     gpu-h100        c611-071   00:39:11     FAILED      1:0",
    ])
    from nvrx_hpc.attribution.job_hosts import scheduler_hosts

    assert scheduler_hosts(table) == set()  # the column cuts fall inside its words: no half a host name


# ---- round 80 ----------------------------------------------------------------------------------------------------


def _watchdogs(seqs: dict[int, int]) -> list[str]:
    return [f"[E ProcessGroupNCCL.cpp:737] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum="
            f"{seq}, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800311 milliseconds before timing out."
            for r, seq in seqs.items()]


def test_the_one_rank_whose_watchdog_counted_more_calls_than_all_the_others_took_its_own_path(tmp_path):
    v = _verdict(tmp_path, {"node1.log": _watchdogs({0: 10, 1: 10, 2: 10, 3: 13})})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (3,)
    assert v.restartable is False  # its code went its own way: a restart replays it


def test_half_the_ranks_ahead_is_no_one_rank_out_of_step(tmp_path):
    v = _verdict(tmp_path, {"node1.log": _watchdogs({0: 10, 1: 10, 2: 13, 3: 13})})
    assert v.culprit.ranks == ()
