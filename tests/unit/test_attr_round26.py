"""Rules from rounds 25 and 26 of blind cases, one small case each: fairseq's minimum loss scale on every
rank is numerical; a kernel log whose file name holds a tool's name beside the host's; a start-up line
that gives the pid before the rank; the scheduler's end of another job in the same directory; a framework's
error on every node alike names no one; Horovod's `[missing ranks: ...]` names the ranks it lists. Round 26a:
srun's `Out Of Memory` task line counts among the tasks that show one launcher a node; an error raised by
every process of one node names that node's ranks; a lone rank waiting in a collective the others, heard
from before, never entered is named."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_fairseqs_minimum_loss_scale_on_every_rank_is_numerical_not_the_applications_exception(tmp_path):
    out = []
    for r in range(4):
        out += [f"{r}: 2023-02-11 04:12:{10 + r:02d} | INFO | fairseq.trainer | NOTE: gradient overflow detected, "
                "ignoring gradient, setting loss scale to: 0.0001",
                f"{r}: Traceback (most recent call last):",
                f"{r}:   File \"fairseq/trainer.py\", line 1001, in train_step",
                f"{r}: FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding. "
                "Try lowering the learning rate, using gradient clipping or increasing the batch size."]
    v = analyze_run(write_run(tmp_path, {"slurm-5120.out": out})).verdict
    assert v.category is Category.NUMERICAL and not v.restartable


_XID = "[Mon Mar 11 06:51:31 2024] NVRM: Xid (PCI:0000:03:00): 79, pid=40212, name=python3, GPU has fallen off the bus."


def test_a_kernel_logs_file_name_with_a_tools_word_beside_the_host_names_the_host(tmp_path):
    files = {"slurm-77.out": ["epoch 3 step 100 loss 2.31"], "nvidia-smi_dmesg_gpu-n061.txt": [_XID]}
    v = analyze_run(write_run(tmp_path, files)).verdict
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("gpu-n061",)


def test_a_start_up_line_with_the_pid_before_the_rank_places_the_xids_process(tmp_path):
    out = [f"Torch distributed initialized. Hostname gpu-n061, pid {40211 + r}, rank {r} / size 4, local rank {r} / "
           "local size 4." for r in range(4)]
    v = analyze_run(write_run(tmp_path, {"slurm-77.out": out, "gpu-n061.dmesg.txt": [_XID]})).verdict
    assert v.category is Category.GPU_HARDWARE
    assert (v.culprit.ranks, v.culprit.nodes) == ((1,), ("gpu-n061",))


_NCCL_INTERNAL = ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:3376, internal error - "
                  "please report this issue to the NCCL developers, NCCL version 2.25.1")


def test_another_jobs_cancel_in_the_same_directory_is_not_this_jobs_failure(tmp_path):
    smoke = ["All distributed processes registered.",
             "slurmstepd: error: *** JOB 7731488 ON vg-gn0431 CANCELLED AT 2025-06-20T13:36:40 ***"]
    failed = [f"[rank{r}]: {_NCCL_INTERNAL}" for r in (0, 9, 17, 26)]
    v = analyze_run(write_run(tmp_path, {"slurm-7731488.out": smoke, "slurm-7731502.out": failed})).verdict
    assert v.category is Category.FRAMEWORK_CRASH


def test_a_frameworks_error_on_every_node_alike_names_no_node_or_rank(tmp_path):
    out = [f"vg-gn043{1 + r // 8}:20110{r:02d}:20120{r:02d} [{r % 8}] NCCL INFO comm 0x5 rank {r} nRanks 32 - "
           "Init START" for r in range(32)]
    out += [f"[rank{r}]: {_NCCL_INTERNAL}" for r in (0, 4, 9, 12, 17, 23, 26, 30)]
    v = analyze_run(write_run(tmp_path, {"slurm-7731502.out": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH
    assert (v.culprit.ranks, v.culprit.nodes) == ((), ())


def test_horovods_missing_ranks_list_names_the_ranks_that_never_submitted(tmp_path):
    out = [f"[1,{r}]<stdout>:hvd rank {r}/8 local_rank {r % 4} host trn-h2{1 + r // 4} reading shard {r:02d}"
           for r in range(8)]
    out += ["[1,0]<stderr>:WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by "
            "subset of ranks and are waiting for remainder of ranks for more than 60 seconds.",
            "[1,0]<stderr>:Stalled ops:",
            "[1,0]<stderr>:Model/HorovodAllreduce_gradients_dense_MatMul_grad_0 [missing ranks: 3, 6]",
            "[1,0]<stderr>:Model/HorovodAllreduce_gradients_dense_BiasAdd_grad_0 [missing ranks: 3, 6]"]
    v = analyze_run(write_run(tmp_path, {"train_hvd.log": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (3, 6)


def test_sruns_out_of_memory_task_under_torchrun_is_a_launcher_not_rank_1(tmp_path):
    out = [f"[2025-03-18 23:03:3{r},0] torch.distributed.elastic.multiprocessing.api: [WARNING] Sending process "
           f"21880{r} closing signal SIGTERM" for r in range(3)]
    out += ["Root Cause (first observed failure):", "[0]:", "  time      : 2025-03-18_23:03:35",
            "  host      : g-0412.ib.example", "  rank      : 6 (local_rank: 2)", "  exitcode  : -9 (pid: 218806)",
            "  error_file: <N/A>", "  traceback : Signal 9 (SIGKILL) received by PID 218806",
            "slurmstepd: error: Detected 1 oom_kill event in StepId=4410978.0. Some of the step tasks have been "
            "OOM Killed.",
            "srun: error: g-0412: task 1: Out Of Memory",
            "slurmstepd: error: *** STEP 4410978.0 ON g-0409 CANCELLED AT 2025-03-18T23:03:38 ***",
            "srun: error: g-0409: task 0: Terminated"]
    v = analyze_run(write_run(tmp_path, {"slurm-4410978.out": out})).verdict
    assert v.category is Category.HOST
    assert (v.culprit.ranks, v.culprit.nodes) == ((6,), ("g-0412",))


def test_an_error_every_process_of_one_node_raised_names_that_nodes_ranks(tmp_path):
    out = [f"{h}: [2023-06-14 09:31:07,803] [INFO] [launch.py:162:main] global_rank_mapping=defaultdict(<class "
           "'list'>, {'trn-a01': [0, 1, 2, 3], 'trn-a02': [4, 5, 6, 7]})" for h in ("trn-a01", "trn-a02")]
    out += ["trn-a02: FileNotFoundError: [Errno 2] No such file or directory: '/data/c/train_indexmap_doc_idx.npy'"] * 4
    out += ["pdsh@trn-a01: trn-a02: ssh exited with exit code 1"]
    v = analyze_run(write_run(tmp_path, {"train.log": out})).verdict
    assert v.category is Category.APPLICATION
    assert (v.culprit.ranks, v.culprit.nodes) == ((4, 5, 6, 7), ("trn-a02",))


def test_one_rank_alone_in_a_collective_the_others_never_entered_is_named(tmp_path):
    out = [f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8" for r in range(8)]
    out += ["task map: 0-3 gpu-q03, 4-7 gpu-q06", "`Trainer.fit` stopped: `max_epochs=60` reached.",
            "[rank0]:[E524 16:26:45.118802231 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=22118, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) "
            "ran for 1800071 milliseconds before timing out.",
            "srun: error: gpu-q03: task 0: Aborted (core dumped)"]
    v = analyze_run(write_run(tmp_path, {"slurm-1190427.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_a_lone_timeout_with_no_launcher_end_names_no_one(tmp_path):
    # only rank 0's watchdog and everyone's start-up banners: the others may have been torn down before theirs fired
    out = [f"Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/8" for r in range(8)]
    out += ["[rank0]:[E524 16:26:45.118802231 ProcessGroupNCCL.cpp:616] [Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=22118, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) "
            "ran for 1800071 milliseconds before timing out."]
    v = analyze_run(write_run(tmp_path, {"slurm-1190427.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == ()


def test_horovods_stall_warning_alone_does_not_name_the_coordinator(tmp_path):
    out = [f"[1,{r}]<stdout>:hvd rank {r}/8 reading shard {r:02d}" for r in range(8)]
    out += ["[1,0]<stderr>:WARNING: One or more tensors were submitted to be reduced, gathered or broadcasted by "
            "subset of ranks and are waiting for remainder of ranks for more than 60 seconds.",
            "srun: error: trn-h21: task 0: Killed"]
    v = analyze_run(write_run(tmp_path, {"train_hvd.log": out})).verdict
    assert 0 not in v.culprit.ranks


def test_one_error_and_other_exceptions_on_a_node_name_no_rank(tmp_path):
    out = [f"{h}: [2023-06-14 09:31:07,803] [INFO] [launch.py:162:main] global_rank_mapping=defaultdict(<class "
           "'list'>, {'trn-a01': [0, 1, 2, 3], 'trn-a02': [4, 5, 6, 7]})" for h in ("trn-a01", "trn-a02")]
    out += ["trn-a02: FileNotFoundError: [Errno 2] No such file or directory: '/data/c/train_indexmap_doc_idx.npy'"]
    out += ["trn-a02: KeyError: 'doc_idx'"] * 3
    v = analyze_run(write_run(tmp_path, {"train.log": out})).verdict
    assert v.category is Category.APPLICATION and v.culprit.ranks == ()
