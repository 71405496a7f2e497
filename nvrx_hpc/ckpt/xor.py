"""XOR parity over a set of N ranks (RAID-5 style, as SCR's XOR scheme) and the rebuild of one lost member.

Each member's payload is padded to (N-1) chunks of `c` bytes. Member i holds parity P_i, the XOR of one
chunk from every other member: chunk k = (i - j - 1) mod N of member j goes into P_i. Encoding is a ring
reduce-scatter (N-1 steps, each member sends c bytes right and receives c bytes from the left), so each
member sends and stores about B/(N-1) bytes. A lost member m is rebuilt by XOR-reducing, along a chain of
the survivors, for each d: P_d from survivor d, and member j's chunk destined to d from every other j.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nvrx_hpc.ckpt.api import Transport
from nvrx_hpc.ckpt.staging import ALIGN

__all__ = ["chunk_size", "contribution", "xor_into", "encode", "rebuild"]

TAG_ENCODE = 40
TAG_REBUILD = 41


def chunk_size(sizes: Sequence[int]) -> int:
    """The parity chunk c for payloads of `sizes` bytes: max size / (N-1), rounded up to ALIGN."""
    n = len(sizes)
    unit = ALIGN
    longest = max(sizes) if sizes else 0
    per = -(-longest // (n - 1))
    return -(-per // unit) * unit


def contribution(data: np.ndarray, i: int, d: int, n: int, c: int, out: np.ndarray) -> np.ndarray:
    """Member i's chunk that goes into P_d (zero-padded past the end of its payload), written into `out`."""
    k = (d - i - 1) % n
    piece = data[k * c : (k + 1) * c]
    out[: len(piece)] = piece
    out[len(piece) :] = 0
    return out


def xor_into(acc: np.ndarray, other: np.ndarray) -> None:
    """acc ^= other (lengths multiple of 8)."""
    np.bitwise_xor(acc.view(np.uint64), other.view(np.uint64), out=acc.view(np.uint64))


def encode(transport: Transport, members: Sequence[int], data: np.ndarray, c: int) -> np.ndarray:
    """This member's parity chunk (collective over `members`, which must include the caller)."""
    n = len(members)
    i = members.index(transport.rank)
    right, left = members[(i + 1) % n], members[(i - 1) % n]
    send = np.empty(c, dtype=np.uint8)
    bufs = [np.empty(c, dtype=np.uint8), np.empty(c, dtype=np.uint8)]
    acc: np.ndarray | None = None
    for s in range(1, n):
        contribution(data, i, (i - s) % n, n, c, send)
        if acc is not None:
            xor_into(send, acc)
        target = bufs[s % 2]
        transport.exchange([(right, send, TAG_ENCODE)], [(left, target, TAG_ENCODE)])
        acc = target
    assert acc is not None
    return acc.copy()


def _terms(j: int, n: int, c: int, data: np.ndarray, parity: np.ndarray, lo: int, hi: int,
           out: np.ndarray) -> np.ndarray:
    """Survivor j's share of the rebuild stream [lo, hi): block d is P_j when d == j, else j's chunk for P_d."""
    tmp = np.empty(c, dtype=np.uint8)
    pos = lo
    while pos < hi:
        d, off = divmod(pos, c)
        end = min(hi, (d + 1) * c)
        block = parity if d == j else contribution(data, j, d, n, c, tmp)
        out[pos - lo : end - lo] = block[off : off + (end - pos)]
        pos = end
    return out


def rebuild(
    transport: Transport,
    members: Sequence[int],
    lost: int,
    c: int,
    *,
    data: np.ndarray | None = None,
    parity: np.ndarray | None = None,
    lost_size: int = 0,
    piece: int = 16 << 20,
) -> tuple[np.ndarray, np.ndarray] | None:
    """Rebuild member `lost` of a set (collective over `members`).

    Survivors pass their own `data` and `parity` and get None; the lost member gets (its payload of
    `lost_size` bytes, its parity chunk).
    """
    n = len(members)
    m = members.index(lost)
    survivors = [j for j in range(n) if j != m]
    total = n * c
    piece = max(ALIGN, piece - piece % ALIGN)
    spans = [(lo, min(lo + piece, total)) for lo in range(0, total, piece)]
    me = members.index(transport.rank)
    if me == m:
        stream = np.empty(total, dtype=np.uint8)
        for lo, hi in spans:
            transport.exchange([], [(members[survivors[-1]], stream[lo:hi], TAG_REBUILD)])
        payload = np.empty((n - 1) * c, dtype=np.uint8)
        for d in range(n):
            if d != m:
                k = (d - m - 1) % n
                payload[k * c : (k + 1) * c] = stream[d * c : (d + 1) * c]
        return payload[:lost_size].copy(), stream[m * c : (m + 1) * c].copy()
    assert data is not None and parity is not None
    t = survivors.index(me)
    prev = members[survivors[t - 1]] if t > 0 else None
    nxt = members[survivors[t + 1]] if t + 1 < len(survivors) else members[m]
    buf = np.empty(min(piece, total), dtype=np.uint8)
    incoming = np.empty_like(buf)
    for lo, hi in spans:
        mine = _terms(me, n, c, data, parity, lo, hi, buf[: hi - lo])
        if prev is not None:
            transport.exchange([], [(prev, incoming[: hi - lo], TAG_REBUILD)])
            xor_into(mine, incoming[: hi - lo])
        transport.exchange([(nxt, mine, TAG_REBUILD)], [])
    return None
