"""Draining and undraining nodes with the NHC ownership convention, under our own leader `nvrx:`.

- We drain with the reason `nvrx: <check>: <detail>` (one line, at most 200 characters).
- A node already drained, down or awaiting a reboot for another reason (an admin, NHC, Slurm's own
  "Prolog error", ...) is left alone: its reason is kept and we do not touch its state.
- We only ever undrain a node whose reason starts with `nvrx:`; anything else raises `NotOurDrain`.

Every change goes through the Slurm adapter (`scontrol update` argv lists with a timeout).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from nvrx_hpc.core.errors import SlurmError
from nvrx_hpc.health.api import CheckResult, NotOurDrain
from nvrx_hpc.slurm.api import NodeInfo, SlurmBackend

__all__ = ["REASON_PREFIX", "MAX_REASON", "DrainOutcome", "drain_reason", "is_ours", "blocked_by", "drain_node",
           "undrain_node"]  # fmt: skip

log = logging.getLogger(__name__)

REASON_PREFIX = "nvrx:"
MAX_REASON = 200


@dataclass(frozen=True)
class DrainOutcome:
    """What happened to one node. `action`: drained, already-ours, left-alone, failed, resumed, not-drained."""

    node: str
    action: str
    reason: str | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, str | None]:
        return {"node": self.node, "action": self.action, "reason": self.reason, "error": self.error}


def drain_reason(result: CheckResult) -> str:
    """`nvrx: <check>: <detail>`, on one line, cut to MAX_REASON characters."""
    text = " ".join(f"{REASON_PREFIX} {result.name}: {result.detail}".split())
    return text if len(text) <= MAX_REASON else text[: MAX_REASON - 3] + "..."


def is_ours(reason: str | None) -> bool:
    return bool(reason) and reason.lstrip().startswith(REASON_PREFIX)


def blocked_by(info: NodeInfo) -> str | None:
    """Why we must leave the node alone (someone else drained it, it is down, a reboot is pending), or None."""
    if "REBOOT_REQUESTED" in info.flags or "REBOOT_ISSUED" in info.flags:
        return f"a reboot is pending ({info.reason or 'no reason'})"
    if (info.drained or info.down or "FAIL" in info.flags) and not is_ours(info.reason):
        state = "+".join([info.state, *sorted(info.flags)])
        return f"{state} with reason {info.reason!r}" if info.reason else f"{state} without a reason"
    return None


def drain_node(slurm: SlurmBackend, node: str, reason: str) -> DrainOutcome:
    """Drain `node` with `reason` unless someone else already holds it; never raises a SlurmError."""
    try:
        info = slurm.node(node)
        other = blocked_by(info)
        if other:
            log.warning("[%s] not draining: %s; leaving the node as it is", node, other)
            return DrainOutcome(node, "left-alone", info.reason)
        if info.drained and is_ours(info.reason):
            log.info("[%s] already drained by nvrx-hpc: %s", node, info.reason)
            return DrainOutcome(node, "already-ours", info.reason)
        slurm.drain([node], reason)
    except SlurmError as exc:
        log.error("[%s] could not drain (%s): %s", node, reason, exc.message)
        return DrainOutcome(node, "failed", reason, exc.message)
    log.warning("[%s] drained: %s", node, reason)
    return DrainOutcome(node, "drained", reason)


def undrain_node(slurm: SlurmBackend, node: str) -> DrainOutcome:
    """Resume `node` if nvrx-hpc drained it.

    Raises:
        NotOurDrain: the node is drained or down with a reason that does not start with `nvrx:`.
        SlurmError: the query or the resume failed.
    """
    info = slurm.node(node)
    if not (info.drained or info.down):
        return DrainOutcome(node, "not-drained", info.reason)
    if not is_ours(info.reason):
        who = f", set by {info.reason_set_by}" if info.reason_set_by else ""
        raise NotOurDrain(
            f"{node} is {'drained' if info.drained else 'down'} with reason {info.reason!r}{who}; "
            f"nvrx-hpc only undrains nodes whose reason starts with {REASON_PREFIX!r}",
            hint="if you are sure the node is healthy, resume it yourself: "
            f"scontrol update NodeName={node} State=RESUME",
        )
    slurm.resume([node])
    log.warning("[%s] resumed (was: %s)", node, info.reason)
    return DrainOutcome(node, "resumed", info.reason)
