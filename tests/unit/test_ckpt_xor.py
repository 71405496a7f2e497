"""XOR parity: the ring encode gives RAID-5 parity, and any one member of a set is rebuilt exactly."""

from __future__ import annotations

import numpy as np
import pytest
from ckpt_threads import ThreadWorld

from nvrx_hpc.ckpt import xor


@pytest.mark.parametrize("sizes", [[1000, 777], [64, 0, 4096], [5000, 4999, 1, 640, 3333]])
def test_encode_then_rebuild_each_member(sizes):
    n = len(sizes)
    rng = np.random.default_rng(n)
    datas = [rng.integers(0, 256, s, dtype=np.uint8) for s in sizes]
    c = xor.chunk_size(sizes)
    assert c % 64 == 0 and c * (n - 1) >= max(sizes)
    members = list(range(n))
    parity = ThreadWorld(n).run(lambda t: xor.encode(t, members, datas[t.rank], c))
    for i in range(n):
        expected = np.zeros(c, dtype=np.uint8)
        for j in range(n):
            if j != i:
                expected ^= xor.contribution(datas[j], j, i, n, c, np.empty(c, dtype=np.uint8))
        assert np.array_equal(parity[i], expected)
    for lost in range(n):
        def run(t, lost=lost):
            if t.rank == lost:
                return xor.rebuild(t, members, lost, c, lost_size=sizes[lost], piece=128)
            return xor.rebuild(t, members, lost, c, data=datas[t.rank], parity=parity[t.rank], piece=128)

        payload, par = ThreadWorld(n).run(run)[lost]
        assert np.array_equal(payload, datas[lost]) and np.array_equal(par, parity[lost])


def test_network_volume_per_member_is_about_one_shard():
    """Each of the N-1 ring steps moves one chunk of B/(N-1) bytes."""
    assert xor.chunk_size([8 << 20] * 9) == 1 << 20
