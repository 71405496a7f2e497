"""The check registry: every check has a name, a level and a function of a `CheckContext`.

Checks register themselves with `@register(...)` in `checks_gpu`, `checks_host` and `checks_dcgm`;
`select_checks(level)` returns those of a level (full includes quick), loading the modules first.
Check names are what drain reasons, metrics and `nvrx-hpc health` show (`gpu.xid`, `host.shm`, ...).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from nvrx_hpc.health.api import Finding, GpuBackend, HealthPolicyError, Level
from nvrx_hpc.health.policy import HealthPolicy

__all__ = ["Check", "CheckContext", "CounterHistory", "REGISTRY", "register", "select_checks"]

CheckFn = Callable[["CheckContext"], Finding]


@dataclass(frozen=True)
class Check:
    name: str
    level: Level
    description: str
    fn: CheckFn
    gpu: bool


class CounterHistory:
    """Last value of each error counter, and for how many windows in a row it grew; thread-safe.

    Kept across runs by a long-lived caller (the agent's `HealthMonitor`), so counter growth is
    judged per window rather than on absolute counts; a one-shot run (the Prolog) starts empty.
    """

    def __init__(self) -> None:
        self._last: dict[Hashable, int] = {}
        self._streak: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def update(self, key: Hashable, value: int, threshold: int) -> tuple[int | None, int]:
        """Record `value`; returns (growth since the last value or None, windows in a row with growth >= threshold)."""
        with self._lock:
            previous = self._last.get(key)
            self._last[key] = value
            if previous is None:
                return None, 0
            delta = value - previous
            streak = self._streak.get(key, 0) + 1 if delta >= threshold else 0
            self._streak[key] = streak
            return delta, streak


@dataclass
class CheckContext:
    """What a check may read: the node's name, its GPUs, the policy, the level and the agent's paths."""

    node: str
    gpu: GpuBackend
    policy: HealthPolicy
    level: Level = Level.QUICK
    bb_dir_template: str = "/dev/shm/nvrx/%j"
    counters: CounterHistory = field(default_factory=CounterHistory)
    job_id: str | None = None


REGISTRY: dict[str, Check] = {}
_loaded = False


def register(name: str, level: Level, description: str, *, gpu: bool) -> Callable[[CheckFn], CheckFn]:
    def add(fn: CheckFn) -> CheckFn:
        if name in REGISTRY:
            raise ValueError(f"health check {name!r} is registered twice")
        REGISTRY[name] = Check(name, level, description, fn, gpu)
        return fn

    return add


def _load() -> None:
    global _loaded
    if not _loaded:
        from nvrx_hpc.health import checks_dcgm, checks_gpu, checks_host  # noqa: F401 - they register

        _loaded = True


def all_checks() -> list[Check]:
    _load()
    return list(REGISTRY.values())


def select_checks(level: Level, names: Iterable[str] | None = None) -> list[Check]:
    """Checks of `level` (full: every check), or exactly `names` when given.

    Raises:
        HealthPolicyError: an unknown check name (the message lists the known ones).
    """
    _load()
    if names is not None:
        wanted = list(names)
        unknown = [n for n in wanted if n not in REGISTRY]
        if unknown:
            raise HealthPolicyError(
                f"unknown health check {', '.join(unknown)}; known checks: {', '.join(REGISTRY)}",
                hint="`nvrx-hpc health --json` lists every check with its level",
            )
        return [REGISTRY[n] for n in wanted]
    chosen = [c for c in REGISTRY.values() if level is Level.FULL or c.level is Level.QUICK]
    return sorted(chosen, key=lambda c: (not c.gpu, c.level is Level.FULL))  # GPU checks first, stable
