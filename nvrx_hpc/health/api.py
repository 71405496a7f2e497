"""The seam of the health layer: verdicts, check results, GPU readings, the GPU backend protocol, errors.

A check reads the node (through a `GpuBackend` for GPUs, directly for the host) and returns a
`Finding`; the runner turns it into a `CheckResult` (name, level, verdict, detail, evidence, time).
Verdicts: `ok`, `warn` and `fatal` are judgements; `skip` means the check does not apply here (no
GPU/NVML, no dcgmi, nothing configured); `error` means the check itself failed or overran its budget.
Only `fatal` ever drains a node; `error` never does (fail open).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Protocol, runtime_checkable

from nvrx_hpc.core.errors import HealthError
from nvrx_hpc.core.exit_codes import ExitCode

__all__ = [
    "CLOCK_EVENT_BITS",
    "RECOVERY_ACTIONS",
    "Verdict",
    "Level",
    "Finding",
    "CheckResult",
    "HealthReport",
    "GpuIdentity",
    "EccCounts",
    "RemappedRows",
    "RetiredPages",
    "NvLink",
    "PcieLink",
    "GpuProcess",
    "XidEvent",
    "GpuBackend",
    "XidSource",
    "GpuUnavailable",
    "GpuFault",
    "HealthPolicyError",
    "NotOurDrain",
]


class Verdict(str, Enum):
    """What a check concluded. `severity` orders them: skip < ok < warn < error < fatal."""

    OK = "ok"
    SKIP = "skip"
    WARN = "warn"
    ERROR = "error"
    FATAL = "fatal"

    @property
    def severity(self) -> int:
        return _SEVERITY[self]

    @classmethod
    def worst(cls, verdicts) -> Verdict:
        return max(verdicts, key=lambda v: v.severity, default=cls.OK)


_SEVERITY = {Verdict.SKIP: -1, Verdict.OK: 0, Verdict.WARN: 1, Verdict.ERROR: 2, Verdict.FATAL: 3}


class Level(str, Enum):
    """quick: seconds, fits the Prolog budget. full: quick plus sampled counters and `dcgmi diag` (minutes)."""

    QUICK = "quick"
    FULL = "full"


@dataclass(frozen=True)
class Finding:
    """What a check function returns; the runner adds name, level and duration."""

    verdict: Verdict
    detail: str
    evidence: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome on one node. `evidence` is JSON-able (raw readings, per-GPU values)."""

    name: str
    level: Level
    verdict: Verdict
    detail: str
    evidence: Mapping[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def fatal(self) -> bool:
        return self.verdict is Verdict.FATAL

    def to_dict(self) -> dict[str, Any]:
        return {
            "check": self.name,
            "level": self.level.value,
            "verdict": self.verdict.value,
            "detail": self.detail,
            "evidence": dict(self.evidence),
            "duration_s": round(self.duration_s, 4),
        }


@dataclass(frozen=True)
class HealthReport:
    """Every check run on a node at one time. `started` is wall-clock seconds (time.time())."""

    node: str
    level: Level
    backend: str
    results: tuple[CheckResult, ...]
    started: float
    duration_s: float
    budget_s: float | None = None

    @property
    def verdict(self) -> Verdict:
        return Verdict.worst(r.verdict for r in self.results)

    @property
    def fatal(self) -> tuple[CheckResult, ...]:
        return tuple(r for r in self.results if r.fatal)

    @property
    def timed_out(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.results if r.evidence.get("timed_out"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "level": self.level.value,
            "backend": self.backend,
            "verdict": self.verdict.value,
            "started": self.started,
            "duration_s": round(self.duration_s, 4),
            "budget_s": None if self.budget_s is None else round(self.budget_s, 3),
            "timed_out": list(self.timed_out),
            "results": [r.to_dict() for r in self.results],
        }


# ---------------------------------------------------------------- GPU readings

# NVML clock-event reasons that mean trouble (the benign ones: idle, app clocks, SW power cap, ...).
CLOCK_EVENT_BITS = {"hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40, "power_brake": 0x80}

# NVML's GPU recovery action field (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION); 0 is NONE.
RECOVERY_ACTIONS = {
    1: "GPU_RESET",
    2: "NODE_REBOOT",
    3: "DRAIN_P2P",
    4: "DRAIN_AND_RESET",
    5: "RECOVER_IMEX_DOMAIN",
    6: "BUS_RESET",
    7: "SYSTEM_REBOOT",
}


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    uuid: str
    pci_bus_id: str
    name: str


@dataclass(frozen=True)
class EccCounts:
    """Volatile ECC error counts (since the driver loaded)."""

    corrected: int
    uncorrected: int


@dataclass(frozen=True)
class RemappedRows:
    """Row remapping (Ampere and newer). `pending`: a GPU reset must apply it. `failed`: remapping failed."""

    correctable: int
    uncorrectable: int
    pending: bool
    failed: bool


@dataclass(frozen=True)
class RetiredPages:
    """Page retirement (Volta and older)."""

    sbe: int
    dbe: int
    pending: bool


@dataclass(frozen=True)
class NvLink:
    """One NVLink that exists on the GPU: whether it is up and its error counters (replay, recovery, ...)."""

    link: int
    up: bool
    errors: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class PcieLink:
    gen: int
    max_gen: int
    width: int
    max_width: int
    replays: int | None = None


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_mib: float | None


@dataclass(frozen=True)
class XidEvent:
    """One Xid: from NVML's event set, a kernel-log `NVRM: Xid` line, or the simulated backend.

    `time` is wall-clock seconds when known (kernel-log times are converted from boot time).
    `gpu` is the NVML index when known; `pci_bus_id` as the source printed it.
    """

    xid: int
    gpu: int | None = None
    pci_bus_id: str | None = None
    detail: str = ""
    source: str = ""
    time: float = math.nan

    def where(self) -> str:
        if self.gpu is not None:
            return f"GPU {self.gpu}"
        return f"PCI {self.pci_bus_id}" if self.pci_bus_id else "an unknown GPU"

    def to_dict(self) -> dict[str, Any]:
        return {
            "xid": self.xid,
            "gpu": self.gpu,
            "pci_bus_id": self.pci_bus_id,
            "detail": self.detail,
            "source": self.source,
            "time": None if math.isnan(self.time) else self.time,
        }


@runtime_checkable
class GpuBackend(Protocol):
    """Reads the GPUs of this node. Methods taking `i` read GPU index i; None means "not supported here".

    Every method may raise `GpuUnavailable` (no GPU/NVML: checks report `skip`) or `GpuFault` (the GPU
    itself failed the call, e.g. NVML's GPU_IS_LOST: checks report `fatal`).
    """

    name: str

    def describe(self) -> str: ...

    def device_count(self) -> int: ...

    def expected_count(self) -> int | None: ...

    def identity(self, i: int) -> GpuIdentity: ...

    def ecc(self, i: int) -> EccCounts | None: ...

    def remapped_rows(self, i: int) -> RemappedRows | None: ...

    def retired_pages(self, i: int) -> RetiredPages | None: ...

    def nvlinks(self, i: int) -> list[NvLink]: ...

    def pcie(self, i: int) -> PcieLink | None: ...

    def clock_event_reasons(self, i: int) -> int | None: ...

    def temperature_c(self, i: int) -> int | None: ...

    def processes(self, i: int) -> list[GpuProcess]: ...

    def memory_used_mib(self, i: int) -> float | None: ...

    def recovery_action(self, i: int) -> int | None: ...

    def recent_xids(self, lookback_s: float) -> tuple[list[XidEvent], str | None]:
        """Xids of the last `lookback_s` seconds, and a note when part of the record was unreadable."""
        ...

    def xid_source(self) -> XidSource | None: ...

    def close(self) -> None: ...


@runtime_checkable
class XidSource(Protocol):
    """A live stream of Xid events. `poll` waits at most `timeout_s` and returns what arrived (maybe [])."""

    name: str

    def poll(self, timeout_s: float) -> list[XidEvent]: ...

    def close(self) -> None: ...


# ---------------------------------------------------------------- errors


class GpuUnavailable(HealthError):
    """No GPU checks are possible here: no NVML library or driver, or `health.gpu_backend = none`."""


class GpuFault(HealthError):
    """A GPU failed a call in a way that is itself a finding (lost, reset required); checks report `fatal`."""

    def __init__(self, message: str, *, gpu: int | None = None, hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.gpu = gpu


class HealthPolicyError(HealthError):
    """The health policy file has an unknown key or a bad value."""

    exit_code = ExitCode.USAGE


class NotOurDrain(HealthError):
    """A node was drained by someone else (its reason does not start with `nvrx:`); we never undo that."""

    exit_code = ExitCode.USAGE
