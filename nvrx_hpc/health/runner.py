"""Runs checks side by side under one deadline and turns every outcome into a `CheckResult`.

Each check runs in its own daemon thread, so a check that hangs (an NVML call on a dying GPU, a
dead network mount) costs only itself: when the budget is spent the runner stops waiting, reports
that check as timed out (`gate.timeout` in the policy: `error` by default, never a drain) and
returns; the thread is abandoned and dies with the process.

Exceptions become results, never escape: `GpuUnavailable` -> skip ("no GPU/NVML: ..."), `GpuFault`
-> fatal (the GPU itself failed the call), any other exception -> error (logged with its traceback;
an error never drains a node).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence

from nvrx_hpc.core.errors import HealthError
from nvrx_hpc.health.api import CheckResult, Finding, GpuFault, GpuUnavailable, HealthReport, Verdict
from nvrx_hpc.health.registry import Check, CheckContext

__all__ = ["run_checks", "run_one"]

log = logging.getLogger(__name__)


def run_one(check: Check, ctx: CheckContext) -> CheckResult:
    """Run one check in this thread; whatever happens, return a result."""
    start = time.monotonic()
    try:
        finding = check.fn(ctx)
        if not isinstance(finding, Finding) or not isinstance(finding.verdict, Verdict):
            raise TypeError(f"check returned {finding!r}, not a Finding")
        verdict, detail, evidence = finding.verdict, finding.detail, dict(finding.evidence)
    except GpuUnavailable as exc:
        verdict, detail, evidence = Verdict.SKIP, exc.message, {}
    except GpuFault as exc:
        verdict, detail, evidence = Verdict.FATAL, exc.message, {"gpu": exc.gpu}
    except HealthError as exc:
        verdict, detail, evidence = Verdict.ERROR, f"check failed: {exc.message}", {}
        log.warning("[%s] health check %s failed: %s", ctx.node, check.name, exc.message)
    except Exception as exc:  # a bug in a check must not take the caller down (fail open)
        verdict, detail, evidence = Verdict.ERROR, f"check crashed: {type(exc).__name__}: {exc}", {}
        log.exception("[%s] health check %s crashed", ctx.node, check.name)
    return CheckResult(check.name, check.level, verdict, detail, evidence, time.monotonic() - start)


def run_checks(
    checks: Sequence[Check],
    ctx: CheckContext,
    *,
    budget_s: float | None,
    backend: str,
    inflight: dict[str, threading.Thread] | None = None,
) -> HealthReport:
    """Run `checks` in parallel; stop waiting after `budget_s` seconds (None: wait for all).

    `inflight` (kept by a caller that runs checks again and again) maps a check to its thread: a
    check whose thread from an earlier run still hangs is not started twice but reported again.
    """
    started = time.time()
    t0 = time.monotonic()
    deadline = None if budget_s is None else t0 + budget_s
    results: dict[str, CheckResult] = {}
    cond = threading.Condition()
    stuck = {name for name, thread in (inflight or {}).items() if thread.is_alive()}
    for name in stuck:
        check = next((c for c in checks if c.name == name), None)
        if check is not None:
            detail = "still running from an earlier run (hung GPU call or file system?)"
            results[name] = CheckResult(name, check.level, _timeout_verdict(ctx), detail, {"timed_out": True})

    def work(check: Check) -> None:
        result = run_one(check, ctx)
        with cond:
            results[check.name] = result
            cond.notify_all()

    for check in checks:
        if check.name in stuck:
            continue
        thread = threading.Thread(target=work, args=(check,), name=f"nvrx-health-{check.name}", daemon=True)
        thread.start()
        if inflight is not None:
            inflight[check.name] = thread
    with cond:
        while len(results) < len(checks):
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                break
            cond.wait(left)
        finished = dict(results)
    elapsed = time.monotonic() - t0
    ordered = []
    for check in checks:
        result = finished.get(check.name)
        if result is None:
            result = _timed_out(check, ctx, budget_s or elapsed, elapsed)
        ordered.append(result)
    return HealthReport(ctx.node, ctx.level, backend, tuple(ordered), started, elapsed, budget_s)


def _timeout_verdict(ctx: CheckContext) -> Verdict:
    return Verdict.FATAL if ctx.policy.gate.timeout == "fatal" else Verdict.ERROR


def _timed_out(check: Check, ctx: CheckContext, budget_s: float, elapsed: float) -> CheckResult:
    verdict = _timeout_verdict(ctx)
    detail = f"timed out: still running after the {budget_s:g} s budget (hung GPU call or file system?)"
    log.warning("[%s] health check %s %s", ctx.node, check.name, detail)
    return CheckResult(check.name, check.level, verdict, detail, {"timed_out": True, "budget_s": budget_s}, elapsed)
