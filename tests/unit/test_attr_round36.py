"""Rules from round 36 of blind cases: Slurm's job_container plugin failing to join a job's namespace on its node is
the node's fault (host, restartable), not an unknown end, and on the job's batch host when no host is printed; two
nodes launched with one node rank (a `$SLURM_NODEID` expanded once in the batch shell) is the job's configuration
error, not the rendezvous timeout that follows; a python the batch script ran itself, killed, is rank 0."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

_JOIN = [
    "slurmstepd: error: container_p_join: open failed for /local/slurm_tmpfs/88216/.ns: No such file or directory",
    "slurmstepd: error: container_g_join(88216): No such file or directory",
]


def test_a_job_container_that_cannot_be_joined_is_the_nodes_fault(tmp_path):
    v = analyze_run(write_run(tmp_path, {"slurm-88216.out": _JOIN * 2})).verdict
    assert v.category is Category.HOST and v.restartable is True
    assert v.signature == "job_container_join_failed"


def test_a_container_join_in_a_training_line_is_not_read_as_one(tmp_path):
    """The words alone, in a training script's own message, are not Slurm's plugin failing."""
    lines = ["epoch 3 | loss 0.812", "note: container_join is disabled in this config", "epoch 4 | loss 0.790"]
    v = analyze_run(write_run(tmp_path, {"slurm-1.out": lines})).verdict
    assert v.signature != "job_container_join_failed"


def _launch(host: str, rank: int) -> str:
    return (f"launching on {host} with: accelerate launch --config_file ds_zero3.yaml --num_machines 2 "
            f"--num_processes 8 --main_process_ip hpc-g031 --main_process_port 29512 --machine_rank {rank}")


_TIMEOUT = [
    "[rank0]: Traceback (most recent call last):",
    "[rank0]: torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 4/8 clients joined.",
    "srun: error: hpc-g031: task 0: Exited with exit code 1",
    "srun: error: hpc-g032: task 1: Exited with exit code 1",
]


def test_two_nodes_launched_as_one_node_rank_is_the_jobs_configuration_error(tmp_path):
    logs = {"5518820.out": [_launch("hpc-g031", 0), _launch("hpc-g032", 0)], "5518820.err": _TIMEOUT}
    v = analyze_run(write_run(tmp_path, logs)).verdict
    assert v.category is Category.APPLICATION and v.restartable is False
    assert v.signature == "accelerate_cmd" and "node rank 0" in v.root_cause


def test_distinct_node_ranks_or_one_host_echoing_its_line_twice_are_no_such_error(tmp_path):
    for name, lines in (("distinct", [_launch("hpc-g031", 0), _launch("hpc-g032", 1)]),
                        ("echoed", [_launch("hpc-g031", 0), _launch("hpc-g031", 0)])):
        v = analyze_run(write_run(tmp_path / name, {"5518820.out": lines, "5518820.err": _TIMEOUT})).verdict
        assert v.signature != "accelerate_cmd", name


_SCONTROL = ["JobId=88216 JobName=ddpseg-3", "   JobState=PENDING Reason=launch_failed_requeued_held Dependency=(null)",
             "   NodeList=(null) SchedNodeList=g-d[17-18]", "   BatchHost=g-d17", "   NumNodes=2-2 NumCPUs=16"]


def test_a_launch_failure_without_a_host_is_placed_on_the_jobs_batch_host(tmp_path):
    v = analyze_run(write_run(tmp_path, {"slurm-88216.out": _JOIN, "scontrol_show_job.txt": _SCONTROL})).verdict
    assert v.signature == "job_container_join_failed" and v.culprit.nodes == ("g-d17",)


def test_two_batch_hosts_place_nothing(tmp_path):
    other = [line.replace("g-d17", "g-d21").replace("88216", "88214") for line in _SCONTROL]
    v = analyze_run(write_run(tmp_path, {"slurm-88216.out": _JOIN, "scontrol_show_job.txt": _SCONTROL + other}))
    assert v.verdict.culprit.nodes == ()


def _oom_killed(command: str) -> dict[str, list[str]]:
    return {
        "slurm-4471852.out": ["Loaded MPII3D dataset from data/db.pt",
                              f"/var/spool/slurm/d/job4471852/slurm_script: line 21: 2481307 Killed    {command}"],
        "dmesg-T_cn-g14.txt": ["[Thu May 21 09:19:41 2020] Out of memory: Killed process 2481307 (python) "
                               "total-vm:79376716kB, anon-rss:31570040kB, file-rss:0kB, shmem-rss:0kB, UID:1000"],
    }


def test_the_oom_killed_python_the_batch_script_ran_itself_is_rank_0(tmp_path):
    v = analyze_run(write_run(tmp_path, _oom_killed("python train.py --cfg configs/ft.yaml"))).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (0,) and v.culprit.nodes == ("cn-g14",)


def test_an_oom_killed_launcher_names_no_rank(tmp_path):
    """torchrun's own PID is not one rank: its workers are several."""
    v = analyze_run(write_run(tmp_path, _oom_killed("python -m torch.distributed.run --nproc_per_node 4 t.py")))
    assert v.verdict.category is Category.HOST and v.verdict.culprit.ranks == ()


def _spawned_segfault(job: int, host: str) -> list[str]:
    return [
        f"=== {job} | swin-ddpfork | nodes: {host} ===",
        "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4",
        "Initializing distributed: GLOBAL_RANK: 1, MEMBER: 2/4",
        "Traceback (most recent call last):",
        '  File "/opt/conda/lib/python3.10/site-packages/torch/multiprocessing/spawn.py", line 140, in join',
        "    raise ProcessExitedException(",
        "torch.multiprocessing.spawn.ProcessExitedException: process 1 terminated with signal SIGSEGV",
        f"srun: error: {host}: task 0: Exited with exit code 1",
    ]


def test_a_spawned_process_under_a_one_task_srun_is_that_global_rank(tmp_path):
    """srun started the spawner alone: its process 1 is rank 1; a single crash of one rank may be retried."""
    v = analyze_run(write_run(tmp_path, {"slurm-551902.out": _spawned_segfault(551902, "g2n07")})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (1,) and v.restartable is True


def test_a_crash_that_came_back_in_a_rerun_on_another_node_is_not_restartable(tmp_path):
    run = {"slurm-551902.out": _spawned_segfault(551902, "g2n07"),
           "slurm-551917.out": _spawned_segfault(551917, "g2n11")}
    v = analyze_run(write_run(tmp_path, run)).verdict
    assert v.category is Category.FRAMEWORK_CRASH and 1 in v.culprit.ranks and v.restartable is False
