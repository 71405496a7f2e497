"""Every message between our processes, as a frozen record with a kind; checked field by field on receipt.

Who talks to whom (docs/wire-protocol.md has the frames that carry these):

- worker -> agent, ``w.*``: a rank's hello, heartbeats, sections, iterations, restored timeouts, bye,
  (in-process restart) a fault of its training function or ranks its rendezvous declared lost, and a
  standby task's wait for its go, and the answer to a dump request;
- agent -> worker, ``a.*``: timeouts, a request to checkpoint and stop, a request to dump stacks, an
  in-process restart, a standby task's go;
- launcher -> agent, ``la.*``: the challenge, a new step, timeouts, stop, dump, shutdown, straggler scores,
  an in-process restart (with the ranks that are lost), the go of a standby step;
- agent -> launcher, ``ag.*``: hello, rank events, calibration, status (with section timings), health, bye.

`to_wire()` gives the map a Codec encodes; `parse()` turns a decoded map back into its record or raises
a ProtocolError that names the kind and the field. Keys a record does not know are ignored, so an
older peer's extra fields do no harm. The worker imports this module on its link thread: keep it
standard library only.
"""

from __future__ import annotations

import enum
import time as _time
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, ClassVar

from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.core.field_checks import FieldCheck, field_check, shown

__all__ = [
    "MESSAGE_VERSION", "Kind", "RankEventKind", "Frame", "WorkerHello", "Heartbeat", "SectionMark", "Iteration",
    "WorkerBye", "WorkerTimeouts", "WorkerFault", "WorkerStandby", "WorkerDumped", "AgentGo", "StandbyGo",
    "AgentTimeouts", "AgentRestart", "AgentStop", "AgentDump", "Challenge", "StepStart", "LauncherTimeouts",
    "LauncherStop", "RequestStop", "LauncherDump", "Shutdown", "AgentHello", "RankEvent", "Calibration",
    "AgentStatus", "AgentStopped", "HealthFailed", "HealthUnavailable", "AgentBye", "StragglerFlags",
    "InprocessRestart", "AgentLost", "RECORDS", "parse",
]

MESSAGE_VERSION = 1


class Kind(str, enum.Enum):
    """The `type` of every frame; the prefix says who sends it."""

    W_HELLO = "w.hello"
    W_HEARTBEAT = "w.hb"
    W_SECTION = "w.sec"
    W_ITERATION = "w.iter"
    W_BYE = "w.bye"
    W_TIMEOUTS = "w.timeouts"
    W_FAULT = "w.fault"
    W_STANDBY = "w.standby"
    W_DUMPED = "w.dumped"
    A_TIMEOUTS = "a.timeouts"
    A_STOP = "a.stop"
    A_DUMP = "a.dump"
    A_RESTART = "a.restart"
    A_GO = "a.go"
    LA_CHALLENGE = "la.challenge"
    LA_STEP = "la.step"
    LA_TIMEOUTS = "la.timeouts"
    LA_STOP = "la.stop"
    LA_REQUEST_STOP = "la.request_stop"
    LA_DUMP = "la.dump"
    LA_SHUTDOWN = "la.shutdown"
    LA_STRAGGLERS = "la.stragglers"
    LA_RESTART = "la.restart"
    LA_GO = "la.go"
    AG_HELLO = "ag.hello"
    AG_RANK = "ag.rank"
    AG_CALIBRATION = "ag.calibration"
    AG_STATUS = "ag.status"
    AG_STOPPED = "ag.stopped"
    AG_HEALTH = "ag.health"
    AG_HEALTH_UNAVAILABLE = "ag.health_unavailable"
    AG_BYE = "ag.bye"
    HUB_AGENT_LOST = "hub.agent_lost"  # made by the launcher's hub when a link drops; never on the wire

    def __str__(self) -> str:
        return self.value


class RankEventKind(str, enum.Enum):
    """What an `ag.rank` says happened to a rank."""

    REGISTERED = "registered"
    FIRST_ITERATION = "first_iteration"
    EXITED = "exited"
    HUNG = "hung"
    RAISED = "raised"  # in-process restart: the rank's training function raised, or its rendezvous lost ranks


_record = dataclass(frozen=True, slots=True, kw_only=True)


@_record
class Frame:
    """Base of every record. `ENVELOPE` records carry the message version, the job and the sending time."""

    KIND: ClassVar[Kind]
    ENVELOPE: ClassVar[bool] = False

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.KIND.value}
        if self.ENVELOPE:
            out["v"] = MESSAGE_VERSION
        for name in _FIELD_NAMES[type(self)]:
            value = getattr(self, name)
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, enum.Enum):
                value = value.value
            out[name] = value
        return out


@_record
class _Enveloped(Frame):
    ENVELOPE: ClassVar[bool] = True
    job: str | None = None
    time: float = field(default_factory=_time.time)


@_record
class _FromAgent(_Enveloped):
    node: str = ""


# ------------------------------------------------------------------ worker -> agent (no envelope: hot path)


@_record
class WorkerHello(Frame):
    KIND = Kind.W_HELLO
    rank: int
    pid: int
    local_rank: int | None = None
    restart: int = 0
    t: float = 0.0


@_record
class Heartbeat(Frame):
    KIND = Kind.W_HEARTBEAT
    rank: int
    beats: int
    t: float


@_record
class SectionMark(Frame):
    """A named section opened (`open`) or closed on a rank."""

    KIND = Kind.W_SECTION
    rank: int
    name: str
    open: bool
    t: float


@_record
class Iteration(Frame):
    KIND = Kind.W_ITERATION
    rank: int
    n: int
    t: float = 0.0


@_record
class WorkerBye(Frame):
    KIND = Kind.W_BYE
    rank: int


@_record
class WorkerTimeouts(Frame):
    """Timeouts restored from a checkpoint, sent so the agent does not relearn them."""

    KIND = Kind.W_TIMEOUTS
    rank: int
    timeouts: dict


@_record
class WorkerFault(Frame):
    """In-process restart: the training function raised in `round` (`lost` empty), or the rendezvous
    leader declared `lost` ranks (they never arrived within the soft timeout)."""

    KIND = Kind.W_FAULT
    rank: int
    round: int
    reason: str = ""
    lost: tuple[int, ...] = ()


@_record
class WorkerStandby(Frame):
    """A task of a standby step, its imports done, waits for the go of attempt `restart` (launcher/standby.py)."""

    KIND = Kind.W_STANDBY
    restart: int
    pid: int
    local_rank: int = 0


# ------------------------------------------------------------------ agent -> worker


@_record
class AgentTimeouts(_Enveloped):
    KIND = Kind.A_TIMEOUTS
    timeouts: dict


@_record
class AgentStop(_Enveloped):
    KIND = Kind.A_STOP
    reason: str | None = None


@_record
class AgentDump(_Enveloped):
    KIND = Kind.A_DUMP
    reason: str | None = None


@_record
class AgentRestart(_Enveloped):
    """In-process restart: leave round `round` of the training function and meet the others for the next."""

    KIND = Kind.A_RESTART
    round: int
    lost: tuple[int, ...] = ()
    reason: str = ""


@_record
class AgentGo(_Enveloped):
    """A standby task becomes a rank of attempt `restart` on `ranks_on` (the training nodes in rank order), with
    `env` on top of its own; a task whose node is not among them exits."""

    KIND = Kind.A_GO
    restart: int
    ranks_on: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)


# ------------------------------------------------------------------ launcher -> agent


@_record
class Challenge(_Enveloped):
    KIND = Kind.LA_CHALLENGE
    nonce: str


@_record
class StepStart(_Enveloped):
    """A new training step; `status_s`: how often to send `ag.status` (longer in large jobs)."""

    KIND = Kind.LA_STEP
    restart: int = 0
    status_s: float | None = None


@_record
class LauncherTimeouts(_Enveloped):
    KIND = Kind.LA_TIMEOUTS
    timeouts: dict


@_record
class LauncherStop(_Enveloped):
    KIND = Kind.LA_STOP
    grace_s: float | None = None
    reason: str = "launcher"


@_record
class RequestStop(_Enveloped):
    """Ask the ranks to checkpoint and stop on their own (the time limit is near)."""

    KIND = Kind.LA_REQUEST_STOP
    reason: str = "launcher"


@_record
class LauncherDump(_Enveloped):
    KIND = Kind.LA_DUMP
    reason: str = "launcher"


@_record
class Shutdown(_Enveloped):
    KIND = Kind.LA_SHUTDOWN


@_record
class StragglerFlags(_Enveloped):
    """The launcher's current straggler scores, for the agents' metrics: rank -> {score, flagged, kind}."""

    KIND = Kind.LA_STRAGGLERS
    ranks: dict


@_record
class InprocessRestart(_Enveloped):
    """In-process restart of round `round`: agents pass it to their ranks and SIGKILL the `lost` ones they hold."""

    KIND = Kind.LA_RESTART
    round: int
    lost: tuple[int, ...] = ()
    reason: str = ""


@_record
class StandbyGo(_Enveloped):
    """The standby step waiting for attempt `restart` is that attempt: agents pass it to its tasks (`a.go`)."""

    KIND = Kind.LA_GO
    restart: int
    ranks_on: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)


# ------------------------------------------------------------------ agent -> launcher


@_record
class AgentHello(_FromAgent):
    KIND = Kind.AG_HELLO
    pid: int = 0
    socket: str = ""
    nonce: str = ""


@_record
class RankEvent(_FromAgent):
    KIND = Kind.AG_RANK
    event: RankEventKind
    rank: int
    pid: int | None = None
    source: str | None = None
    step: int | None = None
    iteration: int | None = None
    exit_code: int | None = None
    signal: int | None = None
    sections: tuple[str, ...] = ()
    reason: str | None = None
    silent_s: float | None = None
    last_beat_at: float | None = None
    round: int | None = None  # RAISED: the in-process round the fault ended
    lost: tuple[int, ...] = ()  # RAISED: ranks the rendezvous declared lost


@_record
class Calibration(_FromAgent):
    KIND = Kind.AG_CALIBRATION
    timeouts: dict


@_record
class AgentStatus(_FromAgent):
    """Every `status_s`: the node's ranks, its timeouts, and for the straggler scores the section durations
    closed since the last status (rank -> section -> [count, total_s, min_s]) and the iterations set;
    `standby`: the standby tasks waiting here, per attempt (str -> count)."""

    KIND = Kind.AG_STATUS
    ranks: dict
    timeouts: dict = field(default_factory=dict)
    timings: dict = field(default_factory=dict)
    iterations: dict = field(default_factory=dict)
    standby: dict = field(default_factory=dict)


@_record
class AgentStopped(_FromAgent):
    KIND = Kind.AG_STOPPED
    ranks: tuple[int, ...] = ()
    reason: str = ""


@_record
class HealthFailed(_FromAgent):
    KIND = Kind.AG_HEALTH
    check: str
    verdict: str
    detail: str = ""


@_record
class HealthUnavailable(_FromAgent):
    KIND = Kind.AG_HEALTH_UNAVAILABLE
    reason: str


@_record
class AgentBye(_FromAgent):
    KIND = Kind.AG_BYE


@_record
class AgentLost(_FromAgent):
    """Made by the hub, not received: the agent's link dropped, or it stayed silent `silent_s` seconds."""

    KIND = Kind.HUB_AGENT_LOST
    silent_s: float | None = None


@_record
class WorkerDumped(Frame):
    """The rank answered an a.dump: its stacks and flight recorder are written (or failed), so the agent
    need not wait out its dump window before stopping it."""

    KIND = Kind.W_DUMPED
    rank: int


# ------------------------------------------------------------------ the table and the checks

RECORDS: dict[Kind, type[Frame]] = {
    cls.KIND: cls
    for cls in (
        WorkerHello, Heartbeat, SectionMark, Iteration, WorkerBye, WorkerTimeouts, WorkerFault, WorkerStandby,
        WorkerDumped,
        AgentTimeouts, AgentStop, AgentDump, AgentRestart, AgentGo,
        Challenge, StepStart, LauncherTimeouts, LauncherStop, RequestStop, LauncherDump, Shutdown, StragglerFlags,
        InprocessRestart, StandbyGo,
        AgentHello, RankEvent, Calibration, AgentStatus, AgentStopped, HealthFailed, HealthUnavailable, AgentBye,

    )
}  # fmt: skip
_ON_WIRE = {kind.value: cls for kind, cls in RECORDS.items()}
_FIELD_NAMES: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls)) for cls in (*RECORDS.values(), AgentLost)
}


_CHECKS: dict[type, dict[str, FieldCheck]] = {
    cls: {name: field_check(hint) for name, hint in typing.get_type_hints(cls).items() if name in _FIELD_NAMES[cls]}
    for cls in RECORDS.values()
}
_REQUIRED: dict[type, frozenset[str]] = {
    cls: frozenset(f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING)
    for cls in RECORDS.values()
}


def parse(msg: dict[str, Any]) -> Frame:
    """The record for a decoded frame.

    Raises:
        ProtocolError: an unknown `type`, a required field missing, or a field of the wrong type.
    """
    kind = msg.get("type")
    cls = _ON_WIRE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ProtocolError(f"unknown message kind {kind!r}")
    missing = [name for name in _REQUIRED[cls] if name not in msg]
    if missing:
        raise ProtocolError(f"{kind} message without {', '.join(sorted(missing))}")
    values: dict[str, Any] = {}
    for name, (convert, want) in _CHECKS[cls].items():
        if name not in msg:
            continue
        try:
            values[name] = convert(msg[name])
        except (TypeError, ValueError):
            raise ProtocolError(f"{kind} field {name!r} must be {want}, got {shown(msg[name])}") from None
    return cls(**values)
