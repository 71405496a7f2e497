"""Collective fingerprints that drifted apart: the ranks' code took different paths (round 44).

With `TORCH_DISTRIBUTED_DEBUG=DETAIL`, torch's ProcessGroupWrapper logs each collective every rank runs
(`[Rank 1] Running collective: CollectiveFingerPrint(SequenceNumber=1270, OpType=ALLREDUCE, ...)`). Ranks in step
run the same operation at each sequence number. When two ranks log different operations at one sequence number, or
their last logged sequence numbers differ by more than one, they are no longer issuing the same collectives: the
job hangs (or fails) in a desync that a restart replays. The last such line becomes the `collective_desync` cause,
as torch's own `Detected mismatch between collectives` line would be.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Category, Hit, Role

__all__ = ["drifted_fingerprints"]


def drifted_fingerprints(hits: Sequence[Hit]) -> list[Hit]:
    ops: dict[int, dict[int, str]] = defaultdict(dict)  # seq -> rank -> op
    last: dict[int, Hit] = {}
    for h in hits:
        if h.signature == "collective_fingerprint":
            rank, seq = int(h.fields["frank"]), int(h.fields["seq"])
            ops[seq][rank] = h.fields["op"]
            if rank not in last or seq >= int(last[rank].fields["seq"]):
                last[rank] = h
    if len(last) < 2:
        return list(hits)
    seqs = [int(h.fields["seq"]) for h in last.values()]
    differ = any(len(set(by_rank.values())) > 1 for by_rank in ops.values())
    if not differ and max(seqs) - min(seqs) <= 1:
        return list(hits)
    end = max(last.values(), key=lambda h: (h.source, h.line))
    return [dataclasses.replace(h, signature="collective_desync", category=Category.DISTRIBUTED_HANG, role=Role.ROOT,
                                restartable=False, rank=None,
                                summary="the ranks' collective fingerprints drifted apart (TORCH_DISTRIBUTED_DEBUG): "
                                "they issue different collectives") if h is end else h for h in hits]  # fmt: skip
