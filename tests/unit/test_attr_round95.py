"""Rules drawn from round 95 after its first contact was scored: a fault of one node's host part (its container
runtime, its /dev/shm, its GPUs held) named by the node alone, a native library's own error and torch.compile's,
a node's process limit, an EFA adapter that failed its set-up, torch's desync report, a kernel console named
after its node, and the ranks of two tracebacks printed without a rank."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category


def _timeouts(ranks, seq=7):
    return [f"[rank{r}]:[E506 08:45:20.1 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=6, NumelOut=6, Timeout(ms)=600000) ran for "
            f"600086 milliseconds before timing out." for r in ranks]


def test_a_container_that_did_not_start_on_one_nodes_tasks_names_the_node_alone(tmp_path):
    log = [f"{r}: FATAL:   container creation failed: mount hook function failure: while mounting image: kernel "
           f"reported a bad superblock for squashfs image" for r in (4, 5, 6, 7)]
    log += ["srun: error: gn-042: tasks 4-7: Exited with exit code 255",
            "srun: error: gn-041: tasks 0-3: Killed", "srun: error: gn-043: tasks 8-11: Killed"]
    v = _verdict(tmp_path, {"job.out": log})
    assert v.category is Category.HOST and v.culprit.nodes == ("gn-042",) and v.culprit.ranks == ()


def test_a_cgroup_oom_kill_still_names_the_tasks_it_killed(tmp_path):
    log = ["slurmstepd: error: Detected 2 oom_kill events in StepId=88.0. Some of the step tasks have been OOM Killed.",
           "srun: error: cn-12: tasks 4-5: Out Of Memory", "srun: error: cn-11: tasks 0-3: Killed"]
    v = _verdict(tmp_path, {"slurm-88.out": log})
    assert v.category is Category.HOST and set(v.culprit.ranks) == {4, 5}


def test_transformer_engines_own_cublas_error_is_a_framework_crash(tmp_path):
    log = [f"{r}: [rank{r}]: RuntimeError: /opt/te/transformer_engine/common/gemm/cublaslt_gemm.cu:326 in "
           f"function cublas_gemm: cuBLAS Error: the requested functionality is not supported" for r in (5, 18)]
    assert _verdict(tmp_path, {"slurm-1.out": log}).category is Category.FRAMEWORK_CRASH


def test_a_cuda_runtime_error_passed_on_by_a_library_is_not_taken_for_its_own(tmp_path):
    log = ["0: [rank3]: RuntimeError: /workspace/te/pytorch/csrc/userbuffers/userbuffers-host.cpp:501 in function "
           "create_communicator_grouped2: CUDA Error: invalid argument"]
    assert _verdict(tmp_path, {"slurm-2.out": log}).category is not Category.FRAMEWORK_CRASH


def test_inductors_own_error_is_a_framework_crash_but_a_full_disk_under_it_is_the_hosts(tmp_path):
    log = ["[rank13]: torch._inductor.exc.InductorError: TypeError: cannot pickle '_thread.RLock' object"]
    assert _verdict(tmp_path / "a", {"train.log": log}).category is Category.FRAMEWORK_CRASH
    full = ["3: [rank27]: torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:",
            "3: [rank27]: OSError: [Errno 28] No space left on device: '/tmp/torchinductor_u/triton/0/tmp.7b1c'"]
    assert _verdict(tmp_path / "b", {"train.log": full}).category is Category.HOST


def test_a_thread_that_could_not_start_is_the_nodes_process_limit(tmp_path):
    log = ["Tue Mar 10 03:39:07 2026[1,68]<stderr>:OpenBLAS blas_thread_init: pthread_create failed for thread 9 of "
           "16: Resource temporarily unavailable",
           "Tue Mar 10 03:39:07 2026[1,68]<stderr>:OpenBLAS blas_thread_init: RLIMIT_NPROC 4096 current, 4096 max"]
    v = _verdict(tmp_path, {"job.o881274": log})
    assert v.category is Category.HOST and v.restartable is True


def test_an_efa_adapter_that_failed_its_set_up_on_one_host_is_that_hosts_network(tmp_path):
    log = ["[1,31]<stdout>:ip-172-31-40-77:23417:24247 [7] create_nccl_ofi_component:459 NCCL WARN NET/OFI Couldn't "
           "open AV. RC: -22, ERROR: Invalid argument"]
    log += [f"[1,{r}]<stderr>:[2025-01-01 10:00:00.000000: W horovod/common/stall_inspector.cc:107] One or more "
            f"tensors were submitted to be reduced by a subset of ranks" for r in (0,)]
    dmesg = ["[ 2817.403130] infiniband efa_0: Failed to allocate pd[-12]"]
    v = _verdict(tmp_path, {"train.log": log, "dmesg-ip-172-31-40-77.txt": dmesg})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("ip-172-31-40-77",)


def test_the_rank_torchs_desync_report_names_is_the_late_one(tmp_path):
    log = []
    for r in (0, 1, 4):
        log += _timeouts([r], 270) + [
            f"[rank{r}]:[E419 22:55:31.3 ProcessGroupNCCL.cpp:1937] Rank {r}",
            f"         - [{r}] Timeout at collective: ALLREDUCE, #402",
            "         - To our best knowledge, the lagging/dead/mismatched ranks that caused the desync are:",
            "             [7] finished collective #269, but didn't join collective #270 (count from 1)"]
    v = _verdict(tmp_path, {"run.log": log})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (7,)


def test_a_kernel_console_named_after_its_node_places_the_lost_nodes_fault(tmp_path):
    out = ["srun: error: Node failure on nid003014", "srun: error: nid003012: tasks 0-7: Killed",
           "srun: error: nid003013: tasks 8-15: Killed", "srun: error: nid003015: tasks 24-31: Killed"]
    console = ["[2025-07-16T20:46:31+08:00][1854004.339170][C41] watchdog: BUG: soft lockup - CPU#41 stuck for 26s! "
               "[kworker/41:2:4117902]"]
    v = _verdict(tmp_path, {"slurm-1.out": out, "console-nid003014.log": console})
    assert v.category is Category.HOST and v.culprit.nodes == ("nid003014",)
    assert set(v.culprit.ranks) == set(range(16, 24))


def test_two_tracebacks_without_a_rank_name_the_two_tasks_that_exited_on_their_own(tmp_path):
    log = ["RuntimeError: PytorchStreamReader failed reading zip archive: failed finding central directory",
           "EOFError: Ran out of input", "srun: error: cw-gpu-041: task 0: Exited with exit code 1",
           "srun: error: cw-gpu-042: task 13: Exited with exit code 1",
           "[E ProcessGroupNCCL.cpp:737] [Rank 5] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, "
           "OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800617 milliseconds before timing out.",
           "srun: error: cw-gpu-041: task 5: Aborted (core dumped)", "srun: error: cw-gpu-043: task 22: Aborted"]
    v = _verdict(tmp_path, {"slurm-1.out": log})
    assert v.category is Category.APPLICATION and set(v.culprit.ranks) == {0, 13}
