"""Rules from round 35 of blind cases: a script run at a shell prompt that starts a one-node launcher prints that
host's lines, and the launcher's node rank places its ranks there; Megatron's seed lines name a file's ranks; pyxis
failing to start a task's container is its node's fault; EC2's spot termination of one instance names it and its
ranks; a py-spy dump of another process pasted into a file named after rank 0 is not rank 0's; torchtune's `tune
run` is torchrun; a worker `mp.spawn` saw killed by a signal has the rank of its node's label and its number."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

_MISSING = "FileNotFoundError: [Errno 2] No such file or directory: '/data/local/bert/wiki_text_sentence.idx'"


def _session(host: str, node_rank: int, lines: list[str]) -> list[str]:
    return [f"ubuntu@{host}:~/Megatron-LM$ bash examples/pretrain_bert_distributed.sh",
            f"+ python -m torch.distributed.launch --nproc_per_node 4 --nnodes 2 --node_rank {node_rank} "
            "--master_addr 10.2.0.11 --master_port 6000 pretrain_bert.py --num-layers 24", *lines]  # fmt: skip


def test_a_file_missing_on_one_nodes_local_disk_names_that_node_and_its_ranks(tmp_path):
    victims = ["RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:514, unhandled system error, NCCL version 2.4.8"] * 2
    raised = [line for _ in range(4) for line in ("Traceback (most recent call last):", _MISSING)]
    logs = {"node0-a.log": _session("gpu-h11", 0, victims), "node1-b.log": _session("gpu-h12", 1, raised)}
    v = analyze_run(write_run(tmp_path, logs)).verdict
    assert v.category is Category.APPLICATION
    assert v.culprit.nodes == ("gpu-h12",) and v.culprit.ranks == (4, 5, 6, 7)


def test_megatrons_seed_lines_give_a_pasted_sessions_ranks(tmp_path):
    seeds = [f"> initializing model parallel cuda seeds on global rank {r}, model parallel rank 0, and data parallel "
             f"rank {r} with model parallel seed: 3952 and data parallel seed: 1234" for r in (5, 7, 4, 6)]
    raised = [line for _ in range(4) for line in ("Traceback (most recent call last):", _MISSING)]
    session = ["ubuntu@gpu-h12:~/Megatron-LM$ bash examples/pretrain_bert_distributed.sh",
               "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid your "
               "system being overloaded", *seeds, *raised]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"node1_gpu-h12.log": session})).verdict
    assert v.culprit.nodes == ("gpu-h12",) and v.culprit.ranks == (4, 5, 6, 7)


def test_a_container_that_did_not_start_is_its_nodes(tmp_path):
    out = [f"{t}: slurmstepd: error: pyxis: container start failed with error code: 1" for t in range(20, 24)]
    out += [f"{t}: slurmstepd: error: pyxis:          1188205 Segmentation fault      (core dumped) | pwck -R "
            '"${ENROOT_ROOTFS}"' for t in (20, 22)]  # fmt: skip
    out += ["srun: error: hkn0706: tasks 20-23: Exited with exit code 1"]
    out += [f"srun: error: hkn07{n:02d}: tasks {4 * (n - 1)}-{4 * n - 1}: Terminated" for n in range(1, 9) if n != 6]
    v = analyze_run(write_run(tmp_path, {"fcn-train-2318840.out": out})).verdict
    assert v.category is Category.HOST and v.restartable
    assert v.culprit.nodes == ("hkn0706",) and v.culprit.ranks == ()  # the node alone (round 95)


def test_an_ec2_spot_termination_names_the_instance_and_its_rank(tmp_path):
    logs = ["(node-0 pid=26611) + python -m torch.distributed.launch --nproc_per_node=1 --nnodes=2 --node_rank=0 "
            "--master_addr=172.31.19.42 train.py",
            "(node-1 pid=22874, ip=172.31.23.131) + python -m torch.distributed.launch --nproc_per_node=1 --nnodes=2 "
            "--node_rank=1 --master_addr=172.31.19.42 train.py",
            "(node-0 pid=26611) RuntimeError: NCCL communicator was aborted on rank 0.  Original reason for failure "
            "was: NCCL error: unhandled system error, NCCL version 2.10.3"]  # fmt: skip
    cloud = ["i-0a4be1d27c9f03e55  ip-172-31-19-42.us-west-2.compute.internal   172.31.19.42   head    running  None",
             "i-07f1c33e8ab62d901  ip-172-31-23-131.us-west-2.compute.internal  172.31.23.131  worker  terminated  "
             "Server.SpotInstanceTermination"]  # fmt: skip
    v = analyze_run(write_run(tmp_path, {"sky_spot_logs.txt": logs, "ec2.txt": cloud})).verdict
    assert v.category is Category.SCHEDULER and v.restartable
    assert v.culprit.nodes == ("ip-172-31-23-131",) and v.culprit.ranks == (1,)


def test_a_slurm_time_limit_still_names_no_node(tmp_path):
    out = ["slurmstepd: error: *** JOB 4410 ON n3 CANCELLED AT 2025-01-02T10:00:00 DUE TO TIME LIMIT ***",
           "srun: error: n3: tasks 0-3: Terminated", "srun: error: n4: tasks 4-7: Terminated"]
    v = analyze_run(write_run(tmp_path, {"slurm-4410.out": out})).verdict
    assert v.category is Category.SCHEDULER and v.culprit.nodes == () and v.culprit.ranks == ()


def test_another_processs_dump_pasted_under_rank_0s_name_is_not_rank_0s(tmp_path):
    run = ["$ tune run --nproc_per_node 8 lora_finetune_distributed --config ./configs/70B_lora.yaml"]
    run += [f"[rank{r}]:[E1203 10:14:02.77 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
            "timeout: WorkNCCL(SeqNum=29117, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
            "600007 milliseconds before timing out." for r in range(1, 8)]  # fmt: skip
    run += ["  host      : v100-box-02", "  rank      : 3 (local_rank: 3)"]
    dumps = ["$ sudo py-spy dump --pid 5588", "Process 5588: /srv/venv/bin/python3 -u recipes/lora.py",
             'Thread 5588 (active): "MainThread"', "    save_file (safetensors/torch.py:286)",
             "$ sudo py-spy dump --pid 5590", "Process 5590: /srv/venv/bin/python3 -u recipes/lora.py",
             'Thread 5590 (idle): "MainThread"', "    barrier (torch/distributed/distributed_c10d.py:4551)"]
    v = analyze_run(write_run(tmp_path, {"tune.log": run, "pyspy_dump_rank0_pid5588.txt": dumps})).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert v.culprit.ranks == (0,) and v.culprit.nodes == ("v100-box-02",)


def test_a_spawned_worker_killed_by_a_signal_has_its_global_rank(tmp_path):
    out = ["0: INFO trainer_main.py: 112: Using Distributed init method: tcp://lf1718:40111, world_size: 16, rank: 0",
           "1: torch.multiprocessing.spawn.ProcessExitedException: process 5 terminated with signal SIGSEGV",
           "srun: error: lf1722: task 1: Exited with exit code 1", "srun: error: lf1718: task 0: Killed"]
    v = analyze_run(write_run(tmp_path, {"slurm-39044112.out": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (13,)
