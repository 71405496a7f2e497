"""The sbatch script of a training job: validated variables rendered through a jinja2 template
(the packaged default is nvrx_hpc/data/sbatch/pytorch.sbatch.j2, found through nvrx_hpc.core.resources).

`SbatchVars` checks every variable before anything is rendered (bad values raise ConfigError naming
the variable); `render_script` fills the jinja2 template with StrictUndefined, every value passed
through the `q` filter (shlex.quote); `submit_script` writes the script into the run directory and
hands it to `sbatch --parsable` through the one Slurm runner.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.core.resources import sbatch_template
from nvrx_hpc.slurm.commands import submit_batch

__all__ = [
    "SCRIPT_NAME",
    "SbatchVars",
    "build_vars",
    "render_script",
    "slurm_time_seconds",
    "submit_script",
]

SCRIPT_NAME = "job.sbatch"
_TIME_FORMS = "MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED"
_PARTITION = re.compile(r"^[A-Za-z0-9_.-]+(?:,[A-Za-z0-9_.-]+)*$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def slurm_time_seconds(value: str) -> int | None:
    """Seconds in a Slurm time limit (the `sbatch --time` forms); None for UNLIMITED/INFINITE.

    Raises ValueError naming the accepted forms.
    """
    text = value.strip()
    if text.upper() in ("UNLIMITED", "INFINITE"):
        return None
    bad = ValueError(f"{value!r} is not a Slurm time; use {_TIME_FORMS} (e.g. 90, 2:30:00 or 1-12:00:00)")
    days, sep, rest = text.partition("-")
    if not sep:
        days, rest = "0", text
    parts = rest.split(":")
    if not all(p.isdigit() for p in [days, *parts]) or len(parts) > 3:
        raise bad
    if sep:  # D-H, D-H:M, D-H:M:S
        h, m, sec = (int(p) for p in (parts + ["0", "0"])[:3])
        if h > 23:
            raise ValueError(f"{value!r}: hours after the day must be 0-23")
    elif len(parts) == 3:  # H:M:S
        h, m, sec = (int(p) for p in parts)
    else:  # M or M:S
        h, m, sec = 0, int(parts[0]), int(parts[1]) if len(parts) == 2 else 0
    if (len(parts) == 3 or sep) and m > 59 or sec > 59:
        raise ValueError(f"{value!r}: minutes and seconds must be 0-59")
    total = ((int(days) * 24 + h) * 60 + m) * 60 + sec
    if total <= 0:
        raise ValueError(f"{value!r} is zero; give the job some time")
    return total


def _no_control(value: str, what: str) -> str:
    if _CONTROL.search(value):
        raise ValueError(f"{what} must not contain control characters (newline, tab, NUL), got {value!r}")
    return value


class SbatchVars(BaseModel):
    """Every variable of the template, validated. Field names are the variable names."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    nodes: Annotated[int, Field(ge=1, description="training nodes (the allocation holds nodes + spares)")]
    command: Annotated[list[str], Field(min_length=1, description="the training command, one argv item each")]
    run_dir: Annotated[str, Field(description="absolute run directory: events, logs, the script, Slurm's output")]
    spares: Annotated[int, Field(ge=0, description="spare nodes held back to replace failed ones")] = 0
    tasks_per_node: Annotated[int, Field(ge=1, description="ranks per node")] = 1
    time: Annotated[str, Field(description=f"Slurm time limit: {_TIME_FORMS}")] = "60"
    partition: Annotated[str | None, Field(description="partition name(s), comma-separated")] = None
    job_name: Annotated[str, Field(min_length=1, max_length=200, description="Slurm job name")] = "nvrx-train"
    signal_grace: Annotated[int, Field(ge=1, le=65535, description="seconds before the time limit for B:USR1")] = 60
    max_restarts: Annotated[int | None, Field(ge=0, description="in-allocation restarts (run's default)")] = None
    min_nodes: Annotated[int | None, Field(ge=1, description="shrink down to this many nodes")] = None
    heartbeat_timeout: Annotated[float | None, Field(gt=0, description="seconds between heartbeats")] = None
    initial_timeout: Annotated[float | None, Field(gt=0, description="seconds to the first heartbeat")] = None
    python: Annotated[str, Field(min_length=1, description="interpreter that runs `-m nvrx_hpc run`")] = sys.executable
    mode: Annotated[Literal["user", "site"], Field(description="site: sbatch --nvrx, run --mode site")] = "user"

    @field_validator("run_dir")
    @classmethod
    def _absolute_run_dir(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError(f"must be an absolute path, got {value!r}")
        return _no_control(os.path.normpath(value), "the run directory")

    @field_validator("time")
    @classmethod
    def _slurm_time(cls, value: str) -> str:
        slurm_time_seconds(value)
        return value.strip()

    @field_validator("partition")
    @classmethod
    def _partition_name(cls, value: str | None) -> str | None:
        if value is not None and not _PARTITION.match(value):
            raise ValueError(f"{value!r} is not a partition name (letters, digits, _ . - ; several joined by ,)")
        return value

    @field_validator("job_name", "python")
    @classmethod
    def _single_line(cls, value: str) -> str:
        return _no_control(value, "the value")

    @field_validator("command")
    @classmethod
    def _command_items(cls, value: list[str]) -> list[str]:
        if "\x00" in "".join(value):
            raise ValueError("command items must not contain NUL bytes")
        if not value[0]:
            raise ValueError("the command's first item (the program) is empty")
        return value

    @field_validator("min_nodes")
    @classmethod
    def _at_most_nodes(cls, value: int | None, info: ValidationInfo) -> int | None:
        nodes = info.data.get("nodes")
        if value is not None and nodes is not None and value > nodes:
            raise ValueError(f"{value} is more than nodes ({nodes}): the job cannot shrink to more nodes than it has")
        return value

    @field_validator("signal_grace")
    @classmethod
    def _shorter_than_time(cls, value: int, info: ValidationInfo) -> int:
        time = info.data.get("time")
        seconds = slurm_time_seconds(time) if time is not None else None
        if seconds is not None and value >= seconds:
            raise ValueError(
                f"{value} s is not shorter than the time limit {time!r} ({seconds} s): the time-limit warning "
                "would come at once"
            )
        return value

    @property
    def output(self) -> str:
        """Slurm's output file, in the run directory (a literal % doubled: Slurm expands %j and friends)."""
        return self.run_dir.replace("%", "%%") + "/slurm-%j.out"


_HINTS = {
    "command": "put the training command after --: `nvrx-hpc render --nodes 2 --run-dir /abs/dir -- python train.py`",
    "run_dir": "give an absolute path, e.g. --run-dir \"$PWD/runs/exp1\"",
    "time": f"use one of {_TIME_FORMS}",
}


def build_vars(**values: Any) -> SbatchVars:
    """SbatchVars from keyword values; a bad value raises ConfigError naming the variable."""
    try:
        return SbatchVars(**values)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = ".".join(str(p) for p in err["loc"][:1]) or "variables"
        got = "" if err["type"] == "value_error" or name not in values else f" (got {values[name]!r})"
        message = err["msg"].removeprefix("Value error, ")
        if name == "command" and not values.get("command"):
            message = "no training command given"
        flag = "--" + name.replace("_", "-")
        hint = _HINTS.get(name, f"fix {flag}; `nvrx-hpc render --help` lists every variable (docs/sbatch-template.md)")
        raise ConfigError(f"sbatch variable {name!r}: {message}{got}", hint=hint) from None


def _quote(value: Any) -> str:
    return shlex.quote(str(value))


def render_script(variables: SbatchVars, template: Path | None = None) -> str:
    """The batch script for `variables` from `template` (default: the packaged pytorch.sbatch.j2)."""
    import jinja2

    path = Path(template) if template is not None else sbatch_template()
    try:
        source = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read the sbatch template {path}: {exc.strerror or exc}",
            hint="pass --template PATH to a readable template",
        ) from None
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, autoescape=False, keep_trailing_newline=True,
        trim_blocks=True, lstrip_blocks=True,
    )  # fmt: skip
    env.filters["q"] = _quote
    codes = {c.name: int(c) for c in ExitCode if c is not ExitCode.INPROCESS_ESCALATE}  # 95 is a rank's, not run's
    context = {**variables.model_dump(), "output": variables.output, "exit_codes": codes, "template_name": path.name}
    try:
        return env.from_string(source).render(**context)
    except jinja2.TemplateError as exc:
        raise ConfigError(f"sbatch template {path} failed to render: {exc}", hint="check the template's variables "
                          "against docs/sbatch-template.md") from None


def submit_script(script: str, run_dir: str, runner: Any, timeout: float) -> tuple[str, Path]:
    """Write `script` to <run_dir>/job.sbatch and submit it; returns (job id, script path).

    Raises:
        SlurmError: sbatch failed or timed out (from the runner); SlurmParseError: no job id in its reply.
    """
    directory = Path(run_dir)
    directory.mkdir(parents=True, exist_ok=True)  # Slurm opens the output file there before the script runs
    path = directory / SCRIPT_NAME
    tmp = directory / f".{SCRIPT_NAME}.tmp.{os.getpid()}"
    tmp.write_text(script, encoding="utf-8")
    os.chmod(tmp, 0o755)
    os.replace(tmp, path)
    return submit_batch(runner, path, timeout), path
