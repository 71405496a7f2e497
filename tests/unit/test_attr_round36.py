"""Rules from round 36 of blind cases: Slurm's job_container plugin failing to join a job's namespace on its node is
the node's fault (host, restartable), not an unknown end; two nodes launched with one node rank (a `$SLURM_NODEID`
expanded once in the batch shell) is the job's configuration error, not the rendezvous timeout that follows."""

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
