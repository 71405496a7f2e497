"""The worker Ray says died is the actor its error names by pid (rounds 35a, 57b).

Ray reports a Train worker's death twice: `A worker died or was killed while executing a task by an unexpected
system error` from the driver or the raylet, then `RayActorError: The actor died unexpectedly` whose block names the
actor's `pid:` and `ip:`, and ends `The actor is dead because its worker process has died. ... There are some
potential root causes.` Ray Train's own table of its workers (`(ip=10.1.4.23, pid=1942) world_rank=9`) pairs each
pid with its rank, so the death line takes the pid (and the address) of the block it ends; `localise.enrich` then
gives it that pid's rank.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit

__all__ = ["dead_actor_pids"]

_BLOCK = 8  # lines a RayActorError's block spans from its `pid:` to its closing sentence


def dead_actor_pids(hits: Sequence[Hit]) -> list[Hit]:
    facts = sorted((h.source, h.line, h.fields) for h in hits if h.signature == "ray_dead_actor")
    out = []
    for h in hits:
        if h.signature == "ray_worker_died" and "pid" not in h.fields:
            above = [f for source, line, f in facts if source == h.source and 0 < h.line - line <= _BLOCK]
            pid = next((f["actor_pid"] for f in reversed(above) if "actor_pid" in f), None)
            ip = next((f["actor_ip"] for f in reversed(above) if "actor_ip" in f), None)
            if pid is not None:
                h = dataclasses.replace(h, fields={**h.fields, "pid": pid}, node=h.node or ip)
        out.append(h)
    return out
