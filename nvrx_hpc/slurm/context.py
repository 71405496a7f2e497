"""`JobContext` from `SLURM_*` variables, through one table that maps each field to its variables.

Facts the table encodes (checked on Slurm 22.05):

* `SLURM_JOB_NODELIST` is a compressed hostlist; `SLURM_NODELIST` is its older twin.
* `SLURMD_NODENAME` names the virtual node the task runs on (`socket.gethostname()` does not: on the
  dev cluster every virtual node is the same host).
* `SLURM_RESTART_COUNT` is absent on the first run of a batch job and 1, 2, ... after each requeue.
* `SLURM_NTASKS_PER_NODE` exists only with `--ntasks-per-node`; `SLURM_TASKS_PER_NODE` always, in the
  form `2(x3),1`. The field is the per-node count when it is the same on every node, else None.
* `SLURM_STEP_ID` is set inside srun steps, not in the batch script (which still has SLURM_PROCID=0).
* `SLURM_JOB_CPUS_PER_NODE` is in the same `2(x4)` form; the field keeps the smallest count (what every
  node can hold). `SLURM_CPUS_PER_TASK` exists only with `--cpus-per-task`, and 22.05's srun no longer
  reads it from the environment: the launcher passes it on as a flag.
* `SLURM_GPUS_ON_NODE` is the GPUs allocated on this node; `SLURM_GPUS_PER_NODE` may carry a type
  (`a100:8`); `SLURM_GPUS_PER_TASK` exists only with `--gpus-per-task`.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from nvrx_hpc.slurm.api import JobContext, JobContextError
from nvrx_hpc.slurm.hostlist import HostlistError, expand

__all__ = ["FIELDS", "FieldSpec", "RequiredField", "context_from_env", "parse_tasks_per_node"]

RequiredField = Literal[
    "job_id", "job_name", "step_id", "node_list", "num_nodes", "node_name", "node_id", "procid",
    "localid", "ntasks", "ntasks_per_node", "restart_count", "submit_dir", "cluster_name", "partition",
    "ntasks_per_node_requested", "cpus_per_task", "cpus_per_node", "gpus_per_node", "gpus_per_task",
]  # fmt: skip


def parse_tasks_per_node(value: str) -> tuple[int, ...]:
    """`2(x3),1` -> (2, 2, 2, 1): Slurm's per-node task counts, as in SLURM_TASKS_PER_NODE."""
    counts: list[int] = []
    for part in value.split(","):
        match = re.fullmatch(r"\s*(\d+)(?:\(x(\d+)\))?\s*", part)
        if match is None:
            raise ValueError(f"expected counts like 2(x3),1, got {value!r}")
        counts.extend([int(match.group(1))] * int(match.group(2) or 1))
    return tuple(counts)


def _uniform_tasks_per_node(value: str) -> int | None:
    counts = set(parse_tasks_per_node(value))
    return counts.pop() if len(counts) == 1 else None


def _min_per_node(value: str) -> int:
    return min(parse_tasks_per_node(value))


def _gpu_count(value: str) -> int:
    """`8`, `a100:8` or `gpu:a100:8` -> 8 (a GPU request as Slurm echoes it)."""
    return int(value.strip().rsplit(":", 1)[-1])


def _int(value: str) -> int:
    return int(value.strip())


def _text(value: str) -> str:
    return value


def _hostlist(value: str) -> tuple[str, ...]:
    return tuple(expand(value))


@dataclass(frozen=True)
class FieldSpec:
    """A JobContext field: the variables tried in order, how to convert the value, the default."""

    variables: tuple[str, ...]
    convert: Callable[[str], Any]
    default: Any = None


# The one table. Order of variables = order of preference.
FIELDS: dict[str, FieldSpec] = {
    "job_id": FieldSpec(("SLURM_JOB_ID", "SLURM_JOBID"), _int),
    "job_name": FieldSpec(("SLURM_JOB_NAME",), _text),
    "step_id": FieldSpec(("SLURM_STEP_ID", "SLURM_STEPID"), _int),
    "node_list": FieldSpec(("SLURM_JOB_NODELIST", "SLURM_NODELIST"), _hostlist, ()),
    "num_nodes": FieldSpec(("SLURM_JOB_NUM_NODES", "SLURM_NNODES"), _int),
    "node_name": FieldSpec(("SLURMD_NODENAME",), _text),
    "node_id": FieldSpec(("SLURM_NODEID",), _int),
    "procid": FieldSpec(("SLURM_PROCID",), _int),
    "localid": FieldSpec(("SLURM_LOCALID",), _int),
    "ntasks": FieldSpec(("SLURM_NTASKS", "SLURM_NPROCS"), _int),
    "ntasks_per_node": FieldSpec(("SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"), _uniform_tasks_per_node),
    "restart_count": FieldSpec(("SLURM_RESTART_COUNT",), _int, 0),
    "submit_dir": FieldSpec(("SLURM_SUBMIT_DIR",), _text),
    "cluster_name": FieldSpec(("SLURM_CLUSTER_NAME",), _text),
    "partition": FieldSpec(("SLURM_JOB_PARTITION",), _text),
    "ntasks_per_node_requested": FieldSpec(("SLURM_NTASKS_PER_NODE",), _int),
    "cpus_per_task": FieldSpec(("SLURM_CPUS_PER_TASK",), _int),
    "cpus_per_node": FieldSpec(("SLURM_JOB_CPUS_PER_NODE",), _min_per_node),
    "gpus_per_node": FieldSpec(("SLURM_GPUS_ON_NODE", "SLURM_GPUS_PER_NODE"), _gpu_count),
    "gpus_per_task": FieldSpec(("SLURM_GPUS_PER_TASK",), _gpu_count),
}


def context_from_env(
    env: Mapping[str, str] | None = None, *, required: Iterable[str] = ("job_id",)
) -> JobContext:
    """Build a JobContext from `env` (default os.environ). See `JobContext.from_env`."""
    source = os.environ if env is None else env
    wanted = list(required)
    unknown = [name for name in wanted if name not in FIELDS]
    if unknown:
        raise ValueError(f"unknown JobContext field(s) {unknown}; fields are {sorted(FIELDS)}")
    values: dict[str, Any] = {}
    for name, spec in FIELDS.items():
        variable = next((var for var in spec.variables if source.get(var, "") != ""), None)
        if variable is None:
            if name in wanted:
                raise JobContextError(
                    f"{spec.variables[0]} is not set, so the {name.replace('_', ' ')} is unknown",
                    hint="run this inside a Slurm job or step (sbatch/srun), "
                    f"or set {' or '.join(spec.variables)}",
                )
            values[name] = spec.default
            continue
        raw = source[variable]
        try:
            values[name] = spec.convert(raw)
        except (ValueError, HostlistError) as exc:
            raise JobContextError(
                f"{variable}={raw!r} is not a valid {name.replace('_', ' ')}: {exc}",
                hint="the variable is set by Slurm; check what overwrote it in the job script",
            ) from exc
    return JobContext(**values)
