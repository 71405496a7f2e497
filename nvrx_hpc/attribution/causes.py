"""The causes a verdict weighs, one per finding of each source: a log hit, a failure record, a launcher event, a
health problem, the flight recorder's culprits, Slurm's job state. Each has a kind, a category, a strength (a root
signature 3, a weak one 2, teardown 1), its evidence and where it points (ranks, nodes, GPUs)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from nvrx_hpc.attribution.api import Category, Evidence, Hit, Role
from nvrx_hpc.attribution.fr_analysis import FRReport
from nvrx_hpc.attribution.inputs import Event, FailureRecord, HealthProblem
from nvrx_hpc.attribution.lines import hit_ranks
from nvrx_hpc.attribution.resources import DiskRow

__all__ = ["Cause", "Findings", "cause_key", "gather_causes", "unplaced_gpu_error"]

_STRENGTH = {Role.ROOT: 3, Role.WEAK: 2, Role.CASCADE: 1, Role.CONTEXT: 0}
_SLURM_STATES = {  # job state -> (category, strength, restartable, text)
    "TIMEOUT": (Category.SCHEDULER, 3, True, "Slurm ended the job at its time limit"),
    "PREEMPTED": (Category.SCHEDULER, 3, True, "Slurm preempted the job"),
    "DEADLINE": (Category.SCHEDULER, 3, False, "the job passed its deadline"),
    "NODE_FAIL": (Category.HOST, 3, True, "Slurm reported a node failure"),
    "BOOT_FAIL": (Category.HOST, 3, True, "a node failed to boot"),
    "OUT_OF_MEMORY": (Category.HOST, 3, False, "Slurm's OOM killer ended the job"),
    "CANCELLED": (Category.SCHEDULER, 2, False, "the job was cancelled"),
}
_SIGNAL_CAUSE = {  # a failure record's signal -> (category, strength, text)
    "SIGSEGV": (Category.FRAMEWORK_CRASH, 3, "crashed with SIGSEGV"),
    "SIGBUS": (Category.FRAMEWORK_CRASH, 3, "crashed with SIGBUS"),
    "SIGILL": (Category.FRAMEWORK_CRASH, 3, "crashed with SIGILL"),
    "SIGKILL": (Category.HOST, 2, "was killed with SIGKILL (OOM killer or an outside kill)"),
    "SIGABRT": (Category.FRAMEWORK_CRASH, 1, "aborted (SIGABRT)"),
}


@dataclass(frozen=True)
class Findings:
    """Everything the verdict is decided from. `job_state` is Slurm's final state, if known."""

    hits: Sequence[Hit] = ()
    records: Sequence[FailureRecord] = ()
    events: Sequence[Event] = ()
    health: Sequence[HealthProblem] = ()
    fr: FRReport | None = None
    job_state: str | None = None
    job_nodes: Sequence[str] = ()
    listed_nodes: frozenset[str] = frozenset()  # hosts of the nodelists the logs print (the job's nodes)
    seen_ranks: frozenset[int] = frozenset()
    rank_hosts: Mapping[int, str] = field(default_factory=dict)  # from line prefixes that are no hit
    addr_hosts: Mapping[str, str] = field(default_factory=dict)  # network address -> host (peers.py)
    stamps: tuple[float, ...] = ()  # dated stamps sampled from the job's logs, events and records
    disks: tuple[DiskRow, ...] = ()  # rows of `df` listings found in the logs
    prompt_hosts: frozenset[str] = frozenset()  # hosts of the shell prompts pasted with the logs (prompts.py)
    shell_hosts: frozenset[str] = frozenset()  # hosts whose pasted prompts ran a program there (prompts.py)
    several_started: bool = False  # a pasted prompt's command started several processes (a launcher)
    odd_call: tuple[tuple[int, ...], str] | None = None  # ranks that called another collective (coll_ops.py)
    pod_nodes: Mapping[str, str] = field(default_factory=dict)  # a Kubernetes pod -> the node it ran on
    p2p_off_trains: bool = False  # a pasted rerun with NCCL's peer-to-peer transport off trained (prompts.py)
    loopback_hosts: frozenset[str] = frozenset()  # hosts whose `hostname -i` printed a loopback address (prompts.py)


@dataclass
class Cause:
    kind: str  # log, record, event, health, fr, slurm
    signature: str
    category: Category
    strength: int
    summary: str
    evidence: Evidence
    time: float | None = None
    ranks: tuple[int, ...] = ()
    nodes: tuple[str, ...] = ()
    gpus: tuple[str, ...] = ()
    restartable: bool | None = None
    order: tuple[int, int] = (1 << 30, 0)
    key: str = ""

    def __post_init__(self) -> None:
        self.key = self.key or self.signature


def _health_category(check: str) -> Category:
    if any(w in (name := check.lower()) for w in ("gpu", "xid", "ecc", "nvlink", "nvml", "dcgm", "remap")):
        return Category.GPU_HARDWARE
    if any(w in name for w in ("nic", "ib", "net", "link", "fabric")):
        return Category.NETWORK
    return Category.HOST


_FINDING_OF = {"ray_memory_oom_task": "ray_memory_oom"}  # one finding's other lines (a cause's key), round 30


def gather_causes(f: Findings, record_time: dict[int, float]) -> list[Cause]:
    """Every cause the sources of `f` give (`record_time`: a rank's failure time, for its untimed lines)."""
    out: list[Cause] = []
    for h in f.hits:
        when = h.time if h.time is not None else record_time.get(h.rank) if h.rank is not None else None
        gpu = f"{h.node}:{h.gpu}" if h.node and h.gpu else h.gpu
        out.append(Cause(
            "log", h.signature, h.category, _STRENGTH[h.role], h.summary,
            Evidence(h.source, h.text, line=h.line), when, hit_ranks(h),
            (h.node,) if h.node else (), (gpu,) if gpu else (), h.restartable, h.order,
            f"{_FINDING_OF.get(h.signature, h.signature)}:{h.fields.get('exc', '')}:{h.fields.get('code', '')}",
        ))  # fmt: skip
    for r in f.records:
        sig = _SIGNAL_CAUSE.get(r.signal or "")
        if sig is None and not r.exit_code:
            continue
        cat, strength, what = sig or (Category.APPLICATION, 2, f"exited with code {r.exit_code}")
        text = f"rank {r.rank} on {r.node or '?'} {what}" + (f" in section {r.section}" if r.section else "")
        out.append(Cause(
            "record", f"record.{r.signal or 'exit'}", cat, strength, text, Evidence(r.source, text, entry="record"),
            r.time, (r.rank,) if r.rank is not None else (), (r.node,) if r.node else (),
        ))  # fmt: skip
    for e in f.events:
        if e.kind == "launcher.culprit":
            out.append(_launcher_culprit(e))
            continue
        if e.kind.endswith("rank.hung"):
            text = f"launcher: rank {e.rank} on {e.node or '?'} hung" + (f" ({e.detail})" if e.detail else "")
            out.append(Cause(
                "event", "launcher.rank.hung", Category.DISTRIBUTED_HANG, 2, text,
                Evidence("events.jsonl", text, line=e.line), e.time,
                (e.rank,) if e.rank is not None else (), (e.node,) if e.node else (),
            ))  # fmt: skip
    for p in f.health:
        text = f"health check {p.check} failed on {p.node}" + (f": {p.detail}" if p.detail else "")
        out.append(Cause(
            "health", f"health.{p.check}", _health_category(p.check), 3, text,
            Evidence(p.source, text, entry=p.check), p.time, (), (p.node,),
            (f"{p.node}:{p.gpu}",) if p.gpu else (),
        ))  # fmt: skip
    if f.fr is not None and f.fr.culprits:
        named = [g for g in f.fr.findings
                 if ({*g.never_joined} | {p["missing"] for p in g.p2p}) & set(f.fr.culprits)] or list(f.fr.findings)
        head = named[0] if named else None
        text = f"flight recorder: ranks {list(f.fr.culprits)} hung; " + "; ".join(g.text() for g in named[:3])
        when = head.first_created_ns / 1e9 if head and head.first_created_ns else None
        out.append(Cause(
            "fr", "flight_recorder", Category.DISTRIBUTED_HANG, 2, text, Evidence("fr", text, entry="fr"),
            when, f.fr.culprits,
        ))  # fmt: skip
    if f.odd_call is not None:  # the program's own divergence, seen first-hand (the others wait on it): a restart
        # replays it
        ranks, text = f.odd_call
        out.append(Cause("fr", "nccl_call_mismatch", Category.DISTRIBUTED_HANG, 3, text,
                         Evidence("nccl", text, entry="nccl_call_mismatch"), None, ranks, restartable=False))
    if f.job_state in _SLURM_STATES:
        cat, strength, ok, text = _SLURM_STATES[f.job_state]
        out.append(Cause(
            "slurm", f"slurm.{f.job_state.lower()}", cat, strength, text,
            Evidence("slurm", f"job state {f.job_state}", entry="JobState"), restartable=ok,
            nodes=tuple(f.job_nodes) if cat is Category.HOST and len(f.job_nodes) == 1 else (),
        ))  # fmt: skip
    return out


# What the launcher saw first-hand (launcher.culprit's `finding`): category, strength, restartable.
_LAUNCHER_FINDINGS = {
    "exited": (Category.APPLICATION, 3, True),
    "hung": (Category.DISTRIBUTED_HANG, 3, True),
    "agent_lost": (Category.HOST, 3, True),
    "health": (Category.GPU_HARDWARE, 3, True),
}


def _launcher_culprit(e) -> Cause:
    """The restart loop's own culprit: it saw the exit status, the hang or the lost node directly."""
    detail = e.raw.get("detail") if isinstance(e.raw.get("detail"), dict) else {}
    finding = str(detail.get("finding", ""))
    reason = str(e.raw.get("reason") or e.detail)
    cat, strength, ok = _LAUNCHER_FINDINGS.get(finding, (Category.UNKNOWN, 1, None))
    if finding == "exited":
        # Who exited is certain; why is not: a crash signal says framework, a bare exit code says nothing.
        cat = Category.FRAMEWORK_CRASH if "signal" in reason.lower() else Category.UNKNOWN
    text = f"launcher: {reason}"
    # When it happened, not when the launcher decided: the time of the matching finding.
    when = e.time
    for item in detail.get("findings") or []:
        if isinstance(item, dict) and item.get("reason") == reason and isinstance(item.get("time"), (int, float)):
            when = float(item["time"])
    return Cause(
        "event", f"launcher.culprit.{finding or 'unknown'}", cat, strength, text,
        Evidence("events.jsonl", text, line=e.line), when,
        (e.rank,) if e.rank is not None else (), (e.node,) if e.node else (), restartable=ok,
    )  # fmt: skip


def cause_key(c: Cause) -> tuple:
    """Order of causes: by time (a log's whole-second stamp at the second's end), then reading order."""
    when = c.time or 0.0
    if c.kind in ("log", "slurm") and when == int(when):
        when += 0.999  # a log stamp to the second: anything inside that second may have come first
    return (c.time is None, when, c.order)


def unplaced_gpu_error(c: Cause) -> bool:
    """A process's own GPU error (`CUDA error: unknown error`) that names no GPU and no node: how a process sees its
    node going down as well as its GPU failing."""
    return c.category is Category.GPU_HARDWARE and c.kind == "log" and not c.nodes and not c.gpus
