"""The messages our SPANK plugin sends to a node agent: one JSON object per line on a Unix socket.

The C side (spank/nvrx_agent.c) writes them; this module is the Python side's schema. See docs/spank.md.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from nvrx_hpc.core.errors import ProtocolError

__all__ = ["Register", "TaskExit", "StepEnd", "SpankMessage", "parse_spank_line", "MAX_LINE_BYTES"]

MAX_LINE_BYTES = 4096  # the plugin's messages are a few hundred bytes

StepId = int | Literal["batch", "interactive"]


class _Base(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)

    v: Literal[1]
    job: int = Field(ge=0)
    step: StepId
    node: str = Field(min_length=1, max_length=256)
    time: float


class Register(_Base):
    """A task was forked on `node` (slurm_spank_task_post_fork)."""

    type: Literal["register"]
    rank: int = Field(ge=0)
    local_rank: int = Field(ge=0)
    pid: int = Field(gt=0)
    restart_count: int = Field(default=0, ge=0)


class TaskExit(_Base):
    """A task's exit status was collected (slurm_spank_task_exit). `status` is the raw wait status."""

    type: Literal["task_exit"]
    rank: int = Field(ge=0)
    local_rank: int = Field(ge=0)
    pid: int = Field(gt=0)
    status: int
    exit_code: int | None = None
    signal: int | None = None


class StepEnd(_Base):
    """The step's slurmstepd on `node` is about to exit (slurm_spank_exit)."""

    type: Literal["step_end"]


SpankMessage = Annotated[Register | TaskExit | StepEnd, Field(discriminator="type")]
_ADAPTER: TypeAdapter[Register | TaskExit | StepEnd] = TypeAdapter(SpankMessage)


def parse_spank_line(line: bytes) -> Register | TaskExit | StepEnd:
    """Parse one line from the plugin, or raise ProtocolError saying what was wrong with it."""
    if len(line) > MAX_LINE_BYTES:
        raise ProtocolError(f"SPANK message of {len(line)} bytes is over the {MAX_LINE_BYTES}-byte limit")
    try:
        data = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise ProtocolError(f"SPANK message is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise ProtocolError(f"SPANK message is a JSON {type(data).__name__}, expected an object")
    try:
        return _ADAPTER.validate_python(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "message"
        raise ProtocolError(f"bad SPANK message: {where}: {first['msg']}") from None
