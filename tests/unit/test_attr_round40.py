"""Rules from round 40 of blind cases (and the cases of round 39 that stayed missed): a fault of a node's NVSwitch
fabric names every rank of the node; Slurm's node-failure line is not the rank of the failure box above it; a
torchrun command line's node count gives the world size; an Xid's bus, through nvidia-smi's index, names the rank
at that index of its node's block."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def test_an_nvls_setup_failure_names_every_rank_of_its_node(tmp_path):
    lines = [
        "+ srun -l --ntasks-per-node=1 bash -c 'torchrun --nnodes=2 --nproc-per-node=4 --node-rank=$SLURM_NODEID "
        "train.py'",
        *(f"0: [rank{r}]: step 10 loss 2.1" for r in range(4)),
        "1: hgx-n04:3771:3801 [1] transport/nvls.cc:158 NCCL WARN Cuda failure 401 'the operation cannot be "
        "performed in the present state'",
        "1: [rank5]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:77, unhandled cuda error",
        "1: [rank6]: torch.distributed.DistBackendError: NCCL error in: NCCLUtils.cpp:77, unhandled cuda error",
        "srun: error: hgx-n04: task 1: Exited with exit code 1",
    ]
    v = _verdict(tmp_path, {"slurm-55.out": lines})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("hgx-n04",)
    assert v.culprit.ranks == (4, 5, 6, 7)


def test_an_xid_on_one_gpu_still_names_one_rank(tmp_path):
    lines = [
        "+ srun -l --ntasks-per-node=1 bash -c 'torchrun --nnodes=2 --nproc-per-node=4 --node-rank=$SLURM_NODEID "
        "train.py'",
        "1: [rank5]: RuntimeError: CUDA error: an illegal memory access was encountered",
        "1: [rank6]: RuntimeError: CUDA error: an illegal memory access was encountered",
    ]
    kern = ["Mar 11 02:14:30 hgx-n04 kernel: NVRM: Xid (PCI:0000:2a:00): 79, pid=3772, GPU has fallen off the bus."]
    v = _verdict(tmp_path, {"slurm-55.out": lines, "hgx-n04.kern.log": kern})
    assert v.category is Category.GPU_HARDWARE and len(v.culprit.ranks) < 4


def test_a_lost_node_after_a_failure_box_names_the_lost_nodes_ranks(tmp_path):
    lines = [
        "node_rank 0 -> gpu-sp-1 (10.0.136.41)",
        "node_rank 1 -> gpu-sp-2 (10.0.141.7)",
        "launching: torchrun --nnodes=2 --nproc-per-node=4 --node-rank=$SLURM_NODEID --master-addr=gpu-sp-1 train.py",
        "[rank1]:[E1119 05:04:47.902551068 ProcessGroupNCCL.cpp:1515] [PG 0 (default_pg) Rank 1] Process group "
        "watchdog thread terminated with exception: NCCL error: remote process exited or there was a network error",
        "E1119 05:04:51.774000 9731 torch/distributed/elastic/multiprocessing/api.py:869] failed (exitcode: -6) "
        "local_rank: 1 (pid: 9763) of binary: /usr/bin/python",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2024-11-19_05:04:47",
        "  host      : gpu-sp-1",
        "  rank      : 1 (local_rank: 1)",
        "  exitcode  : -6 (pid: 9763)",
        "srun: error: Node failure on gpu-sp-2",
        "slurmstepd: error: *** JOB 2291 ON gpu-sp-1 CANCELLED AT 2024-11-19T05:06:31 DUE TO NODE FAILURE, SEE "
        "SLURMCTLD LOG FOR DETAILS ***",
    ]
    culprit = _verdict(tmp_path, {"slurm-2291.out": lines}).culprit
    assert (culprit.nodes, culprit.ranks) == (("gpu-sp-2",), (4, 5, 6, 7))


def test_an_xids_bus_names_the_rank_at_its_nvidia_smi_index(tmp_path):
    lines = [
        "+ srun -l hostname",
        "0: hgx-a101",
        "1: hgx-a102",
        "+ srun -l bash -c 'torchrun --nnodes 2 --nproc_per_node 4 --node_rank $SLURM_PROCID train.py'",
        "0: using world size: 8",
        *(f"{r // 4}: [rank{r}]:[E907 02:00:44.127540881 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
          "collective operation timeout: WorkNCCL(SeqNum=11, OpType=ALLREDUCE) ran for 600000 milliseconds"
          for r in (0, 1, 2, 3, 4, 5)),
        "srun: error: hgx-a102: task 1: Killed",
    ]  # fmt: skip
    kern = ["Sep 07 01:51:37 hgx-a102 kernel: NVRM: Xid (PCI:0000:9d:00): 119, pid=77502, name=python, Timeout "
            "after 6s of waiting for RPC response from GPU2 GSP!"]  # fmt: skip
    smi = [
        "$ ssh hgx-a102 nvidia-smi --query-gpu=index,pci.bus_id,utilization.gpu --format=csv",
        "index, pci.bus_id, utilization.gpu [%]",
        "0, 00000000:18:00.0, 100 %",
        "1, 00000000:2A:00.0, 100 %",
        "2, 00000000:9D:00.0, [Unknown Error]",
        "3, 00000000:C3:00.0, 100 %",
    ]
    files = {"slurm-9.out": lines, "journalctl-k_hgx-a102.txt": kern, "nvidia-smi_hgx-a102.txt": smi}
    v = _verdict(tmp_path, files)
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("hgx-a102",)
    assert v.culprit.ranks == (6,)


def _missing(path: str) -> list[str]:
    return [
        "+ srun -l --ntasks-per-node=1 bash -c 'torchrun --nnodes=2 --nproc-per-node=4 --node-rank=$SLURM_NODEID "
        "pretrain_gpt.py'",
        *(f"0: [rank{r}]: building GPT datasets" for r in range(4)),
        f"1: [rank5]: FileNotFoundError: [Errno 2] No such file or directory: '{path}/train-document_index.npy'",
        f"1: [rank6]: FileNotFoundError: [Errno 2] No such file or directory: '{path}/train-document_index.npy'",
        "srun: error: dgx-b07: task 1: Exited with exit code 1",
    ]


def test_a_file_missing_from_a_node_local_path_names_every_rank_of_its_node(tmp_path):
    v = _verdict(tmp_path, {"slurm-7.out": _missing("/data/local_nvme/cache")})
    assert v.category is Category.APPLICATION and v.culprit.nodes == ("dgx-b07",)
    assert v.culprit.ranks == (4, 5, 6, 7)


def test_a_file_missing_from_shared_storage_names_only_its_ranks(tmp_path):
    v = _verdict(tmp_path, {"slurm-7.out": _missing("/lustre/proj/cache")})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (5, 6)


def test_dumps_inside_a_collective_with_no_failure_line_are_a_hang(tmp_path):
    dump = []
    for pid in range(41204, 41208):
        dump += [f"$ py-spy dump --pid {pid}", f'Thread {pid} (active): "MainThread"',
                 "    _all_gather_into_tensor (deepspeed/comm/torch.py:212)",
                 "    all_gather_into_tensor (deepspeed/comm/comm.py:305)",
                 "    fetch_sub_module (deepspeed/runtime/zero/partitioned_param_coordinator.py:317)"]  # fmt: skip
    log = ["trn-a21: [2024-03-12 09:15:21,008] [INFO] [config.py:988:print]   zero_config stage=3",
           "trn-a21:   0%|          | 0/50 [00:00<?, ?it/s]"]  # fmt: skip
    v = _verdict(tmp_path, {"pyspy_trn-a21.txt": dump, "train.log": log})
    assert v.category is Category.DISTRIBUTED_HANG


def test_dumps_inside_a_collective_stay_victims_of_a_failure(tmp_path):
    dump = ["$ py-spy dump --pid 4120", 'Thread 4120 (active): "MainThread"',
            "    all_reduce (torch/distributed/distributed_c10d.py:2501)"]  # fmt: skip
    log = ["[rank3]: RuntimeError: CUDA error: an illegal memory access was encountered"]
    v = _verdict(tmp_path, {"pyspy.txt": dump, "train.log": log})
    assert v.category is not Category.DISTRIBUTED_HANG and v.culprit.ranks == (3,)


def test_srun_s_segfault_line_names_its_tasks(tmp_path):
    lines = ["[2025-10-20 16:00:41][anemoi.training][INFO] - sanity checking",
             "srun: error: ac3-2041: tasks 4-7: Segmentation fault (core dumped)",
             "slurmstepd: error: *** STEP 20884113.0 ON ac3-2040 CANCELLED AT 2025-10-20T16:00:52 ***",
             "srun: error: ac3-2040: tasks 0-3: Terminated"]  # fmt: skip
    v = _verdict(tmp_path, {"anemoi-train.20884113.out": lines})
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (4, 5, 6, 7)


def test_a_native_cuda_check_on_an_illegal_access_is_a_framework_crash(tmp_path):
    lines = [
        "[1,17]<stderr>:terminate called after throwing an instance of 'std::logic_error'",
        "[1,17]<stderr>:THCudaCheck FAIL file=/opt/pytorch/aten/src/THC/THCCachingHostAllocator.cpp line=278 error=700 "
        ": an illegal memory access was encountered",
        "[1,17]<stderr>:  what():  cudaEventQuery failed: an illegal memory access was encountered",
        "mpirun noticed that process rank 17 with PID 0 on node cn035 exited on signal 6 (Aborted).",
    ]
    v = _verdict(tmp_path, {"slurm-552901.out": lines})
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (17,)


def test_horovods_gloo_runner_prefix_names_the_rank(tmp_path):
    lines = ["Tue May 23 11:04:31 2023[5]<stdout>:Epoch 1 step 0 forward done",
             "Tue May 23 11:04:33 2023[6]<stderr>:Traceback (most recent call last):",
             "Tue May 23 11:04:33 2023[6]<stderr>:torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate "
             "1.17 GiB (GPU 2; 79.11 GiB total capacity; 76.02 GiB already allocated)",
             "Process 6 exit with status code 1."]  # fmt: skip
    v = _verdict(tmp_path, {"horovodrun.log": lines})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (6,)


def test_port_errors_on_two_hosts_name_no_node(tmp_path):
    event = "transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error"
    lines = ["SLURM_JOB_NODELIST=hpc-g[041-044]"]
    lines += [f"5: hpc-g042:103373:103443 [1] {event}", f"9: hpc-g043:142370:142440 [1] {event}"] * 3
    lines += ["srun: error: hpc-g042: task 5: Exited with exit code 1"]
    v = _verdict(tmp_path, {"slurm-118842.out": lines})
    assert v.category is Category.NETWORK and not v.culprit.nodes and not v.culprit.ranks


def test_port_errors_on_one_host_name_it(tmp_path):
    lines = ["5: hpc-g042:103373:103443 [1] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async event : port error",
             "srun: error: hpc-g042: task 5: Exited with exit code 1"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-118842.out": lines})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("hpc-g042",)


def test_ray_trains_worker_table_places_ranks_on_a_node_named_by_its_address(tmp_path):
    lines = [
        "(TorchTrainer pid=4210, ip=10.41.12.3) Started distributed worker processes: ",
        *(f"(TorchTrainer pid=4210, ip=10.41.12.3) - (ip={ip}, pid={5000 + r}) world_rank={r}, local_rank={r % 2}, "
          f"node_rank={r // 2}" for r, ip in enumerate(["10.41.12.3", "10.41.12.3", "10.41.13.2", "10.41.13.2"])),
        "2024-04-18 10:44:07,551\tWARNING worker.py:2074 -- The node with node id: 0f55e2b0 and address: 10.41.13.2 "
        "and node name: 10.41.13.2 has been marked dead because the detector has missed too many heartbeats from it.",
    ]  # fmt: skip
    v = _verdict(tmp_path, {"ray_job_driver.log": lines})
    assert v.category is Category.HOST and v.culprit.nodes == ("10.41.13.2",) and v.culprit.ranks == (2, 3)


def test_a_hang_that_names_no_one_is_not_restartable(tmp_path):
    lines = [f"[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum=13227, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800081 "
             "milliseconds before timing out." for r in range(8)]  # fmt: skip
    v = _verdict(tmp_path, {"train.log": lines})
    assert v.category is Category.DISTRIBUTED_HANG and not v.culprit.ranks and not v.restartable


def test_a_cuda_oom_on_ranks_of_every_node_names_no_one(tmp_path):
    lines = []
    for n, host in enumerate(["cw-h100-0511", "cw-h100-0512", "cw-h100-0519"]):
        lines += [f"{n * 8 + g}: [rank{n * 8 + g}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                  f"2.23 GiB. GPU {g} has a total capacity of 79.11 GiB" for g in (1, 4)]  # fmt: skip
        lines += [f"srun: error: {host}: tasks {n * 8}-{n * 8 + 7}: Exited with exit code 1"]
    v = _verdict(tmp_path, {"slurm-5.out": lines})
    assert v.category is Category.APPLICATION and not v.culprit.ranks and not v.restartable


def _deepep(rank: int) -> list[str]:
    return [f"{rank}: [rank{rank}]: Traceback (most recent call last):",
            f'{rank}: [rank{rank}]:   File "/usr/local/lib/python3.12/dist-packages/deep_ep/buffer.py", line 492, '
            "in internode_dispatch",
            f"{rank}: [rank{rank}]:     recv_src_meta, send_rdma_head, event = self.runtime.internode_dispatch(",
            f"{rank}: [rank{rank}]: RuntimeError: DeepEP error: timeout (dispatch CPU)"]  # fmt: skip


def test_a_native_librarys_own_error_on_every_node_is_its_crash_and_names_no_one(tmp_path):
    lines = ["SLURM_JOB_NODELIST=eos[0218-0219]", "srun: error: eos0218: tasks 0-7: Exited with exit code 1",
             "srun: error: eos0219: tasks 8-15: Exited with exit code 1", *_deepep(3), *_deepep(11)]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-7718840.out": lines})
    assert v.category is Category.FRAMEWORK_CRASH and not v.culprit.ranks and not v.restartable


def test_a_user_error_raised_inside_a_library_stays_the_applications(tmp_path):
    lines = ["[rank3]: Traceback (most recent call last):",
             '[rank3]:   File "/usr/local/lib/python3.12/dist-packages/torch/nn/functional.py", line 3059, in view',
             "[rank3]: RuntimeError: shape '[4, -1, 512]' is invalid for input of size 1000"]  # fmt: skip
    v = _verdict(tmp_path, {"train.log": lines})
    assert v.category is Category.APPLICATION


def test_a_hang_on_rank_0_alone_is_not_restartable(tmp_path):
    lines = [f"[rank{r}]:[E ProcessGroupNCCL.cpp:563] [Rank {r}] Watchdog caught collective operation timeout: "
             "WorkNCCL(SeqNum=4120, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for 1800081 "
             "milliseconds before timing out." for r in range(1, 8)]  # fmt: skip
    v = _verdict(tmp_path, {"train.log": lines})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,) and not v.restartable


def _smi(idle: int) -> list[str]:
    rows = ["$ date; nvidia-smi", "| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |"]
    for g in range(4):
        rows += [f"|   {g}  Tesla V100-SXM2...  On   | 00000000:{6 + g:02X}:00.0 Off |                    0 |",
                 "| N/A   48C    P0    95W / 300W |   7459MiB / 32510MiB |    100%      Default |"]  # fmt: skip
    rows += ["| Processes:                                                       GPU Memory |"]
    rows += [f"|    {g}     {21880 + g}      C   ...envs/detr/bin/python     7167MiB |" for g in range(4) if g != idle]
    return rows


def test_the_one_gpu_without_a_process_names_the_rank_of_an_unranked_error(tmp_path):
    log = ["Namespace(world_size=4, dist_url='env://', batch_size=2)",
           "FileNotFoundError: [Errno 2] No such file or directory: '/data/coco/train2017/0431876.jpg'"]  # fmt: skip
    v = _verdict(tmp_path, {"train.log": log, "nvidia-smi.txt": _smi(2)})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (2,)


def test_a_one_node_jobs_cgroup_oom_happened_on_the_host_its_banner_names(tmp_path):
    lines = ["Job 771032 running on gpu-q12", "step 100 loss 2.31",
             "slurmstepd: error: Detected 1 oom_kill event in StepId=771032.batch. Some of the step tasks have been "
             "OOM Killed."]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-771032.out": lines})
    assert v.category is Category.HOST and v.culprit.nodes == ("gpu-q12",) and not v.restartable


def test_a_gpu_fault_with_no_host_of_its_own_happened_on_the_one_host_a_prompt_names(tmp_path):
    log = ["[rank5]: RuntimeError: CUDA error: uncorrectable ECC error encountered"]
    smi = ["kw@vgpu-srv03:~$ nvidia-smi --query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total "
           "--format=csv", "index, pci.bus_id, ecc.errors.uncorrected.volatile.total", "5, 00000000:89:00.0, 2"]
    v = _verdict(tmp_path, {"train.log": log, "nvidia-smi_ecc.txt": smi})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("vgpu-srv03",) and v.culprit.ranks == (5,)


def test_a_fault_with_no_host_is_placed_nowhere_when_the_logs_name_two_hosts(tmp_path):
    lines = ["Running on gpu-a01", "srun: error: gpu-a02: task 1: Exited with exit code 1",
             "[rank5]: RuntimeError: CUDA error: uncorrectable ECC error encountered"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-9.out": lines})
    assert v.category is Category.GPU_HARDWARE and "gpu-a01" not in v.culprit.nodes


def test_a_pdsh_host_prefix_before_an_indented_line_places_it(tmp_path):
    lines = ["gr064: terminate called after throwing an instance of 'c10::CUDAError'",
             "gr064:   what():  CUDA error: an illegal memory access was encountered",
             "gr064: [2022-08-02 16:27:12,588] [ERROR] [launch.py:184:sigkill_handler] ['/usr/bin/python3.9', '-u', "
             "'bloom-ds-inference.py', '--local_rank=6'] exits with return code = -6"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-3318274.out": lines})
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.nodes == ("gr064",)


def test_a_file_that_one_task_wrote_gives_its_rank_to_an_unranked_traceback(tmp_path):
    mine = ["[kgc-n02] SLURM_PROCID=1 -> torchbiggraph_train --rank 1 configs/dist.py",
            "OSError: Unable to open file (unable to open file: name = '/root/data/model/emb_0.v1.h5', errno = 2)",
            "srun: error: kgc-n02: task 1: Exited with exit code 1"]  # fmt: skip
    other = ["[kgc-n01] SLURM_PROCID=0 -> torchbiggraph_train --rank 0 configs/dist.py",
             "srun: error: kgc-n01: task 0: Exited with exit code 1"]  # fmt: skip
    v = _verdict(tmp_path, {"pbg-77130-1.log": mine, "pbg-77130-0.log": other})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (1,)


def test_a_shared_output_naming_several_ranks_gives_none_to_unranked_lines(tmp_path):
    lines = ["[kgc-n02] SLURM_PROCID=1 -> train --rank 1", "[kgc-n01] SLURM_PROCID=0 -> train --rank 0",
             "OSError: Unable to open file (unable to open file: name = '/root/data/model/emb_0.v1.h5', errno = 2)"]
    v = _verdict(tmp_path, {"slurm-77130.out": lines})
    assert v.category is Category.APPLICATION and v.culprit.ranks != (1,) and v.culprit.ranks != (0,)


def test_a_padded_nan_loss_in_a_metrics_line_is_numerical(tmp_path):
    head = "0: [rank0]:2025-02-19 21:25:36,395 - root - INFO - "
    lines = [f"{head}\x1b[31mstep: 80  \x1b[32mloss:  3.1021  \x1b[33mmemory",
             f"{head}\x1b[31mstep: 81  \x1b[32mloss:     nan  \x1b[33mmemory"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-5518204.out": lines})
    assert v.category is Category.NUMERICAL


def test_a_bare_connection_reset_from_the_store_is_a_restartable_network_error(tmp_path):
    lines = ["Traceback (most recent call last):",
             '  File "/opt/conda/lib/python3.10/site-packages/torch/distributed/rendezvous.py", line 176, in '
             "_create_c10d_store",
             "RuntimeError: Connection reset by peer"] * 3  # fmt: skip
    v = _verdict(tmp_path, {"cosmic_384n.o6631827": lines})
    assert v.category is Category.NETWORK and v.restartable


def test_master_addr_places_rank_0_on_its_node_even_by_its_fabric_name(tmp_path):
    lines = ["Job 2291844 on jwb[0012-0075] : 64 nodes x 4 GPUs, WORLD_SIZE=256",
             "MASTER_ADDR=jwb0012i MASTER_PORT=29500",
             "[rank0]: KeyError: 'sample_idx'"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-2291844.out": lines})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (0,) and v.culprit.nodes == ("jwb0012",)


def test_composers_one_crashed_rank_names_an_unranked_shm_bus_error(tmp_path):
    lines = ["ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory "
             "(shm).",
             "RuntimeError: DataLoader worker (pid(s) 4417) exited unexpectedly",
             "ERROR:composer.cli.launcher:Rank 3 crashed with exit code 1.",
             "Global rank 3 (PID 4102) exited with code 1",
             "ERROR:composer.cli.launcher:Global rank 0 (PID 4098) exited with code -15",
             "ERROR:composer.cli.launcher:Global rank 1 (PID 4099) exited with code -15"]  # fmt: skip
    v = _verdict(tmp_path, {"run.log": lines})
    assert v.category is Category.HOST and v.culprit.ranks == (3,)


def test_an_illegal_access_on_two_nodes_alike_is_a_framework_crash_and_not_restartable(tmp_path):
    lines = ["a100-g01: RuntimeError: CUDA error: an illegal memory access was encountered",
             "a100-g02: RuntimeError: CUDA error: an illegal memory access was encountered"]  # fmt: skip
    v = _verdict(tmp_path, {"pretrain.log": lines})
    assert v.category is Category.FRAMEWORK_CRASH and not v.culprit.nodes and not v.restartable


def test_rays_actor_prefix_with_a_pod_name_places_the_line(tmp_path):
    lines = ["(WorkerDict pid=1611, ip=grpo-h800-x7k2q-worker-1) RuntimeError: CUDA error: uncorrectable ECC error "
             "encountered"]  # fmt: skip
    v = _verdict(tmp_path, {"train_grpo.log": lines})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("grpo-h800-x7k2q-worker-1",)


def test_skypilots_preempted_cluster_is_the_schedulers(tmp_path):
    lines = ["(resnet-ddp-2x, pid=4122) I 05-11 08:44:55 controller.py:125] The cluster is preempted.",
             "(resnet-ddp-2x, pid=4122) I 05-11 08:44:55 spot_state.py:99] === Recovering... ==="]  # fmt: skip
    v = _verdict(tmp_path, {"sky_spot_logs_controller_7.txt": lines})
    assert v.category is Category.SCHEDULER and v.restartable


def test_a_refused_verbs_call_on_every_node_names_no_node(tmp_path):
    files = {}
    for n, host in enumerate(["iv-gd0z", "iv-gd1a"]):
        files[f"node{n}.log"] = [
            f"[2025-10-13 10:12:54] {host}:127204:148052 [0] misc/ibvwrap.cc:182 NCCL WARN Call to ibv_reg_mr_iova2 "
            "failed with error Invalid argument",
            f"[rank{n * 8}]: RuntimeError: NCCL Error 2: unhandled system error (run with NCCL_DEBUG=INFO for details)"]
    v = _verdict(tmp_path, files)
    assert v.category is Category.NETWORK and not v.culprit.nodes and not v.culprit.ranks


def test_an_abort_after_watchdog_timeouts_is_their_teardown(tmp_path):
    lines = [f"[rank{r}]:[E809 23:41:34.581865641 ProcessGroupNCCL.cpp:629] [Rank {r}] Watchdog caught collective "
             "operation timeout: WorkNCCL(SeqNum=211, OpType=ALLGATHER, Timeout(ms)=600000) ran for 600021 ms"
             for r in range(1, 8)] + ["Fatal Python error: Aborted"]  # fmt: skip
    v = _verdict(tmp_path, {"main_ppo.log": lines})
    assert v.category is Category.DISTRIBUTED_HANG


def test_a_script_python_cannot_open_is_the_applications(tmp_path):
    lines = ["python: can't open file '/opt/mnist/src/dist_mnist.py': [Errno 2] No such file or directory"]
    v = _verdict(tmp_path, {"master-0.log": lines, "worker-1.log": lines})
    assert v.category is Category.APPLICATION and not v.restartable


def test_a_trainers_collective_that_did_not_complete_is_a_hang(tmp_path):
    lines = ["2025-07-29 10:03:40,877 trainer INFO rank 0: broadcasting initial parameters",
             "2025-07-29 10:13:40,920 trainer ERROR rank 0: broadcast of 'model.embed_tokens.weight' did not complete "
             "within 600000 ms"]  # fmt: skip
    v = _verdict(tmp_path, {"job.log": lines})
    assert v.category is Category.DISTRIBUTED_HANG


def test_two_ranks_on_one_gpu_is_the_jobs_device_mapping(tmp_path):
    lines = ["8dbe9e7:179:197 [0] init.cc:573 NCCL WARN Duplicate GPU detected : rank 2 and rank 3 both on CUDA device "
             "1cb000",
             "RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:784, invalid usage, NCCL version 2.7.8"]  # fmt: skip
    v = _verdict(tmp_path, {"70_driver_log_2.txt": lines})
    assert v.category is Category.APPLICATION and not v.restartable


def test_a_failed_site_epilog_that_drains_nodes_is_the_schedulers(tmp_path):
    lines = ["[2026-06-18T09:22:03.913] error: /slurm/custom_scripts/epilog.d/gpu-test.epilog_slurmd: exited with "
             "status 0x0100", "[2026-06-18T09:22:03.913] error: [job 118] epilog failed status=1:0"]  # fmt: skip
    v = _verdict(tmp_path, {"slurmd_a3h-2.log": lines})
    assert v.category is Category.SCHEDULER and not v.restartable


def _refused(hosts: list[str]) -> list[str]:
    lines = [f"{n}: {host}:40219:40511 [0] NCCL INFO Call to connect returned Connection refused, retrying"
             for n, host in enumerate(hosts)] * 3  # fmt: skip
    return lines + [f"{n}: [rank{n}]:[E912 14:51:07.118402013 ProcessGroupNCCL.cpp:616] [Rank {n}] Watchdog caught "
                    "collective operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE) ran for 600000 ms"
                    for n in range(len(hosts))]  # fmt: skip


def test_connections_refused_on_every_host_are_the_fabrics_set_up(tmp_path):
    v = _verdict(tmp_path, {"slurm-57.out": _refused(["a3h-0", "a3h-1"])})
    assert v.category is Category.NETWORK and not v.restartable


def test_connections_refused_on_one_host_stay_restartable(tmp_path):
    v = _verdict(tmp_path, {"slurm-57.out": _refused(["a3h-1"])})
    assert v.category is Category.NETWORK and v.restartable


def test_determineds_master_logfmt_names_the_lost_agent(tmp_path):
    lines = ['time="2023-03-14T06:46:12Z" level=error msg="agent closed with allocated containers" agent-id=gpu-a14 '
             'containers="[d27a3f08]" component=agent',
             'time="2023-03-14T06:46:12Z" level=error msg="allocation failed due to agent failure" '
             "allocation-id=318.4e7a1c55.1 component=task"]  # fmt: skip
    v = _verdict(tmp_path, {"master.log": lines})
    assert v.category is Category.HOST and v.culprit.nodes == ("gpu-a14",)


def test_a_nan_in_tf_cnn_benchmarks_loss_column_is_numerical(tmp_path):
    lines = ["[1,5]<stdout>:290\timages/sec: 1092.1 +/- 3.8 (jitter = 1.0)\t7.811\t0.001\t0.010",
             "[1,5]<stdout>:300\timages/sec: 1092.3 +/- 3.8 (jitter = 1.0)\tnan\t0.001\t0.010"]  # fmt: skip
    v = _verdict(tmp_path, {"horovod.log": lines})
    assert v.category is Category.NUMERICAL


def test_an_unranked_exception_right_above_a_workers_exit_is_that_workers(tmp_path):
    lines = ["[default0]:[rank304]: step 1", "Traceback (most recent call last):",
             '  File "pretrain_gpt.py", line 229, in main', "    die",
             "NameError: name 'die' is not defined",
             "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) local_rank: 0 (pid: 118204) of "
             "binary: /usr/bin/python",
             "Failures:", "[1]:", "  time      : 2022-03-10_11:02:34", "  host      : jean-zay-iam38",
             "  rank      : 305 (local_rank: 1)", "  exitcode  : -15 (pid: 118205)",
             "Root Cause (first observed failure):", "[0]:", "  time      : 2022-03-10_11:02:33",
             "  host      : jean-zay-iam38", "  rank      : 304 (local_rank: 0)", "  exitcode  : 1 (pid: 118204)"]
    v = _verdict(tmp_path, {"tr11-1318862.out": lines})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (304,)


def _xid74(extra: list[str]) -> list[str]:
    return ["Jan 02 21:58:04 hgx-h200-13 kernel: NVRM: Xid (PCI:0000:4c:00): 74, pid='<unknown>', name=<unknown>, "
            "NVLink: fatal error detected on link 3",
            "Jan 02 21:58:05 hgx-h200-13 nv-fabricmanager[4211]: [ERROR] detected NVLink port error on GPU physical "
            "id 2 port 3", *extra]  # fmt: skip


def test_an_xid_74_beside_nvls_failures_names_every_rank_of_the_node(tmp_path):
    out = ["srun -N2 --ntasks-per-node=4 python train.py", *(f"{r}: [rank{r}]: step 1" for r in range(4)),
           *(f"{r}: hgx-h200-13:538{r}:539{r} [{r - 4}] transport/nvls.cc:244 NCCL WARN Cuda failure 1 'invalid "
             "argument'" for r in (4, 6)),
           "srun: error: hgx-h200-13: tasks 4-7: Exited with exit code 1"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-1.out": out, "hgx-h200-13_journal.txt": _xid74([])})
    assert v.category is Category.GPU_HARDWARE and v.culprit.ranks == (4, 5, 6, 7)


def test_an_xid_74_with_a_fabric_manager_port_error_names_its_one_rank(tmp_path):
    out = ["srun -N2 --ntasks-per-node=4 python train.py", *(f"{r}: [rank{r}]: step 1" for r in range(8)),
           "6: [rank6]: RuntimeError: CUDA error: uncorrectable NVLink error detected during the execution",
           "srun: error: hgx-h200-13: tasks 4-7: Exited with exit code 1"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-1.out": out, "hgx-h200-13_journal.txt": _xid74([])})
    assert v.category is Category.GPU_HARDWARE and len(v.culprit.ranks) <= 2


def test_a_one_node_deepspeed_launchers_segv_exit_is_a_framework_crash(tmp_path):
    lines = ["[2023-09-08 08:39:48,002] [INFO] [launch.py:315:sigkill_handler] Killing subprocess 1803311",
             "[2023-09-08 08:39:48,577] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python3.10', '-u', "
             "'main.py', '--local_rank=3', '--zero_stage', '2'] exits with return code = -11"]  # fmt: skip
    v = _verdict(tmp_path, {"training.log": lines})
    assert v.category is Category.FRAMEWORK_CRASH


def test_collective_fingerprints_that_drift_apart_are_a_desync(tmp_path):
    fp = ("[I ProcessGroupWrapper.cpp:562] [Rank {r}] Running collective: CollectiveFingerPrint(SequenceNumber={s}, "
          "OpType={op}, TensorShape=[], TensorDtypes=Float)")
    lines = [fp.format(r=r, s=s, op="ALLTOALL_BASE") for s in (1240, 1241) for r in (0, 1)]
    lines += [fp.format(r=0, s=1273, op="ALLREDUCE"), fp.format(r=1, s=1271, op="ALLREDUCE")]
    v = _verdict(tmp_path, {"run_moe.log": lines})
    assert v.category is Category.DISTRIBUTED_HANG and not v.restartable and not v.culprit.ranks


def test_collective_fingerprints_in_step_are_no_failure(tmp_path):
    fp = ("[I ProcessGroupWrapper.cpp:562] [Rank {r}] Running collective: CollectiveFingerPrint(SequenceNumber={s}, "
          "OpType=ALLREDUCE, TensorShape=[], TensorDtypes=Float)")
    v = _verdict(tmp_path, {"run.log": [fp.format(r=r, s=s) for s in (7, 8) for r in (0, 1)]})
    assert v.category is Category.UNKNOWN


def test_hf_process_rank_lines_under_srun_labels_make_the_labels_launchers(tmp_path):
    lines = [f"{n}: 03/30/2024 14:02:20 - INFO - llmtuner.hparams.parser - Process rank: {n * 4 + g}, device: "
             f"cuda:{g}, n_gpu: 1" for n in range(4) for g in range(4)]  # fmt: skip
    lines += ["2: FileNotFoundError: [Errno 2] Failed to open local file '/home/u/.cache/hf/train.arrow'",
              "2: [2024-03-30 14:03:03,490] torch.distributed.elastic.multiprocessing.api: [ERROR] failed (exitcode: "
              "1) local_rank: 0 (pid: 77119) of binary: /usr/bin/python",
              "2: Root Cause (first observed failure):", "2: [0]:", "2:   time      : 2024-03-30_14:03:02",
              "2:   host      : hpc-g023", "2:   rank      : 8 (local_rank: 0)", "2:   exitcode  : 1 (pid: 77119)",
              "srun: error: hpc-g023: task 2: Exited with exit code 1",
              "srun: error: hpc-g021: task 0: Terminated", "srun: error: hpc-g022: task 1: Terminated",
              "srun: error: hpc-g024: task 3: Terminated"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-3310457.out": lines})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (8,)


def test_a_kernels_assertion_raised_through_an_egg_installed_library_is_its_crash(tmp_path):
    lines = ["torch.multiprocessing.spawn.ProcessRaisedException: ",
             "-- Process 3 terminated with the following error:",
             "Traceback (most recent call last):",
             '  File "/usr/local/lib/python3.10/dist-packages/deep_ep-1.0.0-py3.10-linux-x86_64.egg/deep_ep/'
             'buffer.py", line 426, in internode_combine',
             "    combined_x, combined_topk_weights, event = self.runtime.internode_combine(",
             "RuntimeError: Failed: Assertion error /workspace/DeepEP/csrc/kernels/internode.cu:1713 'num_max > 0'"]
    v = _verdict(tmp_path, {"test_internode.log": lines})
    assert v.category is Category.FRAMEWORK_CRASH


def test_busy_gpus_are_the_nodes_state(tmp_path):
    lines = ["RuntimeError: cuda runtime error (46) : all CUDA-capable devices are busy or unavailable at THC.cpp:70"]
    v = _verdict(tmp_path, {"slurm-214877.out": lines})
    assert v.category is Category.HOST and v.restartable


def test_horovods_shut_down_message_is_the_aftermath_of_another_failure(tmp_path):
    lines = ["ORTE has lost communication with a remote daemon.",
             "[1,0]<stderr>:RuntimeError: Horovod has been shut down. This was caused by an exception on one of the "
             "ranks or an attempt to allreduce, allgather or broadcast a tensor after one of the ranks finished"]
    v = _verdict(tmp_path, {"slurm-248913.out": lines})
    assert v.category is not Category.APPLICATION


def test_nccls_prefix_after_a_loggers_stamp_places_the_line(tmp_path):
    lines = ["[default0]:[2024-06-23 15:45:07] hgx-c14:420:437 [0] transport/nvls.cc:379 (nvlsAllocateMem) NCCL WARN "
             "Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA error 401"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-93011.out": lines})
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("hgx-c14",)


def test_tritons_illegal_access_is_a_framework_crash(tmp_path):
    lines = ["[default3]:[rank3]: RuntimeError: Triton Error [CUDA]: an illegal memory access was encountered"]
    v = _verdict(tmp_path, {"node0_torchrun.log": lines})
    assert v.category is Category.FRAMEWORK_CRASH


def test_a_bare_sigbus_is_the_hosts_and_not_restartable(tmp_path):
    lines = ["[2024-02-01 10:02:11,102] [ERROR] [launch.py:321:sigkill_handler] ['/usr/bin/python', '-u', 'train.py', "
             "'--local_rank=2'] exits with return code = -7",
             "Bus error (core dumped)"]  # fmt: skip
    v = _verdict(tmp_path, {"train.log": lines})
    assert v.category is Category.HOST and not v.restartable


def test_a_script_refusing_its_arguments_is_the_applications(tmp_path):
    lines = ["usage: train.py [-h] [--config-file FILE]", "train.py: error: unrecognized arguments: --use-env"] * 4
    v = _verdict(tmp_path, {"slurm-71.out": lines})
    assert v.category is Category.APPLICATION and not v.restartable


def test_a_blocking_waits_timeout_is_a_hangs_timeout(tmp_path):
    lines = [f"[rank{r}]: torch.distributed.DistBackendError: [Rank {r}] Work WorkNCCL(SeqNum=43379, "
             "OpType=_ALLGATHER_BASE, NumelIn=8069120, Timeout(ms)=600000) timed out in blocking wait."
             for r in range(1, 8)]  # fmt: skip
    v = _verdict(tmp_path, {"train.log": lines})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_slurmds_lost_batch_script_is_the_schedulers(tmp_path):
    lines = ["slurmstepd: error: execve(): /tmp/slurmd/job00089/slurm_script: No such file or directory"]
    v = _verdict(tmp_path, {"error_89.err": lines})
    assert v.category is Category.SCHEDULER and v.restartable


def test_srun_unable_to_load_the_sites_spank_plugins_is_the_schedulers(tmp_path):
    lines = ["srun: error: spank: Failed to open /opt/slurm/etc/plugstack.conf.d/sedXq3Lm0: Permission denied",
             "srun: error: Plug-in initialization failed"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-12.out": lines})
    assert v.category is Category.SCHEDULER and not v.restartable
