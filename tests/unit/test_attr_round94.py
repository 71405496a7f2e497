"""Rules drawn from round 94 after its first contact was scored: container runtimes that could not start a node's
tasks (Apptainer, docker without the GPU toolkit, Slurm's job_container), NVML losing a node's GPUs, NCCL without
the network it was told to use, gloo refused by a peer's host, two file names that are not host names, a pid
another pod's box gave a rank, and a bare `AssertionError` (round 93e)."""

from __future__ import annotations

from pathlib import Path

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category
from nvrx_hpc.attribution.file_hosts import rank_file_host
from nvrx_hpc.attribution.localise import node_of_file


def _store_barrier_timeouts(ranks, joined, world):
    return [f"{r}: RuntimeError: Timed out initializing process group in store based barrier on rank: {r}, for key: "
            f"store_based_barrier_key:1 (world_size={world}, worker_count={joined}, timeout=0:30:00)" for r in ranks]


def test_apptainer_that_could_not_mount_its_image_on_one_node_is_that_nodes(tmp_path):
    log = [f"{r}: FATAL:   container creation failed: mount hook function failure: mount /proc/self/fd/3->"
           f"/var/lib/apptainer/mnt/session/rootfs error: while mounting image /proc/self/fd/3: kernel reported a bad "
           f"superblock for squashfs image partition, possible causes are that your kernel doesn't support the "
           f"compression algorithm or the image is corrupted" for r in (4, 5, 6, 7)]
    log += ["srun: error: gn-042: tasks 4-7: Exited with exit code 255"]
    log += _store_barrier_timeouts((0, 1, 2, 3, 8, 9), 8, 12)
    log += ["srun: error: gn-041: tasks 0-3: Exited with exit code 1", "srun: error: gn-043: tasks 8-11: Exited with "
            "exit code 1"]  # fmt: skip
    v = _verdict(tmp_path, {"seg3d-ddp-3318804.out": log})
    assert v.category is Category.HOST and v.culprit.nodes == ("gn-042",) and v.restartable is True


def test_docker_without_a_gpu_runtime_on_a_new_host_is_that_hosts(tmp_path):
    log = ["trn-g01: W0829 17:02:11.100000 140 torch/distributed/run.py:779] Starting elastic_operator with launch "
           "configs", "trn-g03: docker: Error response from daemon: could not select device driver \"\" with "
           "capabilities: [[gpu]].", "trn-g03: ERRO[0187] error waiting for container: context canceled",
           "trn-g01: torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 2/3 clients "
           "joined.", "trn-g02: [rank8]: torch.distributed.DistNetworkError: Connection reset by peer"]
    v = _verdict(tmp_path, {"launcher.log": log})
    assert v.category is Category.HOST and "trn-g03" in v.culprit.nodes and "trn-g01" not in v.culprit.nodes


def test_job_containers_join_that_names_its_path_without_for_is_the_nodes(tmp_path):
    err = ["slurmstepd: error: container_p_join: open failed /scratch/120577/.active: No such file or directory",
           "slurmstepd: error: container_g_join failed: 120577"]
    v = _verdict(tmp_path, {"error_120577.err": err})
    assert v.category is Category.HOST and v.restartable is True


def test_nvml_losing_the_gpus_under_a_running_rank_is_the_nodes(tmp_path):
    log = ["[rank8]:   File \"/usr/local/lib/python3.10/dist-packages/pynvml.py\", line 899, in _nvmlCheckReturn",
           "[rank8]:     raise NVMLError(ret)", "[rank8]: pynvml.NVMLError_Unknown: Unknown Error"]
    other = [f"[rank{r}]:[E314 03:29:19.480193614 ProcessGroupNCCL.cpp:607] [Rank {r}] Watchdog caught collective "
             f"operation timeout: WorkNCCL(SeqNum=1081402, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
             f"Timeout(ms)=600000) ran for 600003 milliseconds before timing out." for r in range(8)]
    v = _verdict(tmp_path, {"dgx-a02.train.log": log, "dgx-a01.train.log": other})
    assert v.category is Category.HOST and v.restartable is True and v.culprit.ranks == (8,)


def test_nccl_without_the_network_plugin_it_was_told_to_use_is_the_launchs_network(tmp_path):
    files = {f"trn-h0{n}.console.log": [
        f"trn-h0{n}:118:402 [0] NCCL INFO Failed to initialize NET plugin IB",
        f"trn-h0{n}:118:402 [0] net.cc:626 NCCL WARN Failed to initialize any NET plugin",
        f"[rank{8 * (n - 1)}]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/"
        "distributed/c10d/ProcessGroupNCCL.cpp:3353, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL "
        "version 2.26.2"] for n in (1, 2)}  # fmt: skip
    v = _verdict(tmp_path, files)
    assert v.category is Category.NETWORK and v.restartable is False and v.culprit.nodes == ()


def test_gloo_refused_by_its_peers_host_is_the_network_not_the_code(tmp_path):
    log = [f"RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:799] connect [10.12.3.22]:{p}: Connection "
           f"refused" for p in (40213, 51877, 46651)]  # fmt: skip
    v = _verdict(tmp_path, {"run_dreambooth.log": log})
    assert v.category is Category.NETWORK and v.restartable is False


def test_a_kernel_logs_name_that_says_which_boot_still_names_its_host():
    assert node_of_file(Path("sparkpair-b_journal_prev_boot.txt")) == "sparkpair-b"
    assert node_of_file(Path("node7_dmesg_after_crash.txt")) == "node7"
    assert node_of_file(Path("nvidia-smi_dmesg_gpu-n061.txt")) == "gpu-n061"


def test_a_runs_date_stamp_in_a_rank_files_name_is_not_a_host():
    assert rank_file_host("log-train-2021-04-11-21-04-rank0.txt") is None
    assert rank_file_host("gn13_rank6.txt") == "gn13"


def test_a_bare_assertion_inside_torch_is_the_frameworks_crash_on_the_ranks_that_raised_it(tmp_path):
    log = []
    for r in (45, 46, 47):
        log += [f"{r}:   File \"/opt/conda/lib/python3.10/site-packages/torch/distributed/_shard/sharding_spec/"
                f"chunk_sharding_spec.py\", line 176, in shard", f"{r}:     assert len(split_size) > 0", f"{r}: "
                "AssertionError"]  # fmt: skip
    log += ["srun: error: gpu-r06: tasks 45-47: Exited with exit code 1"]
    v = _verdict(tmp_path, {"slurm-4410927.out": log})
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (45, 46, 47)


def test_a_bare_assertion_in_the_users_code_yields_to_the_nan_it_checked(tmp_path):
    err = ["  File \"/home/u/dinov2/dinov2/train/train.py\", line 272, in do_train", "    raise AssertionError",
           "AssertionError", "srun: error: cn-g012: tasks 0-7: Exited with exit code 1"]
    out = ["I20231116 14:04:49 2870314 dinov2 train.py:271] NaN detected"]
    v = _verdict(tmp_path, {"318822_0_log.err": err, "318822_0_log.out": out})
    assert v.category is Category.NUMERICAL


def test_the_one_rank_whose_all_to_all_differs_in_size_from_all_the_others_is_the_suspect(tmp_path):
    log = [f"{r // 4}: [E ProcessGroupNCCL.cpp:475] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL("
           f"SeqNum=110595, OpType=ALLTOALL_BASE, NumelIn={983040 if r == 5 else 2621440}, NumelOut="
           f"{983040 if r == 5 else 2621440}, Timeout(ms)=1800000) ran for 1800123 milliseconds before timing out."
           for r in range(8)]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-5532817.out": log})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (5,)


def test_all_to_alls_of_many_sizes_name_no_one(tmp_path):
    log = [f"[rank{r}]:[E1204 09:46:43.77 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
           f"timeout: WorkNCCL(SeqNum=20377, OpType=ALLTOALL_BASE, NumelIn={4096 * (r + 3)}, NumelOut={4096 * (r + 3)}"
           f", Timeout(ms)=600000) ran for 600081 milliseconds before timing out." for r in range(8)]  # fmt: skip
    v = _verdict(tmp_path, {"run.log": log})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == ()


def _two_rank_hang(tail):
    return ["[2026-09-14 19:20:07,002] [INFO] [launch.py:164:main] dist_world_size=2",
            "[rank 0] pid=52114 device=cuda:0 ep_rank=0", "[rank 1] pid=52115 device=cuda:1 ep_rank=1",
            "[rank0]:[E914 19:31:17.80 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=3019, OpType=ALLTOALL_BASE, NumelIn=65536, NumelOut=65536, Timeout(ms)=600000) "
            "ran for 600054 milliseconds before timing out.", *tail]


def test_of_two_ranks_the_one_that_says_nothing_while_the_other_times_out_is_the_suspect(tmp_path):
    v = _verdict(tmp_path, {"run_ep2.log": _two_rank_hang([])})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (1,)


def test_of_two_ranks_one_that_srun_saw_exit_is_not_silent(tmp_path):
    v = _verdict(tmp_path, {"run_ep2.log": _two_rank_hang(["srun: error: gpu-e11: task 1: Exited with exit code 1"])})
    assert v.culprit.ranks != (1,)


def test_a_pid_that_another_pods_box_gave_a_rank_is_not_that_rank_on_this_pod(tmp_path):
    master = ["[rank3]: torch.distributed.DistBackendError: NCCL error in: /opt/pytorch/pytorch/torch/csrc/distributed/"
              "c10d/ProcessGroupNCCL.cpp:3356, remote process exited or there was a network error, NCCL version 2.26.5",
              "[rank3]: ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
              "prematurely.", "torch.distributed.elastic.multiprocessing.errors.ChildFailedError:",
              "Root Cause (first observed failure):", "[0]:", "  time      : 2026-06-23_15:45:11",
              "  host      : pt-llama3-sft-master-0", "  rank      : 3 (local_rank: 3)",
              "  exitcode  : 1 (pid: 421)", "  error_file: <N/A>"]
    worker = [f"[2026-06-23 15:45:07] pt-llama3-sft-worker-0:{420 + d}:{437 + d} [{d}] transport/nvls.cc:379 "
              f"(nvlsAllocateMem) NCCL WARN Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : "
              f"CUDA error 401 'the operation cannot be performed in the present state'" for d in range(8)]
    worker += [f"[rank{r}]: Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401 'the "
               f"operation cannot be performed in the present state'" for r in (8, 10, 13, 15)]
    v = _verdict(tmp_path, {"logs_pt-llama3-sft-master-0.txt": master, "logs_pt-llama3-sft-worker-0.txt": worker})
    assert v.category is Category.GPU_HARDWARE and 3 not in v.culprit.ranks and {8, 10, 13, 15} <= set(v.culprit.ranks)
