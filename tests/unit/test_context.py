"""JobContext.from_env: one table of SLURM_* variables, clear errors naming the variable."""

from __future__ import annotations

from dataclasses import fields

import pytest

from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.slurm.api import JobContext, JobContextError
from nvrx_hpc.slurm.context import FIELDS, context_from_env, parse_tasks_per_node

# What task 1 of `srun -N2 -n2` inside `sbatch -N2` saw on Slurm 22.05.8 (trimmed to the variables we read).
SRUN_TASK_ENV = {
    "SLURM_JOB_ID": "42",
    "SLURM_JOB_NAME": "train run",
    "SLURM_STEP_ID": "0",
    "SLURM_JOB_NODELIST": "n[1-2]",
    "SLURM_NODELIST": "n[1-2]",
    "SLURM_JOB_NUM_NODES": "2",
    "SLURM_NNODES": "2",
    "SLURMD_NODENAME": "n2",
    "SLURM_NODEID": "1",
    "SLURM_PROCID": "1",
    "SLURM_LOCALID": "0",
    "SLURM_NTASKS": "2",
    "SLURM_TASKS_PER_NODE": "1(x2)",
    "SLURM_SUBMIT_DIR": "/home/alice/dir with spaces",
    "SLURM_CLUSTER_NAME": "lab",
    "SLURM_JOB_PARTITION": "debug",
}


def test_table_covers_every_field() -> None:
    assert set(FIELDS) == {f.name for f in fields(JobContext)}


def test_from_env_inside_an_srun_task() -> None:
    ctx = JobContext.from_env(SRUN_TASK_ENV)
    assert ctx == JobContext(
        job_id=42,
        job_name="train run",
        step_id=0,
        node_list=("n1", "n2"),
        num_nodes=2,
        node_name="n2",
        node_id=1,
        procid=1,
        localid=0,
        ntasks=2,
        ntasks_per_node=1,
        restart_count=0,  # absent on the first run
        submit_dir="/home/alice/dir with spaces",
        cluster_name="lab",
        partition="debug",
    )
    assert ctx.in_step


def test_restart_count_after_a_requeue() -> None:
    ctx = JobContext.from_env({**SRUN_TASK_ENV, "SLURM_RESTART_COUNT": "2"})
    assert ctx.restart_count == 2


def test_batch_script_has_no_step_and_older_names_work() -> None:
    env = {
        "SLURM_JOBID": "7",
        "SLURM_NODELIST": "gpu-a[1-2]-b[1-2]",
        "SLURM_NNODES": "4",
        "SLURM_NPROCS": "8",
    }
    ctx = JobContext.from_env(env)
    assert ctx.job_id == 7
    assert ctx.node_list == ("gpu-a1-b1", "gpu-a1-b2", "gpu-a2-b1", "gpu-a2-b2")
    assert ctx.num_nodes == 4 and ctx.ntasks == 8
    assert ctx.step_id is None and not ctx.in_step
    assert ctx.node_name is None


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({"SLURM_NTASKS_PER_NODE": "4", "SLURM_TASKS_PER_NODE": "4(x2)"}, 4),
        ({"SLURM_TASKS_PER_NODE": "2(x3)"}, 2),
        ({"SLURM_TASKS_PER_NODE": "2(x3),1"}, None),  # uneven: no single per-node count
    ],
)
def test_ntasks_per_node(env: dict[str, str], expected: int | None) -> None:
    assert JobContext.from_env({"SLURM_JOB_ID": "1", **env}).ntasks_per_node == expected


def test_parse_tasks_per_node() -> None:
    assert parse_tasks_per_node("2(x3),1") == (2, 2, 2, 1)
    with pytest.raises(ValueError):
        parse_tasks_per_node("2(x")


def test_missing_required_variable_is_named() -> None:
    with pytest.raises(JobContextError) as caught:
        JobContext.from_env({})
    assert "SLURM_JOB_ID is not set" in caught.value.message
    assert "SLURM_JOBID" in (caught.value.hint or "")
    assert caught.value.exit_code == ExitCode.USAGE


def test_other_required_fields() -> None:
    with pytest.raises(JobContextError, match="SLURMD_NODENAME is not set"):
        JobContext.from_env({"SLURM_JOB_ID": "1"}, required=("job_id", "node_name"))
    assert JobContext.from_env({}, required=()).job_id is None


def test_empty_variable_counts_as_missing() -> None:
    with pytest.raises(JobContextError, match="SLURM_JOB_ID is not set"):
        JobContext.from_env({"SLURM_JOB_ID": ""})


def test_unknown_required_field_is_a_programming_error() -> None:
    with pytest.raises(ValueError, match="unknown JobContext field"):
        context_from_env({}, required=("jobid",))


@pytest.mark.parametrize(
    ("variable", "value"),
    [("SLURM_JOB_ID", "12x"), ("SLURM_JOB_NODELIST", "n[1-"), ("SLURM_TASKS_PER_NODE", "lots")],
)
def test_malformed_value_names_the_variable(variable: str, value: str) -> None:
    with pytest.raises(JobContextError) as caught:
        JobContext.from_env({"SLURM_JOB_ID": "1", variable: value})
    assert f"{variable}={value!r}" in caught.value.message


def test_default_env_is_os_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [v for spec in FIELDS.values() for v in spec.variables]:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SLURM_JOB_ID", "99")
    assert JobContext.from_env().job_id == 99
