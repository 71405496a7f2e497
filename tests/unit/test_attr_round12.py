"""Round 12's rules, one small case each: a NIC health poll that recovered, Ray's dead-worker message, a C++
CUDA driver error inside torch, Open MPI's `[host:pid]` lines, environment variables joined on one line, a
host-led node-rank banner, and an unranked application error on the node of the one rank that exited."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

_WD = ("[rank{r}]:[E1202 02:31:25.9 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught collective operation "
       "timeout: WorkNCCL(SeqNum=20418, OpType=ALLREDUCE, NumelIn=8, NumelOut=8, Timeout(ms)=1800000) ran for "
       "1800044 milliseconds before timing out.")


def test_a_nic_health_poll_that_recovered_is_not_the_cause(tmp_path):
    journal = ["Mar 03 17:33:40 hgx-b02 kernel: mlx5_core 0000:1a:00.0: poll_health:835:(pid 0): device's health "
               "compromised - reached miss count",
               "Mar 03 17:33:41 hgx-b02 kernel: mlx5_core 0000:1a:00.0: poll_health:835:(pid 0): health recovered",
               "Mar 03 17:42:10 hgx-b02 kernel: NVRM: Xid (PCI:0000:5d:00): 74, pid=55123, name=python3, NVLink: "
               "fatal error detected on link 7"]
    v = analyze_run(write_run(tmp_path, {"journal_kernel.txt": journal})).verdict
    assert v.category is Category.GPU_HARDWARE


def test_rays_dead_worker_message_is_a_cascade_and_the_users_cancel_the_cause(tmp_path):
    out = ["slurmstepd: error: *** JOB 99120 ON node05 CANCELLED AT 2024-05-02T14:31:09 ***",
           "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
           "The actor is dead because its worker process has died. Worker exit type: SYSTEM_ERROR Worker exit "
           "detail: Worker unexpectedly exits with a connection error code 2. End of file. There are some potential "
           "root causes. (1) The process is killed by SIGKILL by OOM killer. (3) The worker is crashed due to SIGSEGV"]
    v = analyze_run(write_run(tmp_path, {"slurm-99120.out": out})).verdict
    assert v.category is Category.SCHEDULER and not v.restartable


def test_a_cuda_driver_error_thrown_inside_torch_is_a_crash_placed_by_open_mpis_host_lines(tmp_path):
    out = ["[1,13]<stderr>:terminate called after throwing an instance of 'c10::Error'",
           "[1,13]<stderr>:  what():  CUDA driver error: invalid argument",
           "[1,13]<stderr>:[gpu-k04:51907] *** Process received signal ***",
           "[1,13]<stderr>:[gpu-k04:51907] Signal: Aborted (6)"]
    v = analyze_run(write_run(tmp_path, {"mpirun_out.txt": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and (v.culprit.ranks, v.culprit.nodes) == ((13,), ("gpu-k04",))


def test_environment_variables_joined_on_one_line_under_a_prompt_place_the_silent_rank(tmp_path):
    out = ["nodes: gpu-m[01-02]", *(_WD.format(r=r) for r in range(8) if r != 6)]
    paste = ["[ops@gpu-m02 ~]$ for p in $(pgrep -f train.py); do echo \"=== pid $p $(tr '\\0' '\\n' "
             "</proc/$p/environ | grep RANK | paste -sd' ')\"; done", "=== pid 31336 RANK=6 LOCAL_RANK=2"]
    v = analyze_run(write_run(tmp_path, {"slurm-1.out": out, "py-spy.txt": paste})).verdict
    assert (v.culprit.ranks, v.culprit.nodes) == ((6,), ("gpu-m02",))


def test_a_host_led_node_rank_banner_places_a_lost_nodes_ranks(tmp_path):
    out = [*(f"[gpu-d1{n}] NODE_RANK={n} MASTER_ADDR=gpu-d10 NPROC_PER_NODE=4" for n in range(3)),
           *(_WD.format(r=r) for r in range(8)), "srun: error: Node failure on gpu-d12",
           "slurmstepd: error: *** JOB 1209931 ON gpu-d10 CANCELLED AT 2024-06-01T10:00:00 DUE TO NODE FAILURE ***"]
    v = analyze_run(write_run(tmp_path, {"slurm-2.out": out})).verdict
    assert v.category is Category.HOST and (v.culprit.ranks, v.culprit.nodes) == ((8, 9, 10, 11), ("gpu-d12",))


def test_an_unranked_application_error_names_the_one_rank_a_launcher_saw_exit_on_its_node(tmp_path):
    mapping = ("trn-n11: [INFO] [launch.py:163:main] global_rank_mapping=defaultdict(<class 'list'>, "
               "{'trn-n11': [0, 1, 2, 3], 'trn-n12': [4, 5, 6, 7]})")
    ds = [mapping, "trn-n12: Traceback (most recent call last):", '  File "/w/data.py", line 9, in __getitem__',
          "trn-n12: KeyError: 'conversations'",
          "trn-n12: [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=1'] exits "
          "with return code = 1"]
    v = analyze_run(write_run(tmp_path, {"ds.log": ds})).verdict
    assert v.category is Category.APPLICATION and (v.culprit.ranks, v.culprit.nodes) == ((5,), ("trn-n12",))


def test_an_unplaced_gpu_fault_names_the_one_task_that_exited_with_a_code_while_the_others_were_signalled(tmp_path):
    err = ["RuntimeError: CUDA error: uncorrectable ECC error encountered",
           "srun: error: gpu-c14: task 7: Exited with exit code 1", "srun: error: gpu-c14: tasks 4-6: Aborted",
           "srun: error: gpu-c13: tasks 0-3: Aborted"]
    v = analyze_run(write_run(tmp_path, {"slurm-3.err": err})).verdict
    assert v.category is Category.GPU_HARDWARE and (v.culprit.ranks, v.culprit.nodes) == ((7,), ("gpu-c14",))
