"""The rank whose loss went bad a step before every other's: where a NaN started, before the all-reduce spread it.

A NaN in one rank's gradients reaches every rank at the next all-reduce, so the ranks report it one step apart: the
first to report it, by the step its progress bar or its log line counts (`Train loss: nan: 30%| | 3/10`, `step 4120`),
is where it came from (round 106c: one rank's batch of abnormal samples). Only when one rank alone reports it at the
earliest step and at least two others report it later. Pure function over hits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit

__all__ = ["first_bad_rank"]

# tqdm's `3/10 [00:08<00:14`, or a logged `step 4120` / `iteration 4120` / `iter: 4120`; and the epoch, when the line
# gives one (a bar counts from 1 again each epoch)
_STEP = re.compile(r"\b(\d+)/\d+ \[\d|\b(?:step|iteration|iter)[ :=]+(\d+)\b", re.IGNORECASE)
_EPOCH = re.compile(r"\bepoch[ :=]*(\d+)\b", re.IGNORECASE)


def first_bad_rank(hits: Sequence[Hit]) -> int | None:
    """The one rank whose first non-finite loss came at a step before every other reporting rank's first, else None."""
    first: dict[int, tuple[int, int]] = {}
    for h in sorted(hits, key=lambda h: (h.source, h.line)):
        if h.signature == "nan_loss" and h.rank is not None and h.rank not in first and (m := _STEP.search(h.text)):
            epoch = _EPOCH.search(h.text)
            first[h.rank] = (int(epoch.group(1)) if epoch else 0, int(m.group(1) or m.group(2)))
    if len(first) < 3:
        return None
    earliest = min(first.values())
    leaders = [r for r, at in first.items() if at == earliest]
    return leaders[0] if len(leaders) == 1 else None
