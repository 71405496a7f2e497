"""GPU checks, each a function of the node's `GpuBackend` and the policy (see `default_policy.toml`).

Per-GPU checks read every GPU NVML sees and report the worst finding, naming each GPU that has one.
A reading the GPU does not support is left out; when no GPU supports it the check reports `skip`.
Counter growth (NVLink errors, PCIe replays) is judged per window: between two runs of a long-lived
monitor, or at level full between two samples `nvlink.sample_s` apart; a one-shot quick run (the
Prolog) judges link state and width only.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from nvrx_hpc.health.api import CLOCK_EVENT_BITS, RECOVERY_ACTIONS, Finding, GpuUnavailable, Level, Verdict
from nvrx_hpc.health.policy import verdict_of
from nvrx_hpc.health.registry import CheckContext, register
from nvrx_hpc.health.xid import judge_xids

__all__: list[str] = []  # checks are reached through the registry

Problem = tuple[Verdict, str]
Probe = Callable[[int], "tuple[list[Problem], Any] | None"]


def _per_gpu(ctx: CheckContext, probe: Probe, ok_text: str, unsupported: str) -> Finding:
    """Run `probe(i)` on every GPU: None = not supported there, else (problems, evidence for that GPU)."""
    count = ctx.gpu.device_count()
    if count == 0:
        return Finding(Verdict.SKIP, "NVML sees no GPUs on this node")
    problems: list[Problem] = []
    evidence: dict[str, Any] = {}
    for i in range(count):
        out = probe(i)
        if out is None:
            continue
        found, reading = out
        problems.extend(found)
        evidence[str(i)] = reading
    if not evidence:
        return Finding(Verdict.SKIP, unsupported)
    worst = Verdict.worst(v for v, _ in problems)
    if worst is Verdict.OK:
        plural = "s" if len(evidence) != 1 else ""
        return Finding(Verdict.OK, f"{len(evidence)} GPU{plural}: {ok_text}", {"gpus": evidence})
    return Finding(worst, "; ".join(text for v, text in problems if v is worst), {"gpus": evidence})


def _flag(action: str, text: str) -> list[Problem]:
    verdict = verdict_of(action)  # type: ignore[arg-type]
    return [(verdict, text)] if verdict is not Verdict.OK else []


@register("gpu.count", Level.QUICK, "GPUs visible to NVML against what the node should have", gpu=True)
def gpu_count(ctx: CheckContext) -> Finding:
    policy = ctx.policy.gpu
    try:
        count = ctx.gpu.device_count()
    except GpuUnavailable as exc:
        on_bus = ctx.gpu.expected_count() if ctx.gpu.name == "nvml" else None
        if on_bus:
            verdict = verdict_of(policy.nvml_missing_with_gpus)
            return Finding(verdict, f"{on_bus} NVIDIA GPUs on the PCI bus, but {exc.message}", {"pci_gpus": on_bus})
        raise
    expected = policy.expected_count or ctx.gpu.expected_count()
    source = "policy gpu.expected_count" if policy.expected_count else f"{ctx.gpu.name} backend"
    evidence = {"visible": count, "expected": expected, "expected_from": source}
    if not expected and count == 0:
        return Finding(Verdict.SKIP, "no GPU/NVML: NVML loaded but sees no GPUs", evidence)
    if expected and count < expected:
        missing = expected - count
        detail = f"{count} of {expected} GPUs visible to NVML ({missing} missing: fallen off the bus?)"
        return Finding(verdict_of(policy.missing), detail, evidence)
    return Finding(Verdict.OK, f"{count} GPUs" + (f" (expected {expected})" if expected else ""), evidence)


@register("gpu.xid", Level.QUICK, "Xid errors in the kernel log (NVRM: Xid) or injected (sim)", gpu=True)
def gpu_xid(ctx: CheckContext) -> Finding:
    events, note = ctx.gpu.recent_xids(ctx.policy.xid.window_s)
    return judge_xids(events, ctx.policy.xid, note)


@register("gpu.ecc", Level.QUICK, "volatile uncorrectable and corrected ECC error counts", gpu=True)
def gpu_ecc(ctx: CheckContext) -> Finding:
    policy = ctx.policy.ecc

    def probe(i: int):
        e = ctx.gpu.ecc(i)
        if e is None:
            return None
        found: list[Problem] = []
        if policy.uncorrected_fatal and e.uncorrected >= policy.uncorrected_fatal:
            found.append((Verdict.FATAL, f"GPU {i}: {e.uncorrected} uncorrectable ECC errors since the driver loaded"))
        if policy.corrected_warn and e.corrected >= policy.corrected_warn:
            found.append((Verdict.WARN, f"GPU {i}: {e.corrected} corrected ECC errors since the driver loaded"))
        return found, {"uncorrected": e.uncorrected, "corrected": e.corrected}

    return _per_gpu(ctx, probe, "no uncorrectable ECC errors", "ECC is off or not supported on these GPUs")


@register("gpu.remapped_rows", Level.QUICK, "row remapping pending (reset needed) or failed", gpu=True)
def gpu_remapped_rows(ctx: CheckContext) -> Finding:
    policy = ctx.policy.remapped_rows

    def probe(i: int):
        r = ctx.gpu.remapped_rows(i)
        if r is None:
            return None
        found: list[Problem] = []
        if r.failed:
            found += _flag(policy.failed, f"GPU {i}: row remapping failed (replace the GPU)")
        if r.pending:
            found += _flag(policy.pending, f"GPU {i}: row remap pending (reset the GPU)")
        reading = {"correctable": r.correctable, "uncorrectable": r.uncorrectable, "pending": r.pending,
                   "failed": r.failed}  # fmt: skip
        return found, reading

    return _per_gpu(ctx, probe, "no remap pending or failed", "row remapping not supported (pre-Ampere GPUs)")


@register("gpu.retired_pages", Level.QUICK, "page retirement pending, pages retired for double-bit errors", gpu=True)
def gpu_retired_pages(ctx: CheckContext) -> Finding:
    policy = ctx.policy.retired_pages

    def probe(i: int):
        r = ctx.gpu.retired_pages(i)
        if r is None:
            return None
        found: list[Problem] = []
        if r.pending:
            found += _flag(policy.pending, f"GPU {i}: page retirement pending (reset the GPU)")
        if policy.dbe_warn and r.dbe >= policy.dbe_warn:
            found.append((Verdict.WARN, f"GPU {i}: {r.dbe} pages retired for double-bit ECC errors"))
        return found, {"sbe": r.sbe, "dbe": r.dbe, "pending": r.pending}

    return _per_gpu(ctx, probe, "no retirement pending", "page retirement not supported (Ampere and newer remap rows)")


@register("gpu.recovery_action", Level.QUICK, "NVML's GPU recovery action (reset, reboot, drain)", gpu=True)
def gpu_recovery_action(ctx: CheckContext) -> Finding:
    def probe(i: int):
        action = ctx.gpu.recovery_action(i)
        if action is None:
            return None
        found: list[Problem] = []
        if action:
            name = RECOVERY_ACTIONS.get(action, f"code {action}")
            found += _flag(ctx.policy.recovery_action.required, f"GPU {i}: recovery action {name} required")
        return found, action

    return _per_gpu(ctx, probe, "no recovery action required", "the recovery action field needs a newer driver")


def _growth(ctx: CheckContext, key: tuple, value: int, warn: int, repeat_fatal: int, what: str) -> list[Problem]:
    delta, streak = ctx.counters.update(key, value, warn)
    if delta is None or delta < warn:
        return []
    verdict = Verdict.FATAL if streak >= repeat_fatal else Verdict.WARN
    return [(verdict, f"{what} grew by {delta} ({streak} window{'s' if streak != 1 else ''} in a row)")]


def _sampled(ctx: CheckContext, read: Callable[[int], Any], prime: Callable[[int, Any], None]) -> dict[int, Any]:
    """Readings of every GPU; at level full, after priming the counters and waiting `nvlink.sample_s`."""
    first = {i: read(i) for i in range(ctx.gpu.device_count())}
    if ctx.level is not Level.FULL or ctx.policy.nvlink.sample_s <= 0:
        return first
    for i, reading in first.items():
        prime(i, reading)
    time.sleep(ctx.policy.nvlink.sample_s)
    return {i: read(i) for i in first}


@register("gpu.nvlink", Level.QUICK, "NVLink state, and error counter growth per window", gpu=True)
def gpu_nvlink(ctx: CheckContext) -> Finding:
    policy = ctx.policy.nvlink

    def key(i: int, link: int, name: str) -> tuple:
        return ("nvlink", i, link, name)

    def prime(i: int, links) -> None:
        for lk in links:
            for name, value in lk.errors.items():
                ctx.counters.update(key(i, lk.link, name), value, policy.growth_warn)

    readings = _sampled(ctx, ctx.gpu.nvlinks, prime)

    def probe(i: int):
        links = readings[i]
        if not links:
            return None
        found: list[Problem] = []
        for lk in links:
            if not lk.up:
                found += _flag(policy.link_down, f"GPU {i}: NVLink {lk.link} is down")
            for name, value in lk.errors.items():
                what = f"GPU {i}: NVLink {lk.link} {name} errors"
                found += _growth(ctx, key(i, lk.link, name), value, policy.growth_warn, policy.repeat_fatal, what)
        return found, {str(lk.link): {"up": lk.up, **lk.errors} for lk in links}

    return _per_gpu(ctx, probe, "every NVLink up, no error growth", "no NVLinks on these GPUs")


@register("gpu.pcie", Level.QUICK, "PCIe link width (and generation at level full) against max, replays", gpu=True)
def gpu_pcie(ctx: CheckContext) -> Finding:
    policy = ctx.policy.pcie

    def prime(i: int, link) -> None:
        if link is not None and link.replays is not None:
            ctx.counters.update(("pcie", i), link.replays, policy.replay_growth_warn)

    readings = _sampled(ctx, ctx.gpu.pcie, prime)

    def probe(i: int):
        p = readings[i]
        if p is None:
            return None
        found: list[Problem] = []
        if p.width < p.max_width:
            found += _flag(policy.width_below_max, f"GPU {i}: PCIe x{p.width}, below its x{p.max_width}")
        if ctx.level is Level.FULL and p.gen < p.max_gen:
            found += _flag(policy.gen_below_max, f"GPU {i}: PCIe gen {p.gen}, below its gen {p.max_gen}")
        if p.replays is not None:
            what = f"GPU {i}: PCIe replays"
            found += _growth(ctx, ("pcie", i), p.replays, policy.replay_growth_warn, policy.replay_repeat_fatal, what)
        return found, {"gen": p.gen, "max_gen": p.max_gen, "width": p.width, "max_width": p.max_width,
                       "replays": p.replays}  # fmt: skip

    return _per_gpu(ctx, probe, "PCIe links at full width", "PCIe link info not supported")


@register("gpu.clocks", Level.QUICK, "clock-event reasons: HW slowdown, thermal, power brake", gpu=True)
def gpu_clocks(ctx: CheckContext) -> Finding:
    actions = ctx.policy.clocks.model_dump()

    def probe(i: int):
        bits = ctx.gpu.clock_event_reasons(i)
        if bits is None:
            return None
        found: list[Problem] = []
        for name, bit in CLOCK_EVENT_BITS.items():
            if bits & bit:
                found += _flag(actions[name], f"GPU {i}: clocks held down by {name.replace('_', ' ')}")
        return found, hex(bits)

    return _per_gpu(ctx, probe, "no slowdown, thermal or power-brake clock events", "clock-event reasons not supported")


@register("gpu.temperature", Level.QUICK, "GPU core temperature against the policy's limits", gpu=True)
def gpu_temperature(ctx: CheckContext) -> Finding:
    policy = ctx.policy.temperature

    def probe(i: int):
        t = ctx.gpu.temperature_c(i)
        if t is None:
            return None
        found: list[Problem] = []
        if policy.fatal_c and t >= policy.fatal_c:
            found.append((Verdict.FATAL, f"GPU {i}: {t} C (limit {policy.fatal_c} C)"))
        elif policy.warn_c and t >= policy.warn_c:
            found.append((Verdict.WARN, f"GPU {i}: {t} C (warning at {policy.warn_c} C)"))
        return found, t

    return _per_gpu(ctx, probe, "temperature within limits", "temperature not supported")


@register("gpu.processes", Level.QUICK, "compute processes or GPU memory left over before a job", gpu=True)
def gpu_processes(ctx: CheckContext) -> Finding:
    policy = ctx.policy.processes

    def probe(i: int):
        procs = ctx.gpu.processes(i)
        used = ctx.gpu.memory_used_mib(i)
        found: list[Problem] = []
        if procs:
            pids = ", ".join(str(p.pid) for p in procs[:5])
            found += _flag(policy.leftover, f"GPU {i}: {len(procs)} compute processes left (pids {pids})")
        elif used is not None and policy.memory_used_mib and used >= policy.memory_used_mib:
            found += _flag(policy.leftover, f"GPU {i}: {used:.0f} MiB of memory in use with no process")
        return found, {"processes": [p.pid for p in procs], "memory_used_mib": used}

    return _per_gpu(ctx, probe, "no leftover processes or memory", "process list not supported")
