"""Links that went down on several hosts at once: the fabric between them, not one node (round 9).

A host's own link going down (`mlx5_core ... Link down`) names that host: its cable, port or NIC. When
two or more hosts lose their links within a few seconds of each other, no one node explains it: the
switch (or a fabric manager, or a power event) they share does. Excluding them would only shrink the
pool, so the verdict names no node and retries. So it is when the adapters of two or more hosts report a `port
error` together (round 40): a flapping link between them, or their switch, not one node's adapter; NCCL prints those
events without a time, so two hosts' events interleaved in one job output count as together.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Sequence

from nvrx_hpc.attribution.api import Hit, Role

__all__ = ["FABRIC_WINDOW_S", "LINK_EVENTS", "SET_UP_SIGNATURES", "fabric_wide", "loopback_alone", "refused_everywhere"]

FABRIC_WINDOW_S = 30.0  # hosts whose links went down this close together lost them to one event
# A link that lost its carrier; a NIC's own fault (cable error, firmware, health) stays that host's.
_LINK_LOST = re.compile(r"[Ll]ink down|lost carrier|Link is Down|async event ?: port error")
LINK_EVENTS = frozenset({"nic_link_down", "nccl_ib_async_event"})  # the signatures whose lines may say so


def fabric_wide(downs: Iterable[tuple[str, float | None, str, str]]) -> int:
    """How many hosts lost their links together: the number of hosts whose first link-down lines (host,
    time, text, file) fall within `FABRIC_WINDOW_S` of each other when there are two or more; else 0 (one
    host, a NIC's own fault, or a line without a time, which cannot be placed in the window, unless every line
    is a timeless port error of one file)."""
    first: dict[str, float] = {}
    downs = list(downs)
    if all(when is None and "port error" in text for _, when, text, _ in downs) and len({f for *_, f in downs}) == 1:
        return len({host for host, *_ in downs}) if len({host for host, *_ in downs}) >= 2 else 0
    for host, when, text, _ in downs:
        if when is None or not _LINK_LOST.search(text):
            return 0
        first[host] = min(first.get(host, when), when)
    if len(first) < 2 or max(first.values()) - min(first.values()) > FABRIC_WINDOW_S:
        return 0
    return len(first)


# Set-up failing on every host alike, a site's configuration rather than one node: NCCL's sockets refused or
# unroutable (a port the site blocks, rounds 45 and 50a), NCCL connecting to an IPv6 link-local address (it chose an
# interface that cannot route, round 53b), EFA's address vector refusing the peers (round 52a), a verbs call refused
# as an invalid argument (round 74b). An aborted or
# timed-out connection is a connection lost, not a set-up: it stays restartable.
_SET_UP = {
    "nccl_connect_refused": None,
    "nccl_connect_failure": re.compile(r"Connection refused|No route to host|Connect to fe80:"),
    "ofi_address_insert": None,
    "ofi_endpoint_failed": None,
    # a verbs call refused as an invalid argument: the RDMA set-up (RoCE's GID index, an HCA the container lacks),
    # not a link that failed under traffic (round 74b)
    "nccl_ibv_call_failed": re.compile(r"Invalid argument|errno 22\b"),
}
SET_UP_SIGNATURES = frozenset(_SET_UP)


def refused_everywhere(hits: Sequence[Hit]) -> list[Hit]:
    """Set-up errors of one kind (`_SET_UP`) on two or more hosts are the fabric's set-up (a plugin and driver that do
    not match, a firewall), not one node: not restartable (round 45). On one host they stay that host's, restartable
    elsewhere."""
    out = list(hits)
    for signature, text in _SET_UP.items():
        hosts = {h.node for h in hits if h.signature == signature and h.node and (text is None or text.search(h.text))}
        if len(hosts) >= 2:
            out = [dataclasses.replace(h, restartable=False) if h.signature == signature else h for h in out]
    return out


def loopback_alone(hits: Sequence[Hit], hosts: Iterable[str]) -> list[Hit]:
    """NCCL on the loopback interface is a cause only in a job of two or more hosts (`hosts`: every host the logs
    name, a prompt's included): on one host it is how NCCL talks to itself (round 83c, and its review)."""
    if len(set(hosts)) >= 2:
        return list(hits)
    return [dataclasses.replace(h, role=Role.CONTEXT) if h.signature == "nccl_loopback_iface" else h for h in hits]
