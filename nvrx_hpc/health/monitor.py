"""`HealthMonitor`: the node agent's health loop: periodic checks plus live Xid listeners.

The agent builds one per node and job, starts it, and stops it when the job ends:

    monitor = HealthMonitor.from_config(config, node="n2", on_fatal=report_to_launcher,
                                        interval_s=30, metrics=HealthMetrics("n2"))
    monitor.start()            # returns at once; work happens in daemon threads
    ...
    monitor.stop()

- Every `interval_s` the checks of `level` (quick by default) run within `budget_s`; counter growth
  (NVLink, PCIe replays) is judged between consecutive runs.
- One thread per Xid source waits for events: NVML's event set (nvml backend) plus the kernel log
  `/dev/kmsg` when readable, or the node's fault file (sim backend). Each event is judged by the
  policy at once (an application Xid becomes fatal when it repeats).
- `on_fatal(CheckResult)` is called once per fatal finding: once per check while it stays fatal
  (again if it recovers and fails anew), once per Xid code per GPU. It is called from a monitor
  thread: hand it to an event loop with `loop.call_soon_threadsafe`. An exception in the callback
  is logged and the monitor carries on.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

from nvrx_hpc.core.config import NvrxConfig
from nvrx_hpc.health.api import CheckResult, GpuBackend, HealthReport, Level, Verdict, XidEvent, XidSource
from nvrx_hpc.health.backends import open_gpu_backend
from nvrx_hpc.health.metrics import HealthMetrics
from nvrx_hpc.health.policy import HealthPolicy, load_policy
from nvrx_hpc.health.registry import CounterHistory
from nvrx_hpc.health.service import run_health
from nvrx_hpc.health.xid import KMSG_PATH, KernelLogXidSource, XidTracker

__all__ = ["HealthMonitor", "default_xid_sources"]

log = logging.getLogger(__name__)


def default_xid_sources(gpu: GpuBackend, kmsg: bool = True) -> list[XidSource]:
    """The backend's own listener (NVML events, sim fault file) and, for real GPUs, /dev/kmsg when readable."""
    sources: list[XidSource] = []
    try:
        own = gpu.xid_source()
    except Exception as exc:  # no NVML here, or registration failed: the kernel log may still work
        log.warning("no %s Xid listener: %s", gpu.name, getattr(exc, "message", exc))
        own = None
    if own is not None:
        sources.append(own)
    if kmsg and gpu.name == "nvml":
        try:
            sources.append(KernelLogXidSource(KMSG_PATH))
        except OSError as exc:
            log.warning("cannot follow %s for Xids: %s", KMSG_PATH, exc.strerror or exc)
    return sources


class HealthMonitor:
    """Periodic checks and Xid listeners for one node; fatal findings go to `on_fatal`, once each."""

    def __init__(
        self,
        *,
        node: str,
        gpu: GpuBackend,
        policy: HealthPolicy,
        on_fatal: Callable[[CheckResult], None],
        config: NvrxConfig | None = None,
        interval_s: float = 60.0,
        level: Level = Level.QUICK,
        checks: Iterable[str] | None = None,
        budget_s: float | None = None,
        xid_sources: Sequence[XidSource] | None = None,
        metrics: HealthMetrics | None = None,
        on_report: Callable[[HealthReport], None] | None = None,
        env: Mapping[str, str] | None = None,
        job_id: str | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError(f"interval_s must be > 0, got {interval_s}")
        self.node = node
        self.gpu = gpu
        self.policy = policy
        self.config = config if config is not None else NvrxConfig()
        self.interval_s = interval_s
        self.level = level
        self.checks = list(checks) if checks is not None else None
        self.budget_s = budget_s if budget_s is not None else min(interval_s, self.config.health.prolog_budget_s)
        self.xid_sources = list(xid_sources) if xid_sources is not None else default_xid_sources(gpu)
        self.metrics = metrics
        self._on_fatal = on_fatal
        self._on_report = on_report
        self._env = dict(env) if env is not None else {}
        self._job_id = job_id
        self._tracker = XidTracker(policy.xid)
        self._counters = CounterHistory()
        self._inflight: dict[str, threading.Thread] = {}
        self._delivered: list[CheckResult] = []
        self._active: set[tuple] = set()  # keys of fatal findings already delivered
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.last_report: HealthReport | None = None

    @classmethod
    def from_config(
        cls,
        config: NvrxConfig,
        *,
        node: str,
        on_fatal: Callable[[CheckResult], None],
        env: Mapping[str, str] = os.environ,
        policy: HealthPolicy | None = None,
        **kwargs,
    ) -> HealthMonitor:
        """The backend from `health.gpu_backend`, the policy from its file, default listeners."""
        name = config.health.gpu_backend
        gpu = open_gpu_backend(name, node=node, config=config)
        return cls(node=node, gpu=gpu, policy=policy or load_policy(env=env), on_fatal=on_fatal, config=config,
                   env=env, **kwargs)  # fmt: skip

    # ---- public API ------------------------------------------------------------------------------
    @property
    def fatal_findings(self) -> list[CheckResult]:
        """Every fatal finding delivered so far, oldest first."""
        with self._lock:
            return list(self._delivered)

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads)

    def run_once(self) -> HealthReport:
        """Run the checks now, in this thread; deliver new fatal findings; return the report."""
        report = run_health(
            self.config, node=self.node, level=self.level, policy=self.policy, env=self._env, checks=self.checks,
            budget_s=self.budget_s, job_id=self._job_id, gpu=self.gpu, counters=self._counters,
            inflight=self._inflight,
        )  # fmt: skip
        self.last_report = report
        if self.metrics is not None:
            self.metrics.observe_report(report)
        if self._on_report is not None:
            self._call(self._on_report, report)
        with self._lock:
            self._active -= {("check", r.name) for r in report.results if not r.fatal}
        for result in report.fatal:
            self._deliver(result, ("check", result.name))
        return report

    def start(self) -> None:
        """Start the check loop (first run at once) and one thread per Xid source."""
        if self._threads:
            raise RuntimeError("HealthMonitor.start() called twice")
        self._spawn(self._check_loop, "checks")
        for source in self.xid_sources:
            self._spawn(lambda s=source: self._xid_loop(s), f"xid-{source.name}")

    def stop(self, timeout: float = 5.0) -> None:
        """Stop the threads, close the Xid sources and the GPU backend (idempotent)."""
        self._stop.set()
        for source in self.xid_sources:
            _quietly(source.close)
        for thread in self._threads:
            thread.join(timeout)
        if not any(t.is_alive() for t in self._inflight.values()) or self.gpu.name != "nvml":
            _quietly(self.gpu.close)

    def __enter__(self) -> HealthMonitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- internals -------------------------------------------------------------------------------
    def _spawn(self, target: Callable[[], None], what: str) -> None:
        thread = threading.Thread(target=target, name=f"nvrx-monitor-{self.node}-{what}", daemon=True)
        self._threads.append(thread)
        thread.start()

    def _check_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.run_once()
            except Exception:  # never let the loop die; the next run may work
                log.exception("[%s] health run failed", self.node)
            self._stop.wait(self.interval_s)

    def _xid_loop(self, source: XidSource) -> None:
        backoff = 1.0
        while not self._stop.is_set():
            try:
                events = source.poll(0.5)
                backoff = 1.0
            except Exception as exc:
                log.warning("[%s] Xid source %s failed: %s; retrying in %g s", self.node, source.name, exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
                continue
            for event in events:
                self._on_xid(event)

    def _on_xid(self, event: XidEvent) -> None:
        if self.metrics is not None:
            self.metrics.observe_xid(event)
        outcome = self._tracker.add(event)
        if outcome is None:
            return
        verdict, detail = outcome
        log.warning("[%s] %s from %s: %s", self.node, detail, event.source, verdict.value)
        if verdict is Verdict.FATAL:
            result = CheckResult("gpu.xid", Level.QUICK, verdict, detail, {"event": event.to_dict()})
            # The periodic gpu.xid check will see the same Xid in the kernel log: one delivery is enough.
            self._deliver(result, ("xid", event.xid, self._tracker.gpu_key(event)), ("check", "gpu.xid"))

    def _deliver(self, result: CheckResult, key: tuple, *also: tuple) -> None:
        """Deliver unless `key` was delivered already; mark `also` as delivered too."""
        with self._lock:
            if key in self._active:
                return
            self._active.update((key, *also))
            self._delivered.append(result)
        log.warning("[%s] fatal: %s: %s", self.node, result.name, result.detail)
        if self.metrics is not None:
            self.metrics.observe_fatal(result)
        self._call(self._on_fatal, result)

    def _call(self, fn: Callable, arg: object) -> None:
        try:
            fn(arg)
        except Exception:
            log.exception("[%s] health callback %s failed", self.node, getattr(fn, "__name__", fn))


def _quietly(fn: Callable[[], None]) -> None:
    try:
        fn()
    except Exception:
        log.debug("close failed", exc_info=True)
