"""Round 23's rules, one small case each: DeepSpeed's exit line names its last child's command, its kill list
gives its children's pids in rank order, a child killed by SIGKILL comes before its peers' remote errors,
and torchrun's rendezvous places each node's block of ranks."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

_MAPPING = ("gpu-k01: [2023-07-19 09:01:05,902] [INFO] [launch.py:162:main] global_rank_mapping=defaultdict("
            "<class 'list'>, {'gpu-k01': [0, 1], 'gpu-k02': [2, 3]})")


def _ds_line(host: str, stamp: str, what: str) -> str:
    return f"{host}: [2023-07-19 {stamp},318] [INFO] [launch.py:315:sigkill_handler] {what}"


def _ds_exit(host: str, stamp: str, local: int, code: int) -> str:
    return (f"{host}: [2023-07-19 {stamp},540] [ERROR] [launch.py:321:sigkill_handler] ['python', '-u', 'train.py', "
            f"'--local_rank={local}'] exits with return code = {code}")


def test_deepspeeds_exit_line_names_its_last_childs_command_not_the_rank_that_ended(tmp_path):
    out = [_MAPPING, _ds_exit("gpu-k02", "10:45:06", 1, -11)]
    v = analyze_run(write_run(tmp_path, {"slurm-3302.out": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH
    assert (v.culprit.ranks, v.culprit.nodes) == ((), ("gpu-k02",))


def test_deepspeeds_kill_list_gives_the_segfaulted_pid_its_rank(tmp_path):
    out = [_MAPPING, _ds_line("gpu-k02", "10:45:06", "Killing subprocess 52210"),
           _ds_line("gpu-k02", "10:45:06", "Killing subprocess 52211"), _ds_exit("gpu-k02", "10:45:06", 1, -11)]
    journal = ["Jul 19 10:45:06 gpu-k02 kernel: pt_main_thread[52210]: segfault at 0 ip 00007f3c5e21a4d7 sp "
               "00007f3b7affc1a0 error 4 in libtorch_cuda.so[7f3c5c600000+3c1e4000]"]
    v = analyze_run(write_run(tmp_path, {"slurm-3302.out": out, "gpu-k02_journalctl.txt": journal})).verdict
    assert v.category is Category.FRAMEWORK_CRASH
    assert (v.culprit.ranks, v.culprit.nodes) == ((2,), ("gpu-k02",))  # the first child, not the printed last


def test_a_child_killed_by_sigkill_comes_before_its_peers_remote_errors(tmp_path):
    out = [_ds_exit("gpu-m04", "15:28:02", 7, -9),
           "gpu-m03: RuntimeError: NCCL communicator was aborted on rank 3.  Original reason for failure was: NCCL "
           "error: remote process exited or there was a network error, NCCL version 2.14.3",
           _ds_exit("gpu-m03", "15:29:08", 7, 1)]
    v = analyze_run(write_run(tmp_path, {"slurm-88127.out": out})).verdict
    assert v.category is Category.UNKNOWN and v.culprit.nodes == ("gpu-m04",)


def test_torchruns_rendezvous_places_a_lost_nodes_ranks_whatever_sruns_task_numbers(tmp_path):
    out = ["+ srun bash -c 'python -u -m torch.distributed.run --nproc_per_node 8 --nnodes 4 --rdzv_endpoint "
           "jz-iam37:6000 --rdzv_backend c10d pretrain_gpt.py'"]
    for rank, host in enumerate(("jz-iam37", "jz-iam49", "jz-iam52", "jz-iam41")):
        out.append(f"INFO:torch.distributed.elastic.rendezvous.dynamic_rendezvous:The node '{host}-ib0_18{rank}_0' "
                   f"has joined round 0 of the rendezvous 'none' as rank {rank} in a world of size 4.")
    out += ["srun: error: Node failure on jz-iam52",
            "srun: error: jz-iam49: task 2: Killed", "srun: error: jz-iam41: task 1: Killed",
            "srun: error: jz-iam37: task 0: Killed"]
    v = analyze_run(write_run(tmp_path, {"tr11c-1554478.out": out})).verdict
    assert v.category is Category.HOST
    assert (v.culprit.ranks, v.culprit.nodes) == (tuple(range(16, 24)), ("jz-iam52",))


def test_the_abort_a_dying_interpreter_prints_under_its_traceback_is_not_a_framework_crash(tmp_path):
    # found by the real-cluster test of an injected ValueError: gloo's thread aborted the exiting interpreter
    out = ["2: [rank2]: Traceback (most recent call last):", '2: [rank2]:   File "train.py", line 40, in <module>',
           "2: [rank2]: ValueError: batch 3 on rank 2 has a label outside the model's range",
           "2: terminate called without an active exception",
           "srun: error: n2: task 2: Aborted", "srun: error: n1: tasks 0-1: Terminated",
           "srun: error: n2: task 3: Terminated"]
    v = analyze_run(write_run(tmp_path, {"step-0.log": out})).verdict
    assert v.category is Category.APPLICATION and not v.restartable and v.culprit.ranks == (2,)
