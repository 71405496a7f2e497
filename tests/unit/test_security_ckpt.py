"""Checkpoint files against someone else: 0600 files, manifests authenticated with the user's key, hostile
shards that fail inside CheckpointError with bounded work."""

from __future__ import annotations

import json
import os
import stat

import h5py
import msgpack
import numpy as np
import pytest
from test_ckpt_files import write

from nvrx_hpc.ckpt import key as ckpt_key
from nvrx_hpc.ckpt.api import FORMAT
from nvrx_hpc.ckpt.manifest import Manifest, ShardRecord, read_manifest, write_manifest
from nvrx_hpc.ckpt.shardfile import digest, read_shard_file
from nvrx_hpc.core.errors import CheckpointError


@pytest.fixture
def own_key(tmp_path, monkeypatch):
    monkeypatch.setenv("NVRX_CKPT_KEY_FILE", str(tmp_path / "keys" / "mine.key"))
    ckpt_key._load.cache_clear()
    yield tmp_path / "keys" / "mine.key"
    ckpt_key._load.cache_clear()


def _manifest() -> Manifest:
    return Manifest(step=5, world_size=1, scheme="none", shards=(ShardRecord(0, "n1", 10, 5, 1, "ab" * 8),))


def test_files_are_the_users_alone(tmp_path, own_key):
    vdir = tmp_path / "v000000000005"
    vdir.mkdir()
    write_manifest(vdir, _manifest())
    write(vdir / "shard-r00000.h5")
    for name in ("MANIFEST.json", "shard-r00000.h5"):
        assert stat.S_IMODE(os.stat(vdir / name).st_mode) == 0o600, name
    assert stat.S_IMODE(os.stat(own_key).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(own_key.parent).st_mode) == 0o700


def test_a_manifest_written_with_another_key_or_none_is_not_a_commit(tmp_path, own_key, monkeypatch):
    vdir = tmp_path / "v000000000005"
    vdir.mkdir()
    write_manifest(vdir, manifest := _manifest())
    assert read_manifest(vdir) == manifest
    monkeypatch.setenv("NVRX_CKPT_KEY_FILE", str(tmp_path / "keys" / "someone-else.key"))
    assert read_manifest(vdir) is None  # someone else's key: not accepted
    monkeypatch.setenv("NVRX_CKPT_KEY_FILE", str(own_key))
    body = json.loads((vdir / "MANIFEST.json").read_text())
    body.pop("mac")
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    body["checksum"] = digest(text.encode())  # the old unkeyed checksum anyone could compute
    (vdir / "MANIFEST.json").write_text(json.dumps(body))
    assert read_manifest(vdir) is None
    for hostile in (b"[1, 2]", b"[" * 100000, b'{"mac": 3}', b"\xff\xfe"):
        (vdir / "MANIFEST.json").write_bytes(hostile)
        assert read_manifest(vdir) is None


def test_a_key_file_others_can_read_is_refused(own_key):
    ckpt_key.manifest_key()
    ckpt_key._load.cache_clear()
    own_key.chmod(0o644)
    with pytest.raises(CheckpointError, match="refusing the checkpoint key"):
        ckpt_key.manifest_key()


def _hostile_shard(path, meta, tensors=None) -> None:
    with h5py.File(path, "w") as f:
        f.attrs["format"] = FORMAT
        blob = msgpack.packb(meta) if not isinstance(meta, bytes) else meta
        f.create_dataset("meta", data=np.frombuffer(blob, dtype=np.uint8))
        group = f.create_group("tensors")
        for i, data in enumerate(tensors or []):
            group.create_dataset(f"{i:06d}", data=data)


@pytest.mark.parametrize("meta", [
    {"format": FORMAT, "tensors": 5, "nbytes": 10},
    {"format": FORMAT, "tensors": [{"path": "a", "dtype": "u1", "shape": [1], "offset": 0, "nbytes": 1}],
     "nbytes": 1 << 50},
    {"format": FORMAT, "tensors": [{"path": "a", "dtype": "u1", "shape": "x", "offset": 0, "nbytes": 1}], "nbytes": 1},
    {"format": FORMAT, "tensors": [None], "nbytes": 1},
    {"format": FORMAT, "tensors": [{"path": "a", "dtype": "u1", "shape": [4], "offset": -8, "nbytes": 4}],
     "nbytes": 4},
    b"\x91" * 100000,
])  # fmt: skip
def test_a_hostile_shard_fails_inside_checkpoint_error(tmp_path, meta):
    path = tmp_path / "shard-r00000.h5"
    _hostile_shard(path, meta, [np.zeros(4, dtype=np.uint8)])
    with pytest.raises(CheckpointError):
        read_shard_file(path)
