"""Round 19's rules, one small case each: exceptions that follow a failure elsewhere, a per-node log named
after its host, PyTorch's internal assertion, a Horovod stall a time limit ended, and a cgroup OOM kill
without a stamp of its own after hours of run."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_a_per_node_log_named_after_its_host_places_a_gpu_fault_under_the_others_aborted_communicators(tmp_path):
    slurm = ["srun: error: cn110: task 0: Exited with exit code 1",
             "srun: error: cn108: task 0: Exited with exit code 1"]
    bystander = ["Traceback (most recent call last):", "RuntimeError: NCCL communicator was aborted."]
    faulty = ["Traceback (most recent call last):",
              "RuntimeError: CUDA error: uncorrectable ECC error encountered",
              "subprocess.CalledProcessError: Command '['python', '-u', 'worker.py', '--local_rank=2', "
              "'--node_rank=1']' returned non-zero exit status 1."]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"slurm-38214.out": slurm, "cn108.log": bystander,
                                         "cn110.log": faulty})).verdict  # fmt: skip
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("cn110",)


def test_a_pytorch_internal_assertion_is_a_framework_crash(tmp_path):
    out = ["[rank10]: terminate called after throwing an instance of 'c10::Error'",
           '[rank10]:   what():  !block->expandable_segment_ INTERNAL ASSERT FAILED at '
           '"../c10/cuda/CUDACachingAllocator.cpp":2655, please report a bug to PyTorch.']
    v = analyze_run(write_run(tmp_path, {"train.out": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (10,)


def test_a_horovod_stall_ended_by_the_time_limit_names_the_stalled_rank(tmp_path):
    out = ["[1,6]<stdout>:INFO:root:hvd rank 6 local_rank 2 host gpu-n12",
           "[1,0]<stderr>:[2024-03-09 15:36:43.594972: W horovod/common/stall_inspector.cc:105] One or more tensors "
           "were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder "
           "of ranks for more than 60 seconds.", "[1,0]<stderr>:Stalled ranks:",
           "[1,0]<stderr>:6: [horovod_allreduce.0, horovod_allreduce.1, horovod_allreduce.10 ...]",
           "slurmstepd: error: *** JOB 771203 ON gpu-n11 CANCELLED AT 2024-03-09T23:58:12 DUE TO TIME LIMIT ***"]
    v = analyze_run(write_run(tmp_path, {"slurm-771203.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert (v.culprit.ranks, v.culprit.nodes) == ((6,), ("gpu-n12",))


def test_a_cgroup_oom_kill_without_a_stamp_after_hours_of_run_is_restartable(tmp_path):
    out = ["2022-05-17 11:41:02,118 - mmdet - INFO - Environment info: sys.platform: linux",
           "2022-05-17 17:11:55,441 - mmdet - INFO - Saving checkpoint at 6 epochs",
           "slurmstepd-gpu20-15: error: Detected 1 oom-kill event(s) in StepId=9411285.0. Some of your processes "
           "may have been killed by the cgroup out-of-memory handler.",
           "srun: error: gpu20-15: task 0: Out Of Memory",
           "slurmstepd-gpu20-15: error: *** STEP 9411285.0 ON gpu20-15 CANCELLED AT 2022-05-17T17:58:10 ***"]
    v = analyze_run(write_run(tmp_path, {"slurm-9411285.out": out})).verdict
    assert v.category is Category.HOST and v.restartable
