"""Rules from rounds 25 and 26 of blind cases, one small case each: fairseq's minimum loss scale on every
rank is numerical; a kernel log whose file name holds a tool's name beside the host's; a start-up line
that gives the pid before the rank; the scheduler's end of another job in the same directory; a framework's
error on every node alike names no one; Horovod's `[missing ranks: ...]` names the ranks it lists."""

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
