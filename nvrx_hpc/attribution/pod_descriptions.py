"""Lines of a `kubectl describe pod` belong to the pod it describes (round 91c).

`kubectl describe pod vitl-head-7x2qp` prints `Name:  vitl-head-7x2qp`, its `Node:` a few lines down, and then its
containers' states (`Reason: OOMKilled`, `Exit Code: 137`) and events, none of which names the pod again. A hit
inside one description with no host of its own is placed on the pod's name; the aliases a pod listing or the
description's `Node:` line give then make it that node's, and the pod the culprit's.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Sequence
from pathlib import Path

from nvrx_hpc.attribution.api import Hit

__all__ = ["read_descriptions", "place_in_descriptions"]

_MAX_BYTES = 1 << 20  # a pasted description; a large log is a program's output
_NAME = re.compile(rb"(?m)^Name:[ \t]+([A-Za-z][\w.-]*)[ \t]*\r?$")
_NODE = re.compile(rb"(?m)^Node:[ \t]+[A-Za-z][\w.-]*(?:/|[ \t]*\r?$)")
_NODE_REACH = 12  # the `Node:` line follows `Name:` within the header (namespace, priority, service account)
_END = re.compile(rb"(?m)^(?:\$ |\S+@\S+:\S*\$ |Name:[ \t])")  # the next prompt or the next description


def read_descriptions(path: Path) -> list[tuple[int, int, str]]:
    """(first line, last line, pod) for each pod description in the file at `path`; lines count from 1."""
    try:
        if path.stat().st_size > _MAX_BYTES:
            return []
        data = path.read_bytes()
    except OSError:
        return []
    if b"\nNode:" not in data:
        return []
    spans = []
    for m in _NAME.finditer(data):
        header = data[m.end() : m.end() + 80 * _NODE_REACH]
        node = _NODE.search(header)
        if node is None or header[: node.start()].count(b"\n") > _NODE_REACH:
            continue  # a `Name:` of something else (a node's, a job's)
        end = _END.search(data, m.end())
        stop = end.start() if end else len(data)
        spans.append((data.count(b"\n", 0, m.start()) + 1, data.count(b"\n", 0, stop) + 1, m.group(1).decode()))
    return spans


def place_in_descriptions(hits: Sequence[Hit], spans: Sequence[tuple[int, int, str]]) -> list[Hit]:
    """`hits` of one file, those with no host inside a pod's description placed on that pod."""
    if not spans:
        return list(hits)
    out = []
    for h in hits:
        pod = next((p for first, last, p in spans if first <= h.line <= last), None) if not h.node else None
        out.append(dataclasses.replace(h, node=pod) if pod else h)
    return out
