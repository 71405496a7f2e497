"""Shard, parity and manifest files: atomic writes, checksums that catch a flipped bit, a full disk named."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from nvrx_hpc.ckpt.drain import copy_file
from nvrx_hpc.ckpt.manifest import Manifest, ShardRecord, read_manifest, scan_dir, write_manifest
from nvrx_hpc.ckpt.shardfile import (
    digest,
    pack_meta,
    read_parity_file,
    read_shard_file,
    unpack_meta,
    write_parity_file,
    write_shard_file,
)
from nvrx_hpc.ckpt.staging import HostArena
from nvrx_hpc.ckpt.tree import flatten
from nvrx_hpc.core.errors import CheckpointError


def staged(nbytes_per_tensor: int = 4096):
    state = {"a": torch.arange(nbytes_per_tensor // 4, dtype=torch.float32), "b": torch.ones(3, dtype=torch.bfloat16),
             "c": torch.empty(0)}
    skeleton, tensors, paths = flatten(state)
    arena = HostArena()
    arena.stage(tensors, paths)
    return skeleton, arena


def write(path: Path, nbytes: int = 4096, chunk: int = 1024) -> tuple[bytes, HostArena]:
    skeleton, arena = staged(nbytes)
    seen = []
    blob = write_shard_file(
        path, kind="shard", rank=3, step=7, entries=arena.entries, data=arena.data, chunk=chunk,
        meta_for=lambda sums: pack_meta(rank=3, step=7, skeleton=skeleton, entries=arena.entries, checksums=sums,
                                        nbytes=len(arena.data)),
        progress=lambda phase, done, total: seen.append((phase, done, total)),
    )
    assert seen[-1] == ("write", arena.entries[0].nbytes + arena.entries[1].nbytes, seen[-1][2])
    return blob, arena


def test_shard_file_round_trip_with_checksums(tmp_path):
    path = tmp_path / "shard-r00003.h5"
    blob, arena = write(path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["shard-r00003.h5"], "no tmp file left behind"
    with h5py.File(path) as f:
        ds = f["tensors"]["000000"]
        assert ds.chunks is None and ds.compression is None, "contiguous, no filters"
        assert ds.attrs["xxh3"] == digest(arena.data[: 4096]) and ds.attrs["dtype"] == "float32"
        assert f.attrs["digest"] == digest(blob)
    back = read_shard_file(path, expect_digest=digest(blob))
    assert np.array_equal(back.data, arena.data)
    assert back.meta["rank"] == 3 and back.meta["step"] == 7


def test_a_flipped_bit_names_the_tensor(tmp_path):
    path = tmp_path / "shard.h5"
    blob, _ = write(path)
    with h5py.File(path) as f:
        offset = f["tensors"]["000000"].id.get_offset()
    with open(path, "r+b") as f:
        f.seek(offset + 5)
        byte = f.read(1)[0]
        f.seek(offset + 5)
        f.write(bytes([byte ^ 1]))
    with pytest.raises(CheckpointError, match=r"tensor 'a' checksum [0-9a-f]+ != [0-9a-f]+ \(bit rot"):
        read_shard_file(path, expect_digest=digest(blob))


def test_wrong_digest_and_garbage_files_are_refused(tmp_path):
    path = tmp_path / "shard.h5"
    write(path)
    with pytest.raises(CheckpointError, match="meta digest .* in the manifest"):
        read_shard_file(path, expect_digest="0" * 16)
    junk = tmp_path / "junk.h5"
    junk.write_bytes(b"not hdf5" * 100)
    with pytest.raises(CheckpointError, match="cannot read shard"):
        read_shard_file(junk)
    with pytest.raises(CheckpointError, match="not msgpack|not an nvrx-ckpt/1 shard"):
        unpack_meta(b"\xc1garbage", "x")


def test_replica_with_wrong_checksums_is_not_committed(tmp_path):
    skeleton, arena = staged()

    def refuse(sums):
        raise CheckpointError("replica arrived corrupted")

    with pytest.raises(CheckpointError, match="corrupted"):
        write_shard_file(tmp_path / "replica.h5", kind="replica", rank=0, step=1, entries=arena.entries,
                         data=arena.data, chunk=1 << 20, meta_for=refuse)
    assert list(tmp_path.iterdir()) == []


def test_parity_file_round_trip_and_corruption(tmp_path):
    parity = np.random.default_rng(0).integers(0, 255, 640, dtype=np.uint8)
    path = tmp_path / "parity-r00001.h5"
    checksum = write_parity_file(path, rank=1, step=2, members=[1, 3], sizes=[100, 200], metas={1: b"m1", 3: b"m3"},
                                 parity=parity)
    back = read_parity_file(path, expect_checksum=checksum)
    assert np.array_equal(back.parity, parity) and back.metas == {1: b"m1", 3: b"m3"} and back.members == [1, 3]
    with pytest.raises(CheckpointError, match="parity checksum"):
        read_parity_file(path, expect_checksum="f" * 16)


def test_manifest_is_atomic_and_self_checked(tmp_path):
    vdir = tmp_path / "v000000000005"
    vdir.mkdir()
    m = Manifest(step=5, world_size=1, scheme="none", shards=(ShardRecord(0, "n1", 10, 5, 1, "ab" * 8),))
    write_manifest(vdir, m)
    assert sorted(p.name for p in vdir.iterdir()) == ["MANIFEST.json"]
    assert read_manifest(vdir) == m
    body = json.loads((vdir / "MANIFEST.json").read_text())
    body["step"] = 6
    (vdir / "MANIFEST.json").write_text(json.dumps(body))
    assert read_manifest(vdir) is None, "an edited manifest does not count as a commit"
    (tmp_path / "v000000000004").mkdir()
    (tmp_path / "v000000000004" / "shard-r00000.h5").write_bytes(b"")
    (tmp_path / "notaversion").mkdir()
    found = scan_dir(tmp_path)
    assert sorted(found) == [4, 5] and found[4].manifest is None and found[4].shards == {0}


def test_copy_file_keeps_to_its_bandwidth(tmp_path):
    src = tmp_path / "src"
    src.write_bytes(os.urandom(3 << 20))
    start = time.monotonic()
    assert copy_file(src, tmp_path / "out" / "dst", bandwidth=20 << 20) == 3 << 20
    assert time.monotonic() - start >= 0.14  # 3 MiB at 20 MiB/s
    assert (tmp_path / "out" / "dst").read_bytes() == src.read_bytes()
    assert not list((tmp_path / "out").glob("*.tmp"))


@pytest.fixture
def tiny_tmpfs(tmp_path):
    """A 1 MiB tmpfs: a really full disk (needs root)."""
    where = tmp_path / "tiny"
    where.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tmpfs")
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)], capture_output=True,
                      timeout=30).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield where
    subprocess.run(["umount", str(where)], capture_output=True, timeout=30)


def test_disk_full_while_writing_is_a_clear_error_and_leaves_nothing(tiny_tmpfs):
    with pytest.raises(CheckpointError) as err:
        write(tiny_tmpfs / "shard.h5", nbytes=4 << 20, chunk=1 << 20)
    assert str(err.value).startswith(f"burst buffer full: {tiny_tmpfs} needs")
    assert "MiB free" in str(err.value) and "previous committed version is kept" in err.value.hint
    assert list(tiny_tmpfs.iterdir()) == []
