"""The host that advertised a bridge's address is the one set up wrong (round 84c).

A peer that dials Docker's default bridge (172.17.0.x) or libvirt's (192.168.122.x) was given that address by the
host that set up the group: its `master_address=172.17.0.3` is what every other process read. The dialler only
followed it. When the logs show the address advertised (`Init vllm process group: master_address=172.17.0.3`) by
hosts of which exactly one did not dial it, that one is where the setup is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit

__all__ = ["bridge_advertiser"]

_BRIDGE = re.compile(r"\b((?:172\.17\.0|192\.168\.122)\.\d{1,3})\b")


def _where(h: Hit) -> str | None:
    return h.node or h.fields.get("ray_ip")


def bridge_advertiser(root_text: str, hits: Sequence[Hit]) -> str | None:
    m = _BRIDGE.search(root_text)
    if m is None:
        return None
    addr = m.group(1)
    said = {_where(h) for h in hits if h.signature == "bridge_advertised" and h.fields.get("addr") == addr}
    dialled = {_where(h) for h in hits if h.signature == "bridge_address_unreachable" and addr in h.text}
    left = said - dialled - {None}
    return next(iter(left)) if len(left) == 1 and None not in said else None
