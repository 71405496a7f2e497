"""Rules from rounds 52 and 53 of blind cases: Slurm's warning signal ending srun's tasks is the scheduler's; a
host's row of EC2's spot terminations names it; dinov2's `NaN detected` and apex's loss scale gone to nothing are
numerical; a launcher's SIGBUS exit with /dev/shm full is the host's shared memory; memory run out on several nodes
alike names no one; set-up errors on every host are not restartable (EFA's address vector, NCCL's link-local
address, behind SkyPilot's prefix); DataLoader's segfault message is a crash; the ranks in another operation at the
same call are the hang's; torch and a mismatched NCCL are the environment's; a Python warning quoting an error is
not that error."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def test_slurms_warning_signal_ending_every_task_is_the_schedulers(tmp_path):
    lines = ["2025-05-29 03:58:40 [rank0] step 236200 | loss 3.0081",
             *(f"srun: error: gpu-c1{n}: task {n}: User defined signal 1" for n in range(4))]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-4410321.out": lines})
    assert v.category is Category.SCHEDULER and v.restartable
    assert v.culprit.nodes == () and v.culprit.ranks == ()


def test_a_hosts_row_of_spot_terminations_names_that_node_and_its_ranks(tmp_path):
    out = [*(f"ip-10-0-{r // 4 + 1}-1{r // 4}:31{r:02d}:32{r:02d} [{r % 4}] NCCL INFO comm 0x7f01 rank {r} "
             f"nranks 12 cudaDev {r % 4} busId 1000 - Init COMPLETE" for r in range(12)),
           "srun: error: Node failure on ip-10-0-3-12"]  # fmt: skip
    ec2 = ["ip-10-0-3-12.ec2.internal\tterminated\tServer.SpotInstanceTermination: Spot instance termination"]
    v = _verdict(tmp_path, {"slurm-4417.out": out, "head_node_logs.txt": ec2})
    assert v.category is Category.SCHEDULER and v.culprit.nodes == ("ip-10-0-3-12",)
    assert v.culprit.ranks == (8, 9, 10, 11)


def test_dinov2s_nan_check_and_apexs_vanished_loss_scale_are_numerical(tmp_path):
    dino = ["I20231116 14:04:49 2870314 dinov2 train.py:271] NaN detected", "AssertionError"]
    assert _verdict(tmp_path / "a", {"318822_0_log.out": dino}).category is Category.NUMERICAL
    apex = ["Gradient overflow.  Skipping step, loss scaler 0 reducing loss scale to 0.0",
            "ZeroDivisionError: float division by zero"]  # fmt: skip
    v = _verdict(tmp_path / "b", {"slurm-712044.out": apex})
    assert v.category is Category.NUMERICAL and v.restartable is False


def _df_shm_full(host: str) -> list[str]:
    return [f"root@{host}:/gpt-neox# df -h /dev/shm", "Filesystem      Size  Used Avail Use% Mounted on",
            "shm              64M   64M     0 100% /dev/shm"]  # fmt: skip


def _ds_exit(host: str, local: int) -> str:
    return (f"{host}: [2023-05-18 02:58:56,418] [ERROR] [launch.py:324:sigkill_handler] ['/usr/bin/python', '-u', "
            f"'train.py', '--local_rank={local}'] exits with return code = -7")  # fmt: skip


def test_sigbus_exits_with_dev_shm_full_on_both_nodes_are_the_containers_size(tmp_path):
    files = {"train.log": [_ds_exit("gpu-a01", 1), _ds_exit("gpu-a02", 5)],
             "df_gpu-a01.txt": _df_shm_full("gpu-a01"), "df_gpu-a02.txt": _df_shm_full("gpu-a02")}  # fmt: skip
    v = _verdict(tmp_path, files)
    assert v.category is Category.HOST and v.restartable is False
    assert v.culprit.nodes == () and v.culprit.ranks == ()


def test_oom_kills_on_two_nodes_name_no_one(tmp_path):
    def kill(host: str, pid: int) -> str:
        return (f"Mar 12 04:11:0{pid % 10} {host} kernel: Out of memory: Killed process {pid} (python) "
                "total-vm:187342212kB, anon-rss:121873344kB, file-rss:90112kB, shmem-rss:0kB, UID:1001")

    def node_log(node_rank: int, local: int, pid: int) -> list[str]:
        return [f"+ torchrun --nnodes=2 --nproc_per_node=8 --node_rank={node_rank} train.py",
                f"ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: {local} "
                f"(pid: {pid}) of binary: /usr/bin/python3"]  # fmt: skip

    files = {"node0_mt-gpu-07_train.log": node_log(0, 5, 4411), "node1_mt-gpu-08_train.log": node_log(1, 2, 5522),
             "mt-gpu-07.kern.log": [kill("mt-gpu-07", 4411)], "mt-gpu-08.kern.log": [kill("mt-gpu-08", 5522)]}
    v = _verdict(tmp_path, files)
    assert v.category is Category.HOST and v.restartable is False
    assert v.culprit.nodes == () and v.culprit.ranks == ()


def test_efas_address_vector_refusing_peers_on_both_hosts_is_not_restartable(tmp_path):
    def insert(host: str, rank: int) -> str:
        return (f"{host}:1339{rank}:1348{rank} [{rank % 8}] nccl_net_ofi_sendrecv.c:1842 NCCL WARN NET/OFI Unable to "
                "insert remote address into address vector for device 1. RC: -22")

    files = {"10-1-39-201_torchrun.log": [insert("ip-10-1-39-201", r) for r in range(8, 12)],
             "10-1-36-77_torchrun.log": [insert("ip-10-1-36-77", r) for r in range(4)]}  # fmt: skip
    v = _verdict(tmp_path, files)
    assert v.category is Category.NETWORK and v.restartable is False


def test_nccl_connecting_to_a_link_local_address_behind_skypilots_prefix_is_the_set_ups(tmp_path):
    def connect(who: str, host: str) -> str:
        return (f"({who}) [default3]:{host}:9314:9363 [3] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
                "fe80::7e1e:52ff:fe3a:8d02%enP51977s1<53639> failed : Software caused connection abort")

    lines = [connect("head, rank=0, pid=7712", "sky-a2b1-0"), connect("worker1, rank=1, pid=6129", "sky-a2b1-1")]
    v = _verdict(tmp_path, {"sky_launch_job3.log": lines})
    assert v.category is Category.NETWORK and v.restartable is False


def test_dataloaders_segfault_message_is_a_crash_of_its_rank(tmp_path):
    lines = ["(RayTrainWorker pid=31024, ip=172.31.14.58) Setting up process group for: env:// [rank=6, world_size=8]",
             "(RayTrainWorker pid=31024, ip=172.31.14.58) ERROR: Unexpected segmentation fault encountered in worker.",
             "RuntimeError: DataLoader worker (pid(s) 47733) exited unexpectedly"]  # fmt: skip
    v = _verdict(tmp_path, {"train_ray_run.log": lines})
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (6,)


def _watchdog(rank: int, op: str) -> str:
    return (f"[rank{rank}]:[E0901 16:47:22.200000000 ProcessGroupNCCL.cpp:632] [Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum=31207, OpType={op}, NumelIn=1, NumelOut=8, "
            "Timeout(ms)=600000) ran for 600031 milliseconds before timing out.")  # fmt: skip


def test_two_ranks_of_eight_in_another_operation_are_the_hangs(tmp_path):
    lines = [_watchdog(r, "ALLREDUCE" if r in (6, 7) else "_ALLGATHER_BASE") for r in range(8)]
    v = _verdict(tmp_path, {"slurm-4471093.out": lines})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (6, 7) and v.restartable is False


def test_half_the_ranks_in_another_operation_name_no_one(tmp_path):
    lines = [_watchdog(r, "ALLREDUCE" if r < 4 else "_ALLGATHER_BASE") for r in range(8)]
    v = _verdict(tmp_path, {"slurm-4471094.out": lines})
    assert v.category is Category.DISTRIBUTED_HANG and len(v.culprit.ranks) != 4


def test_nccl_refusing_torchs_config_is_the_environments_on_every_rank(tmp_path):
    lines = [f"ax-a100-0{1 + r // 4}:271{r}:271{r} [{r % 4}] init.cc:1303 NCCL WARN Invalid config blocking "
             "attribute value -2147483648" for r in range(8)]  # fmt: skip
    v = _verdict(tmp_path, {"ax_train.log": lines})
    assert v.category is Category.APPLICATION and v.restartable is False


def test_a_python_warning_that_quotes_an_out_of_memory_error_is_not_the_failure(tmp_path):
    lines = ["/env/lib/python3.10/site-packages/torch/distributed/fsdp/_state_dict_utils.py:312: UserWarning: Failed "
             "to clone() tensor with name _fsdp_wrapped_module.wte.weight. This may mean that this state_dict entry "
             "could point to invalid memory regions after returning from state_dict() call if this parameter is "
             "managed by FSDP. Please check clone implementation of _fsdp_wrapped_module.wte.weight. Error: CUDA out "
             "of memory. Tried to allocate 1.53 GiB",
             "AssertionError: Different ranks have different values for initial_lr."]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-88213.out": lines})
    assert v.signature != "cuda_oom"
