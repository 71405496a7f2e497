"""Lines inside a launcher's per-rank output block belong to that rank.

MosaicML Composer's launcher prints a failed rank's captured output between
`----------Begin global rank 8 STDERR----------` and `----------End global rank 8 STDERR----------`; the lines
inside carry no prefix of their own (round 28). Every rankless hit between a block's begin and its end (or the
next block) takes the block's rank. A block whose last exception sends the reader to another rank (`Please
check local rank 0 for more ...`) is a follower's: its earlier exceptions, the chain's causes, are too.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit, Role
from nvrx_hpc.attribution.exception_roles import FOLLOWER_MESSAGE

__all__ = ["block_ranks"]

_FOLLOWER = re.compile(FOLLOWER_MESSAGE)


def block_ranks(hits: Sequence[Hit]) -> list[Hit]:
    out = list(hits)
    if not any(h.signature == "rank_output_block" for h in out):
        return out
    open_block: dict[str, int | None] = {}
    for i in sorted(range(len(out)), key=lambda i: (out[i].source, out[i].line)):
        h = out[i]
        if h.signature == "rank_output_block":
            begins = h.fields.get("edge") == "Begin" and h.fields.get("block", "").isdigit()
            open_block[h.source] = int(h.fields["block"]) if begins else None
        elif h.rank is None and open_block.get(h.source) is not None:
            out[i] = dataclasses.replace(h, rank=open_block[h.source])
    followers = {(h.source, h.rank) for h in out if h.rank is not None and h.signature == "python_exception"
                 and _FOLLOWER.search(h.fields.get("msg", ""))}  # fmt: skip
    return [dataclasses.replace(h, role=Role.CASCADE) if h.signature == "python_exception"
            and (h.source, h.rank) in followers else h for h in out]  # fmt: skip
