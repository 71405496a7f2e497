"""The job's shape from the allocation's SLURM_* variables, and the run directory's owner."""

from __future__ import annotations

import json

import pytest

from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.launcher.rundir import JobIdentity, claim_run_dir, same_job
from nvrx_hpc.launcher.shape import resolve_shape
from nvrx_hpc.slurm.api import JobContext

# What the batch script of `sbatch -N 4 --ntasks-per-node=2` saw on the local Slurm 22.05 cluster.
BATCH = {
    "SLURM_JOB_ID": "9", "SLURM_JOB_NODELIST": "n[1-4]", "SLURM_NTASKS_PER_NODE": "2",
    "SLURM_TASKS_PER_NODE": "2(x4)", "SLURM_JOB_CPUS_PER_NODE": "2(x4)", "SLURM_CPUS_ON_NODE": "2",
}  # fmt: skip


def _ctx(**env: str) -> JobContext:
    base = {k: v for k, v in BATCH.items() if k not in env}
    return JobContext.from_env({**base, **{k: v for k, v in env.items() if v}})


def test_ranks_per_node_come_from_ntasks_per_node():
    shape = resolve_shape(_ctx(), None, spares=1)
    assert (shape.tasks_per_node, shape.world_size, shape.source) == (2, 6, "SLURM_NTASKS_PER_NODE")
    assert "world size 6" in shape.describe() and "1 spare" in shape.describe()


def test_uniform_tasks_per_node_then_gpus_then_one():
    assert resolve_shape(_ctx(SLURM_NTASKS_PER_NODE=""), None, 0).source == "SLURM_TASKS_PER_NODE"
    gpus = _ctx(SLURM_NTASKS_PER_NODE="", SLURM_TASKS_PER_NODE="1(x4)", SLURM_GPUS_ON_NODE="8",
                SLURM_JOB_CPUS_PER_NODE="64(x4)")  # fmt: skip
    assert (resolve_shape(gpus, None, 0).tasks_per_node, resolve_shape(gpus, None, 0).source) == (8, "GPUs per node")
    uneven = _ctx(SLURM_NTASKS_PER_NODE="", SLURM_TASKS_PER_NODE="2(x3),1")
    assert resolve_shape(uneven, None, 0).tasks_per_node == 1


def test_the_flag_overrides_the_allocation():
    shape = resolve_shape(_ctx(), 1, 0)
    assert (shape.tasks_per_node, shape.source) == (1, "--tasks-per-node")


def test_a_shape_the_allocation_cannot_hold_is_a_usage_error():
    with pytest.raises(ConfigError) as caught:
        resolve_shape(_ctx(), 3, 1)
    assert caught.value.exit_code == ExitCode.USAGE
    assert "need 3 CPUs per node" in caught.value.message and "has 2" in caught.value.message
    with pytest.raises(ConfigError, match="need 4 CPUs"):
        resolve_shape(_ctx(SLURM_CPUS_PER_TASK="2"), None, 0)
    with pytest.raises(ConfigError, match="need 16 GPUs"):
        resolve_shape(_ctx(SLURM_GPUS_ON_NODE="8", SLURM_GPUS_PER_TASK="8", SLURM_JOB_CPUS_PER_NODE="64(x4)"), None, 0)


def test_cpus_and_gpus_per_task_are_carried():
    shape = resolve_shape(_ctx(SLURM_CPUS_PER_TASK="1", SLURM_GPUS_PER_TASK="gpu:1", SLURM_GPUS_ON_NODE="2"), None, 0)
    assert (shape.cpus_per_task, shape.gpus_per_task) == (1, 1)


def _ident(**kw) -> JobIdentity:
    return JobIdentity(**{"job_id": 7, "uid": 1000, "cluster": "lab", "submit_time": "2026-12-03T08:00:00",
                          "restart_count": 0, **kw})  # fmt: skip


def test_same_job_rules():
    assert same_job(_ident(), _ident())  # the launcher started again in the same allocation
    assert same_job(_ident(), _ident(restart_count=1, submit_time="2026-12-03T08:05:00"))  # requeued
    assert not same_job(_ident(), _ident(submit_time="2026-12-03T09:00:00"))  # the id came back
    assert not same_job(_ident(restart_count=2), _ident(restart_count=0))
    assert not same_job(_ident(), _ident(uid=1001)) and not same_job(_ident(), _ident(job_id=8))


def test_another_jobs_run_dir_is_moved_aside_and_the_batch_script_stays(tmp_path):
    run = tmp_path / "run"
    claim_run_dir(run, _ident())
    (run / "launcher-state.json").write_text(json.dumps({"excluded": {"n2": "bad"}, "restarts_total": 3}))
    (run / "events.jsonl").write_text("{}\n")
    (run / "job.sbatch").write_text("#!/bin/bash\n")
    assert claim_run_dir(run, _ident(restart_count=1)) is None  # a requeue continues
    moved = claim_run_dir(run, _ident(submit_time="2026-12-03T10:00:00"))
    assert moved == run / "previous-1"
    assert (moved / "launcher-state.json").exists() and not (run / "launcher-state.json").exists()
    assert (run / "job.sbatch").exists() and json.loads((run / "job.json").read_text())["submit_time"].startswith(
        "2026-12-03T10"
    )
