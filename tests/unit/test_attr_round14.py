"""Round 14's rules, one small case each: the rendezvous host as a job node beside one writer's full disk, a
cancel due to a job requeue, a time limit after collective timeouts, a cause above the job's first torchrun
failure box, DeepSpeed's rank mapping placing the silent rank, and NCCL's peerless completion error under a
Horovod stall."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Action, Category

_WD = ("[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL("
       "SeqNum=880, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800054 milliseconds "
       "before timing out.")


def test_one_writers_full_disk_is_its_nodes_when_the_rendezvous_host_is_another_node(tmp_path):
    out = ["srun --kill-on-bad-exit=1 torchrun --nnodes 2 --nproc_per_node 4 --rdzv_backend c10d "
           "--rdzv_endpoint gpu-c01:29500 pretrain.py",
           "[rank5]: OSError: [Errno 28] No space left on device",
           "Root Cause (first observed failure):", "[0]:", "  time      : 2024-07-29_14:13:24",
           "  host      : gpu-c02", "  rank      : 5 (local_rank: 1)", "  exitcode  : 1 (pid: 5120)"]
    v = analyze_run(write_run(tmp_path, {"slurm-55310.out": out})).verdict
    assert v.category is Category.HOST and v.restartable and v.action is Action.EXCLUDE_AND_RETRY


def test_a_cancel_due_to_a_job_requeue_is_the_schedulers_and_restartable(tmp_path):
    err = ["submitit WARNING (2022-08-12 02:06:11,453) - Caught signal SIGUSR2 on n4: this job is preempted.",
           "slurmstepd: error: *** JOB 60814 ON n4 CANCELLED AT 2022-08-12T02:06:12 DUE TO JOB REQUEUE ***"]
    v = analyze_run(write_run(tmp_path, {"60814_0_log.err": err})).verdict
    assert v.category is Category.SCHEDULER and v.restartable


def test_a_time_limit_after_collective_timeouts_ends_a_hang(tmp_path):
    out = ["#### job 6619332 | nodes: gn0707,gn0812", *(_WD.format(r=r) for r in range(8) if r != 5),
           "srun: error: gn0707: tasks 0-3: Aborted", "srun: error: gn0812: tasks 4,6-7: Aborted",
           "slurmstepd: error: *** JOB 6619332 ON gn0707 CANCELLED AT 2024-05-15T09:03:17 DUE TO TIME LIMIT ***",
           "srun: error: gn0812: task 5: Killed"]
    v = analyze_run(write_run(tmp_path, {"slurm-6619332.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and (v.culprit.ranks, v.culprit.nodes) == ((5,), ("gn0812",))


def test_a_cause_above_the_jobs_first_torchrun_box_is_that_boxs_rank(tmp_path):
    out = ["RuntimeError: CUDA error: uncorrectable ECC error encountered"]
    for when, host, rank in (("09:21:09", "hgx-n08.cluster.internal", 11), ("09:21:40", "hgx-n07", 5)):
        out += ["Root Cause (first observed failure):", "[0]:", f"  time      : 2023-04-11_{when}",
                f"  host      : {host}", f"  rank      : {rank} (local_rank: {rank % 8})",
                f"  exitcode  : -6 (pid: 4821{rank})"]
    v = analyze_run(write_run(tmp_path, {"slurm-733412.out": out})).verdict
    assert v.category is Category.GPU_HARDWARE and (v.culprit.ranks, v.culprit.nodes) == ((11,), ("hgx-n08",))


def test_deepspeeds_rank_mapping_places_the_silent_rank(tmp_path):
    out = ["gpu-h02: [2024-01-25 18:40:08,015] [INFO] [launch.py:162:main] global_rank_mapping=defaultdict(<class "
           "'list'>, {'gpu-h01': [0, 1, 2, 3], 'gpu-h02': [4, 5, 6, 7]})",
           *(f"gpu-h0{1 + r // 4}: " + _WD.format(r=r) for r in range(8) if r != 6)]
    v = analyze_run(write_run(tmp_path, {"slurm-2290417.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and (v.culprit.ranks, v.culprit.nodes) == ((6,), ("gpu-h02",))


def test_a_horovod_missing_ranks_own_peerless_completion_error_makes_it_a_network_failure(tmp_path):
    out = ["[1,9]<stdout>:gpu-c03:22411:22655 [1] transport/net_ib.cc:827 NCCL WARN NET/IB : Got completion with "
           "error 12, opcode 0, len 0, vendor err 129",
           "[1,2]<stderr>:[2021-03-02 14:52:31.880417: W horovod/common/stall_inspector.cc:105] One or more tensors "
           "were submitted to be reduced, gathered or broadcasted by subset of ranks and are waiting for remainder "
           "of ranks for more than 60 seconds.",
           "[1,2]<stderr>:Missing ranks:", "[1,2]<stderr>:9: [allreduce.layer4.2.conv3.weight]"]
    v = analyze_run(write_run(tmp_path, {"hvd_resnet_291877.log": out})).verdict
    assert v.category is Category.NETWORK and v.culprit.nodes == ("gpu-c03",)


def _completion(rank: int, host: str) -> str:
    return (f"[1,{rank}]<stdout>:{host}:2241{rank}:2265{rank} [{rank % 4}] transport/net_ib.cc:827 NCCL WARN NET/IB : "
            "Got completion with error 12, opcode 0, len 0, vendor err 129")


def test_peerless_completion_errors_name_the_host_holding_most_reporting_ranks(tmp_path):
    out = [_completion(8, "gpu-c03"), _completion(9, "gpu-c03"), _completion(11, "gpu-c03"),
           _completion(7, "gpu-c02"), _completion(12, "gpu-c04")]
    v = analyze_run(write_run(tmp_path, {"hvd.log": out})).verdict
    assert v.category is Category.NETWORK and (v.culprit.ranks, v.culprit.nodes) == ((), ("gpu-c03",))


def test_peerless_completion_errors_split_evenly_name_no_host(tmp_path):
    out = [_completion(4, "gpu-c02"), _completion(5, "gpu-c02"), _completion(8, "gpu-c03"), _completion(9, "gpu-c03")]
    v = analyze_run(write_run(tmp_path, {"hvd.log": out})).verdict
    assert v.category is Category.NETWORK and v.culprit.nodes == ()
