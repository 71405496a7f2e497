"""Rules drawn from rounds 91 and 92 of blind cases: a C++ assertion in the framework, a best-so-far loss that
starts at inf, icefall's gradient scale, torchrun ignoring --master_addr, GCE's operations list, LSF's and PBS's run
limits, torch's shared-memory map failing, NaN on one node's GPUs only, a module's bare `Error` class, and NCCL's
prefix behind a launcher's `[N] `."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category


def test_a_cpp_assertion_in_torch_is_the_frameworks_and_the_launchers_worker_names_the_rank(tmp_path):
    node0 = ["$ python -m torch.distributed.launch --nproc_per_node=4 --nnodes=2 --node_rank=0 --master_addr=gpu07 "
             "train_qa.py",
             "python: /opt/conda/conda-bld/pytorch/work/torch/csrc/autograd/input_buffer.cpp:14: void "
             "torch::autograd::InputBuffer::add(size_t, torch::autograd::Variable): Assertion `pos >= 0' failed.",
             "Traceback (most recent call last):",
             "subprocess.CalledProcessError: Command '['/opt/conda/bin/python', '-u', 'train_qa.py', "
             "'--local_rank=2']' died with <Signals.SIGABRT: 6>."]  # fmt: skip
    node1 = ["RuntimeError: NCCL error in: /pytorch/torch/lib/c10d/ProcessGroupNCCL.cpp:260, unhandled system error"]
    v = _verdict(tmp_path, {"train_node0_gpu07.log": node0, "train_node1_gpu08.log": node1})
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (2,)


def test_a_best_so_far_loss_that_starts_at_inf_is_not_a_nan(tmp_path):
    log = ["2023-04-16 21:04:02,544 INFO [trainer.py:1046] (0/8) {'best_train_loss': inf, 'best_valid_loss': inf, "
           "'best_train_epoch': -1}",
           "2023-04-16 21:10:02,544 INFO [trainer.py:1046] (0/8) Epoch 1, batch 100, loss[loss=1.27]"]
    log += [f"[E ProcessGroupNCCL.cpp:828] [Rank {r}] Watchdog caught collective operation timeout: "
            f"WorkNCCL(SeqNum=61873, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800531 milliseconds before "
            "timing out." for r in range(8)]  # fmt: skip
    v = _verdict(tmp_path, {"console.log": log})
    assert v.category is Category.DISTRIBUTED_HANG


def test_icefalls_gradient_scale_too_small_is_numerical(tmp_path):
    log = ["RuntimeError: ", "    If you see this error, it means that the gradient scale is too small."]
    v = _verdict(tmp_path, {"train.log": log})
    assert v.category is Category.NUMERICAL and v.restartable is False


def test_torchrun_ignoring_master_addr_before_a_rendezvous_timeout_is_the_launch_command(tmp_path):
    def node(rank: int) -> list[str]:
        return [f"+ torchrun --nproc_per_node=4 --nnodes=2 --node_rank={rank} --rdzv_backend=c10d "
                "--master_addr=lab-gpu03 --master_port=29531 train_sft.py",
                "master_addr is only used for static rdzv_backend and when rdzv_endpoint is not specified.",
                "    raise RendezvousTimeoutError()",
                "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError"]

    v = _verdict(tmp_path, {"lab-gpu01.console.txt": node(1), "lab-gpu03.console.txt": node(0)})
    assert v.category is Category.APPLICATION and v.restartable is False


def test_gces_operations_list_names_the_preempted_instance_in_its_target(tmp_path):
    ops = ["NAME                                              TYPE                         TARGET",
           "systemevent-1717388247118-61a0e3f2c4d18-b7a92e05  compute.instances.preempted  "
           "us-central1-a/instances/gce-a100-spot-1  200  DONE  2024-06-02T21:17:27.118-07:00"]
    launch = ["[gce-a100-spot-0] launching torchrun --nnodes 2 --node-rank 0 --nproc-per-node 4 train.py",
              "[gce-a100-spot-1] launching torchrun --nnodes 2 --node-rank 1 --nproc-per-node 4 train.py"]
    v = _verdict(tmp_path, {"notes.txt": ops, "launch.log": launch})
    assert v.category is Category.SCHEDULER and v.culprit.nodes == ("gce-a100-spot-1",)


def test_lsf_and_pbs_run_limits_are_the_schedulers_time_limit(tmp_path):
    for name, line in (("lsf", "TERM_RUNLIMIT: job killed after reaching LSF run time limit."),
                       ("pbs", "=>> PBS: job killed: walltime 3634 exceeded limit 3600")):
        v = _verdict(tmp_path / name, {"job.out": ["epoch 3 step 900 loss 0.32", line]})
        assert v.category is Category.SCHEDULER and v.restartable is True, name


def test_torch_failing_to_map_shared_memory_is_the_hosts(tmp_path):
    log = ["[default5]:RuntimeError: unable to mmap 16777216 bytes from file </torch_88412_2017443619_61209>: "
           "Cannot allocate memory (12)"]
    v = _verdict(tmp_path, {"slurm-7730418.out": log})
    assert v.category is Category.HOST and v.restartable is False


def test_nan_on_several_gpus_of_one_node_while_the_others_wait_is_that_nodes(tmp_path):
    log = [f"{r}: [rank{r}]: RuntimeError: Rank {r}, node dfw-0147, device {r - 40}, iteration 812: Unexpected result "
           "nan (message='found NaN in local grad norm for bucket #0')" for r in (40, 42, 43)]
    log += [f"{r}: [rank{r}]:[E1103 04:51:37.1 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective "
            f"operation timeout: WorkNCCL(SeqNum=3317, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)"
            for r in (0, 8, 16)]  # fmt: skip
    log += ["srun: error: dfw-0147: tasks 40-47: Exited with exit code 1",
            "srun: error: dfw-0140: tasks 0-7: Exited with exit code 1",
            "srun: error: dfw-0141: tasks 8-15: Exited with exit code 1",
            "srun: error: dfw-0142: tasks 16-23: Exited with exit code 1"]
    v = _verdict(tmp_path, {"slurm-2291407.out": log})
    assert v.category is Category.NUMERICAL and v.culprit.ranks == (40, 42, 43)
    assert v.culprit.nodes == ("dfw-0147",)


def test_a_modules_bare_error_class_is_an_exception(tmp_path):
    log = ["Traceback (most recent call last):",
           '  File "/workspace/trainer/train_sdxl.py", line 1281, in main',
           "wandb.errors.Error: You must call wandb.init() before wandb.plot_table()"]
    v = _verdict(tmp_path, {"train.log": log})
    assert v.category is Category.APPLICATION


def test_nccls_prefix_behind_a_launchers_index_places_the_line(tmp_path):
    log = ["[56] trn-b-7:7170:7332 [0] misc/ibvwrap.cc:284 NCCL WARN Call to ibv_modify_qp failed with error Invalid "
           "argument",
           "[51] trn-b-6:7163:7335 [3] include/socket.h:403 NCCL WARN Net : Connection closed by remote peer"]
    v = _verdict(tmp_path, {"job.log": log})
    assert v.category is Category.NETWORK and v.culprit.nodes == ("trn-b-7",)


def test_the_master_addr_warning_of_a_run_that_got_going_is_not_its_cause(tmp_path):
    log = ["[2024-05-13 21:10:03,552] torch.distributed.run: [WARNING] master_addr is only used for static "
           "rdzv_backend and when rdzv_endpoint is not specified.",
           "INFO:__main__:node_rank=0 local_rank=0 rank=0 world_size=8 MASTER_ADDR=10.0.4.7 MASTER_PORT=6105",
           "[rank0]: RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.15 GiB total capacity)"]
    v = _verdict(tmp_path, {"std_log_process_0.txt": log})
    assert "master_addr" not in v.root_cause


def test_azure_mls_low_priority_eviction_is_the_schedulers_and_names_the_node(tmp_path):
    lifecycler = ["2024-05-13T21:09:40.118Z INFO  [tvmps_91d4c3aa06be4f1f8c27_p] lifecycler: node 1 of 2",
                  "2024-05-13T22:38:17.402Z WARN  [tvmps_91d4c3aa06be4f1f8c27_p] Received pre-emption warning signal "
                  "(scheduled event Preempt, NotBefore=2024-05-13T22:38:47Z)",
                  "2024-05-13T22:39:33.120Z ERROR lifecycler: job failed: PreemptionError: Nodes of this job got "
                  "pre-empted. Check if the run has failed or restarted."]  # fmt: skip
    v = _verdict(tmp_path, {"lifecycler.log": lifecycler})
    assert v.category is Category.SCHEDULER and v.restartable is True


def test_both_hosts_failing_alike_on_their_own_links_name_the_fabric_not_one_node(tmp_path):
    log = [f"[{host}:{pid}:0:{pid}] ib_mlx5_log.c:143  Transport retry count exceeded on mlx5_0:1/RoCE (synd 0x15 "
           "vend 0x81 hw_synd 0/0)" for host, pid in (("rc-01", 401), ("rc-02", 388), ("rc-01", 402), ("rc-02", 389))]
    log.append("mpirun noticed that process rank 0 with PID 401 on node rc-01 exited on signal 6 (Aborted).")
    v = _verdict(tmp_path, {"slurm-774120.out": log})
    assert v.category is Category.NETWORK and v.culprit.nodes == () and v.culprit.ranks == ()


def test_a_crash_that_came_back_on_one_node_among_others_that_changed_is_that_nodes(tmp_path):
    first = ["Nodes: cn204 cn211", "6: [init] rank 6/8 local_rank 2 host cn211",
             "srun: error: cn211: task 6: Segmentation fault (core dumped)", "srun: error: cn204: tasks 0-3: Killed"]
    second = ["Nodes: cn197 cn211", "5: [init] rank 5/8 local_rank 1 host cn211",
              "srun: error: cn211: task 5: Segmentation fault (core dumped)", "srun: error: cn197: tasks 0-3: Killed"]
    v = _verdict(tmp_path, {"slurm-36201.out": first, "slurm-36214.out": second})
    assert v.category is Category.HOST and v.culprit.nodes == ("cn211",) and v.restartable is True


def test_every_ranks_gpu_held_by_another_process_is_the_nodes(tmp_path):
    log = [f"1: [rank{r}]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 64.00 MiB. GPU {g} has a "
           f"total capacity of 79.19 GiB of which 21.06 MiB is free. Process 27144{g} has 39.02 GiB memory in use. "
           f"Process 27145{g} has 39.02 GiB memory in use." for r, g in ((8, 0), (11, 3), (14, 6))]
    log += ["srun: error: gpu-r19: task 1: Exited with exit code 1", "srun: error: gpu-r18: task 0: Killed"]
    v = _verdict(tmp_path, {"slurm-771904.out": log})
    assert v.category is Category.HOST and v.culprit.nodes == ("gpu-r19",) and v.restartable is True
