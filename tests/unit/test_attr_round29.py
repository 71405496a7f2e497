"""Rules from round 29 of blind cases, one small case each: a batch step's cgroup OOM, which names no host, is the
one rank mpirun saw killed; nvidia-smi's `Unable to determine the device handle for GPU0000:06:00.0` names the bus
of the lost GPU, and a zsh prompt (`user@host ~ %`) places what its commands print; `NCCL communicator was
aborted on rank 1.  Original reason for failure was: ...` and a launcher's subprocess running torchrun are the
aftermath of a timeout, not the failure."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_a_batch_steps_cgroup_oom_is_the_one_rank_mpirun_saw_killed(tmp_path):
    out = [f"[1,{r}]<stdout>:hvd.size()=4 hvd.rank()={r}" for r in range(4)]
    out += ["mpirun noticed that process rank 0 with PID 0 on node lx-gpu21 exited on signal 9 (Killed).",
            "slurmstepd: error: Detected 1 oom_kill event in StepId=8812004.batch. Some of the step tasks have been "
            "OOM Killed."]
    v = analyze_run(write_run(tmp_path, {"slurm-8812004.out": out})).verdict
    assert v.category is Category.HOST
    assert (v.culprit.ranks, v.culprit.nodes) == ((0,), ("lx-gpu21",))


def test_a_gpu_nvidia_smi_cannot_reach_names_its_rank_by_bus_under_a_zsh_prompt(tmp_path):
    log = [f"gpu-n117:{6473 + r}:{6541 + r} [{r}] NCCL INFO comm 0x55c0f39a5d60 rank {r} nranks 4 cudaDev {r} "
           f"busId {bus} commId 0x7b1f0c33e2a8d571 - Init COMPLETE" for r, bus in enumerate(("4000", "6000", "84000",
                                                                                            "86000"))]
    smi = ["hnguyen@gpu-n117 ~ % date; nvidia-smi", "Sun Mar 10 10:41:57 CET 2024",
           "Unable to determine the device handle for GPU0000:06:00.0: Unknown Error"]
    v = analyze_run(write_run(tmp_path, {"returnn-train.log": log, "nvidia-smi.txt": smi})).verdict
    assert v.category is Category.GPU_HARDWARE
    assert (v.culprit.ranks, v.culprit.nodes) == ((1,), ("gpu-n117",))


def test_an_aborted_communicator_with_its_original_reason_is_the_timeouts_aftermath(tmp_path):
    out = [f"[E ProcessGroupNCCL.cpp:828] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL("
           "SeqNum=3, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800612 milliseconds before timing out."
           for r in (1, 2, 3)]
    out += ["RuntimeError: NCCL communicator was aborted on rank 1.  Original reason for failure was: [Rank 1] "
            "Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType=ALLREDUCE, Timeout(ms)=1800000)",
            "subprocess.CalledProcessError: Command '['/usr/bin/python', '-m', 'torch.distributed.run', "
            "'--nproc_per_node', '4', '/tmp/_temp_q3k0.py']' returned non-zero exit status 1."]
    v = analyze_run(write_run(tmp_path, {"train_console.log": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_ray_start_lines_and_the_train_worker_table_place_a_lost_nodes_ranks(tmp_path):
    out = []
    for host, ip in (("gpu-c07", "10.0.1.21"), ("gpu-c08", "10.0.1.22")):
        out += [f"[setup] worker {host}", f"2024-03-06 01:22:31,489\tINFO scripts.py:926 -- Local node IP: {ip}"]
    out += [f"(TorchTrainer pid=1190214) - (node_id=af2e, ip=10.0.1.{21 + r // 2}, pid={9000 + r}) world_rank={r}, "
            f"local_rank={r % 2}, node_rank={r // 2}" for r in range(4)]
    out += ["2024-03-06 04:52:41,417\tWARNING worker.py:2058 -- The node with node id: 3310 and address: 10.0.1.22 and "
            "node name: 10.0.1.22 has been marked dead because the detector has missed too many heartbeats from it."]
    v = analyze_run(write_run(tmp_path, {"slurm-2203117.out": out})).verdict
    assert v.category is Category.HOST
    assert (v.culprit.ranks, v.culprit.nodes) == ((2, 3), ("gpu-c08",))


def test_a_cuda_oom_on_gpu_5_of_a_deepspeed_node_is_that_nodes_sixth_rank(tmp_path):
    out = ["gpu-v07: [INFO] [launch.py:162:main] global_rank_mapping=defaultdict(<class 'list'>, {'gpu-v07': [0, 1, 2, "
           "3, 4, 5, 6, 7], 'gpu-v12': [8, 9, 10, 11, 12, 13, 14, 15]})",
           "gpu-v12: torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.06 GiB (GPU 5; 31.75 GiB "
           "total capacity; 28.37 GiB already allocated)",
           "pdsh@gpu-v07: gpu-v12: ssh exited with exit code 1"]
    v = analyze_run(write_run(tmp_path, {"train.log": out})).verdict
    assert v.category is Category.APPLICATION
    assert (v.culprit.ranks, v.culprit.nodes) == ((13,), ("gpu-v12",))


def test_sequence_numbers_of_different_process_groups_are_not_compared(tmp_path):
    """A data-parallel group's work 37,868 is not behind an expert group's 150,292 (it named rank 1)."""
    out = []
    for r in range(8):
        pg = "[PG ID 1 PG GUID 1(DATA_PARALLEL_GROUP) Rank {r}]" if r % 2 else "[PG ID 6 PG GUID 31(EXPERT) Rank {r}]"
        seq = 37868 if r % 2 else 150292
        out.append(f"[rank{r}]:[E0709 14:42:38.4 ProcessGroupNCCL.cpp:2168] {pg.format(r=r)} failure detected by "
                   f"watchdog at work sequence id: {seq} PG status: last enqueued work: {seq + r % 2}, last completed "
                   f"work: {seq - 1}")
        op = "_REDUCE_SCATTER_BASE" if r % 2 else "ALLTOALL"
        out.append(f"[rank{r}]:[E0709 14:42:38.4 ProcessGroupNCCL.cpp:632] {pg.format(r=r)} Watchdog caught collective "
                   f"operation timeout: WorkNCCL(SeqNum={seq}, OpType={op})")
    v = analyze_run(write_run(tmp_path, {"slurm-5518842.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == ()


def test_rays_memory_monitor_kill_is_the_hosts_memory_on_the_raylets_node(tmp_path):
    out = ["starting worker on gpu-b12", "2025-05-14 15:48:15,377\tINFO scripts.py:1047 -- Local node IP: 10.40.2.12",
           "(raylet, ip=10.40.2.12) [2025-05-14 15:52:26,703 E 2286951 2286951] (raylet) node_manager.cc:3069: 1 "
           "Workers (tasks / actors) killed due to memory pressure (OOM), 0 Workers crashed due to other reason",
           "ray.exceptions.OutOfMemoryError: Task was killed due to the node running low on memory."]
    v = analyze_run(write_run(tmp_path, {"slurm-418822.out": out})).verdict
    assert v.category is Category.HOST and v.culprit.nodes == ("gpu-b12",)


def test_an_sacct_row_with_columns_before_its_state_says_preempted(tmp_path):
    sacct = ["JobID           JobName  Partition        QOS          NodeList               Start                 End "
             "     State ExitCode",
             "4714782           ev_fs2    gpu_std     low_pr    ib12gpu-[001,004] 2023-11-28T15:47:09 "
             "2023-11-29T15:47:21    PREEMPTED      0:0"]
    out = ["slurmstepd: error: *** STEP 4714782.0 ON ib12gpu-001 CANCELLED AT 2023-11-29T15:47:21 ***"]
    v = analyze_run(write_run(tmp_path, {"sacct.txt": sacct, "slurm-4714782.out": out})).verdict
    assert v.category is Category.SCHEDULER and v.restartable
