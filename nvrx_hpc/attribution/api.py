"""The values attribution passes around: taxonomy, log hits, per-file errors, the verdict and its parts.

Everything here is a frozen dataclass or a string Enum and turns into plain JSON with `to_dict()`.
The verdict follows DESIGN.md: `category` (one of `Category`), `root_cause`, `culprit` (nodes, ranks,
gpus), `restartable`, `confidence` (0-1), `evidence` and `timeline`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

__all__ = [
    "Category",
    "Role",
    "Action",
    "Hit",
    "FileProblem",
    "Evidence",
    "TimelineEvent",
    "Culprit",
    "Cascade",
    "Verdict",
    "SCHEMA_VERSION",
]

SCHEMA_VERSION = 1


class Category(str, Enum):
    """The failure taxonomy of DESIGN.md. `infra` says whether a node (not the workload) is to blame."""

    GPU_HARDWARE = "gpu_hardware"
    NETWORK = "network"
    HOST = "host"
    SCHEDULER = "scheduler"
    APPLICATION = "application"
    NUMERICAL = "numerical"
    FRAMEWORK_CRASH = "framework_crash"
    DISTRIBUTED_HANG = "distributed_hang"
    UNKNOWN = "unknown"

    @property
    def infra(self) -> bool:
        return self in (Category.GPU_HARDWARE, Category.NETWORK, Category.HOST)


class Role(str, Enum):
    """What a hit can be. ROOT: a cause on its own. WEAK: a cause only when no ROOT is found (a watchdog
    timeout, a remote-peer error). CASCADE: what follows a failure elsewhere (teardown, terminate, srun
    task exits). CONTEXT: helps localise or explain, never a cause (advice lines, traceback headers)."""

    ROOT = "root"
    WEAK = "weak"
    CASCADE = "cascade"
    CONTEXT = "context"


class Action(str, Enum):
    """What the restart loop should do next: retry on other nodes, retry as is, or stop."""

    EXCLUDE_AND_RETRY = "exclude_and_retry"
    RETRY = "retry"
    STOP = "stop"


@dataclass(frozen=True)
class Hit:
    """One log line that matched a signature, with where it came from and what it names.

    `time` is epoch seconds when the line carried a timestamp, else None; `clock` says how it was read
    (`iso`, `noyear`, `boot` or ""; see `lines`). `order` is a global reading order (file index, line)
    used when times are missing.
    """

    signature: str
    category: Category
    role: Role
    source: str
    line: int
    text: str
    time: float | None = None
    rank: int | None = None
    node: str | None = None
    gpu: str | None = None
    fields: dict[str, str] = field(default_factory=dict)
    order: tuple[int, int] = (0, 0)
    restartable: bool | None = None
    summary: str = ""
    clock: str = ""

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["category"] = self.category.value
        data["role"] = self.role.value
        data["order"] = list(self.order)
        return data


@dataclass(frozen=True)
class FileProblem:
    """A file that could not be read or parsed; the rest of the analysis went on without it."""

    source: str
    error: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Evidence:
    """One piece of evidence: `source` is a file relative to the run dir (or `slurm`), plus a line number
    or an entry key, and the text that supports the verdict."""

    source: str
    text: str
    line: int | None = None
    entry: str | None = None
    role: str = "root"

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}


@dataclass(frozen=True)
class TimelineEvent:
    """One point of the job's history: `kind` is an events.jsonl kind or `log.<signature>` / `record.failed`."""

    time: float | None
    kind: str
    node: str | None = None
    rank: int | None = None
    detail: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Culprit:
    nodes: tuple[str, ...] = ()
    ranks: tuple[int, ...] = ()
    gpus: tuple[str, ...] = ()
    pods: tuple[str, ...] = ()  # the job's Kubernetes pod on a culprit node: a name users know it by, not a node

    def to_dict(self) -> dict[str, Any]:
        return {"nodes": list(self.nodes), "ranks": list(self.ranks), "gpus": list(self.gpus), "pods": list(self.pods)}


@dataclass(frozen=True)
class Cascade:
    """Hits of one signature that followed the root cause: how many, where, and the first line."""

    signature: str
    count: int
    ranks: tuple[int, ...]
    nodes: tuple[str, ...]
    first: str
    source: str = ""
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "signature": self.signature,
            "count": self.count,
            "ranks": list(self.ranks),
            "nodes": list(self.nodes),
            "first": self.first,
            "source": self.source,
            "line": self.line,
        }


@dataclass(frozen=True)
class Verdict:
    """What failed, where, whether a restart can help, and why we think so.

    `action` is the recommendation for the restart loop; `exclude_nodes` the nodes to leave out of
    the next attempt (empty unless `action` is EXCLUDE_AND_RETRY).
    """

    category: Category
    root_cause: str
    culprit: Culprit
    restartable: bool
    confidence: float
    evidence: tuple[Evidence, ...] = ()
    timeline: tuple[TimelineEvent, ...] = ()
    cascade: tuple[Cascade, ...] = ()
    action: Action = Action.STOP
    exclude_nodes: tuple[str, ...] = ()
    signature: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "category": self.category.value,
            "root_cause": self.root_cause,
            "culprit": self.culprit.to_dict(),
            "restartable": self.restartable,
            "confidence": round(self.confidence, 2),
            "evidence": [e.to_dict() for e in self.evidence],
            "timeline": [t.to_dict() for t in self.timeline],
            "cascade": [c.to_dict() for c in self.cascade],
            "recommendation": {"action": self.action.value, "exclude_nodes": list(self.exclude_nodes)},
            "signature": self.signature,
        }
