"""Rules from rounds 50 and 51 of blind cases: one exception raised alike on every node names no one; NCCL's socket
set-up refused or unroutable on every host is the site's set-up, not restartable; torch.distributed.launch's
CalledProcessError on a one-node job names its local rank; an MPI library's InfiniBand retry errors on three hosts
are the fabric's; a node's fault that names no node is the one node srun saw fail on its own; a wrapper's report
that torchrun failed is teardown; NCCL's `wrong type` at set-up is the network's and not restartable; a time limit
after an hour of silence in a job that logged every few seconds is a hang."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def _two_node_banner() -> list[str]:
    return ["+ srun -l --ntasks-per-node=1 bash -c 'torchrun --nnodes=2 --nproc-per-node=4 train.py'",
            "0: [rank0]: host gpu-a01 local_rank 0", "1: [rank4]: host gpu-a02 local_rank 0"]  # fmt: skip


def test_one_error_raised_on_every_node_names_no_rank(tmp_path):
    lines = [
        *_two_node_banner(),
        "0: [rank0]: RuntimeError: Timed out initializing process group in store based barrier on rank: 2, for key: "
        "store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)",
        "1: [rank4]: RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: "
        "store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)",
        "srun: error: gpu-a01: task 0: Exited with exit code 1",
        "srun: error: gpu-a02: task 1: Exited with exit code 1",
    ]
    v = _verdict(tmp_path, {"slurm-71.out": lines})
    assert v.category is Category.APPLICATION and not v.restartable
    assert v.culprit.ranks == () and v.culprit.nodes == ()


def test_an_error_raised_on_one_node_only_still_names_its_rank(tmp_path):
    lines = [
        *_two_node_banner(),
        "1: [rank4]: ValueError: Mesh 'tp' is not available. Ensure the corresponding parallelism dimension is "
        "enabled (size > 1).",
        "srun: error: gpu-a02: task 1: Exited with exit code 1",
        "srun: error: gpu-a01: task 0: Terminated",
    ]
    v = _verdict(tmp_path, {"slurm-72.out": lines})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (4,)


def _unreachable(host: str, rank: int, peer: str, why: str) -> str:
    return (f"{host}:9456{rank}:9462{rank} [{rank % 8}] misc/socket.cc:484 NCCL WARN socketStartConnect: Connect to "
            f"{peer}<51423> failed : {why}")  # fmt: skip


def test_nccl_connections_unroutable_from_every_host_are_not_restartable(tmp_path):
    files = {
        "node0_gpu-srv-a01.log": [_unreachable("gpu-srv-a01", r, "10.18.4.22", "No route to host") for r in range(4)],
        "node1_gpu-srv-a02.log": [_unreachable("gpu-srv-a02", r, "10.18.4.21", "No route to host") for r in range(4)],
    }
    v = _verdict(tmp_path, files)
    assert v.category is Category.NETWORK and v.restartable is False


def test_connections_aborted_on_two_hosts_stay_restartable(tmp_path):
    why = "Software caused connection abort"
    files = {
        "node0_gpu-srv-a01.log": [_unreachable("gpu-srv-a01", r, "10.18.4.30", why) for r in range(4)],
        "node1_gpu-srv-a02.log": [_unreachable("gpu-srv-a02", r, "10.18.4.30", why) for r in range(4)],
    }
    v = _verdict(tmp_path, files)
    assert v.category is Category.NETWORK and v.restartable is True


def test_torch_distributed_launch_on_one_node_names_the_local_rank_it_quotes(tmp_path):
    lines = [
        "Traceback (most recent call last):",
        '  File "tools/train_3d.py", line 211, in <module>',
        "RuntimeError: CUDA out of memory. Tried to allocate 11.84 GiB (GPU 0; 31.75 GiB total capacity; 18.93 GiB "
        "already allocated; 11.02 GiB free; 19.20 GiB reserved in total by PyTorch)",
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.8/site-packages/torch/distributed/launch.py", line 256, in main',
        "subprocess.CalledProcessError: Command '['/opt/conda/bin/python', '-u', 'tools/train_3d.py', "
        "'--local_rank=1', '--cfg', 'cfgs/pillar.yaml']' returned non-zero exit status 1.",
    ]
    prompt = ("root@dl-box02:/data/pillar3d# CUDA_VISIBLE_DEVICES=0,1 python -m torch.distributed.launch "
              "--nproc_per_node=2 --master_port=29512 tools/train_3d.py --cfg cfgs/pillar.yaml")
    v = _verdict(tmp_path, {"run_0815_console.txt": [prompt, "rank 0 / world 2, device cuda:0", *lines]})
    assert v.category is Category.APPLICATION and v.culprit.ranks == (1,) and v.culprit.nodes == ("dl-box02",)


def test_mpi_retry_errors_on_three_hosts_are_the_fabric_not_a_node(tmp_path):
    lines = [
        "+ mpiexec_mpt -np 96 omplace python -u train_mae_hvd.py",
        "epoch 3 step 1200 loss 0.412 img/s 1890",
        "MPT ERROR: r3i3n7: Transport retry count exceeded on mlx5_0:1/IB",
        "MPT: rank 57 dropping unexpected RC packet from 22 (r1i3n3:2), presumed failover",
        "MPT ERROR: r1i0n16: Transport retry count exceeded on mlx5_0:1/IB",
        "MPT ERROR: r4i1n15: Transport retry count exceeded on mlx5_0:1/IB",
        "MPT ERROR: Rank 57(g:57) is aborting with error code 0.",
    ]
    v = _verdict(tmp_path, {"mae_hvd.o7735512": lines})
    assert v.category is Category.NETWORK and v.restartable
    assert v.culprit.nodes == () and v.culprit.ranks == ()


def test_a_container_that_failed_on_one_node_names_that_node(tmp_path):
    lines = [
        "slurmstepd: error: pyxis: container start failed with error code: 1",
        "slurmstepd: error: pyxis: printing enroot log file:",
        "slurmstepd: error: pyxis:     enroot-nsenter: failed to create user namespace: No space left on device",
        "slurmstepd: error: pyxis: couldn't start container",
        "srun: error: gpu-c114: tasks 8-15: Exited with exit code 1",
        "srun: error: gpu-c113: tasks 0-7: Terminated",
        "srun: error: gpu-c115: tasks 16-23: Terminated",
    ]
    v = _verdict(tmp_path, {"gpt3-553201.out": lines})
    assert v.category is Category.HOST and v.culprit.nodes == ("gpu-c114",)
    assert v.culprit.ranks == ()  # the node alone, not the tasks that did not start there (round 95)


def test_a_wrappers_report_that_torchrun_failed_is_not_the_failure(tmp_path):
    lines = [
        *(f"[rank{r}]:[E304 09:42:51.309170818 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective "
          "operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran "
          "for 1800083 milliseconds before timing out." for r in range(1, 8)),  # fmt: skip
        "subprocess.CalledProcessError: Command '['torchrun', '--nnodes', '2', '--node_rank', '1', "
        "'--nproc_per_node', '4', 'src/train.py', 'pt_qwen_7b.yaml']' returned non-zero exit status 1.",
        "subprocess.CalledProcessError: Command '['torchrun', '--nnodes', '2', '--node_rank', '0', "
        "'--nproc_per_node', '4', 'src/train.py', 'pt_qwen_7b.yaml']' returned non-zero exit status 1.",
    ]
    v = _verdict(tmp_path, {"slurm-482913.out": lines})
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_nccls_wrong_connection_type_at_set_up_is_the_networks_and_not_restartable(tmp_path):
    lines = [
        "srv-gpu01:48211:48401 [0] misc/socket.cc:457 NCCL WARN socketFinalizeAccept: wrong type 3 != 4",
        "srv-gpu01:48211:48401 [0] proxy.cc:1563 NCCL WARN [Proxy Service 0] Failed to execute operation Connect "
        "from rank 0, retcode 3",
        "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1691, "
        "internal error - please report this issue to the NCCL developers, NCCL version 2.18.1",
    ]
    v = _verdict(tmp_path, {"gpu01_run.log": lines})
    assert v.category is Category.NETWORK and v.restartable is False


def _progress(start_min: int, count: int, every_s: int) -> list[str]:
    lines = []
    for i in range(count):
        t = start_min * 60 + i * every_s
        lines.append(f"[2026-03-21 21:{t // 60:02d}:{t % 60:02d}] iteration {i + 1:5d}/{count} | lm loss 2.31")
    return lines


def test_a_time_limit_after_an_hour_of_silence_is_a_hang(tmp_path):
    end = "slurmstepd: error: *** JOB 992870 ON gn-h41 CANCELLED AT 2026-03-21T22:39:41 DUE TO TIME LIMIT ***"
    lines = [*_progress(0, 40, 2), "validation loss at iteration 40 | lm loss value: 8.44E-02", end]
    v = _verdict(tmp_path, {"slurm-992870.out": lines})
    assert v.category is Category.DISTRIBUTED_HANG and v.restartable is False
    assert v.culprit.nodes == () and "no progress for" in v.root_cause


def test_a_time_limit_on_a_job_that_logged_each_half_hour_stays_the_schedulers(tmp_path):
    stamps = [f"[2026-03-21 {h:02d}:{m:02d}:00] epoch {i} done, val acc 0.81" for i, (h, m) in
              enumerate([(18, 0), (18, 30), (19, 0), (19, 30), (20, 0), (20, 30), (21, 0)])]  # fmt: skip
    end = "slurmstepd: error: *** JOB 992871 ON gn-h41 CANCELLED AT 2026-03-21T21:40:00 DUE TO TIME LIMIT ***"
    lines = [*stamps, end]
    v = _verdict(tmp_path, {"slurm-992871.out": lines})
    assert v.category is Category.SCHEDULER and v.restartable
