"""The commit point: a version's manifest (JSON, authenticated, written atomically) and directory scans.

The manifest carries an HMAC-SHA256 with the user's key (`ckpt.key`): a restore never accepts a version
whose manifest someone without that key wrote or edited.

A version directory `v<step>` holds `shard-rNNNNN.h5` (a rank's own shard), `replica-rNNNNN.h5` (a partner
copy of another rank's shard), `parity-rNNNNN.h5` (XOR parity), and, once every rank voted valid,
`MANIFEST.json`. A version without a manifest is not committed and is never restored. `FAILED.json` marks
a version that failed verification at restore, so it is never tried again.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from nvrx_hpc.ckpt.api import FORMAT, parse_version_name, version_name
from nvrx_hpc.ckpt.fsutil import write_atomic
from nvrx_hpc.ckpt.key import manifest_key
from nvrx_hpc.core.errors import CheckpointError

__all__ = [
    "MANIFEST",
    "FAILED",
    "ShardRecord",
    "ReplicaRecord",
    "ParitySet",
    "Manifest",
    "LocalVersion",
    "file_name",
    "write_manifest",
    "read_manifest",
    "mark_failed",
    "scan_dir",
    "version_dir",
]

log = logging.getLogger(__name__)

MAX_MANIFEST_BYTES = 64 << 20  # a manifest lists every rank's shard: far below this even at 100k ranks
MANIFEST = "MANIFEST.json"
FAILED = "FAILED.json"
_FILE = re.compile(r"^(shard|replica|parity)-r(\d{5,})\.h5$")


def file_name(kind: str, rank: int) -> str:
    """`shard-r00003.h5`, `replica-r00003.h5` (rank 3's copy on its partner) or `parity-r00003.h5`."""
    return f"{kind}-r{rank:05d}.h5"


@dataclass(frozen=True)
class ShardRecord:
    rank: int
    domain: str
    nbytes: int
    meta_nbytes: int
    ntensors: int
    digest: str


@dataclass(frozen=True)
class ReplicaRecord:
    owner: int
    holder: int
    domain: str


@dataclass(frozen=True)
class ParitySet:
    members: tuple[int, ...]
    chunk: int
    checksums: tuple[str, ...]


@dataclass(frozen=True)
class Manifest:
    """What a committed version holds and where its redundancy lives."""

    step: int
    world_size: int
    scheme: str
    shards: tuple[ShardRecord, ...]
    replicas: tuple[ReplicaRecord, ...] = ()
    parity_sets: tuple[ParitySet, ...] = ()
    created: float = field(default_factory=time.time)
    job_id: str | None = None
    format: str = FORMAT

    @property
    def domains(self) -> list[str]:
        return [s.domain for s in self.shards]

    @property
    def nbytes(self) -> int:
        return sum(s.nbytes for s in self.shards)

    def shard(self, rank: int) -> ShardRecord:
        return self.shards[rank]

    def parity_set_of(self, rank: int) -> tuple[int, ParitySet] | None:
        for ps in self.parity_sets:
            if rank in ps.members:
                return ps.members.index(rank), ps
        return None

    def to_json(self) -> bytes:
        body = asdict(self)
        body["mac"] = _mac(body)
        return (json.dumps(body, sort_keys=True, indent=1) + "\n").encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> Manifest:
        try:
            if len(data) > MAX_MANIFEST_BYTES:
                raise ValueError(f"{len(data)} bytes, more than {MAX_MANIFEST_BYTES}")
            body = json.loads(data)
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
            stored = body.pop("mac", None)
            if not isinstance(stored, str) or not hmac.compare_digest(_mac(body), stored):
                raise ValueError("not authenticated with this user's checkpoint key (written by someone else?)")
            if body.get("format") != FORMAT:
                raise ValueError(f"format {body.get('format')!r}, expected {FORMAT}")
            return cls(
                step=int(body["step"]),
                world_size=int(body["world_size"]),
                scheme=str(body["scheme"]),
                shards=tuple(ShardRecord(**s) for s in body["shards"]),
                replicas=tuple(ReplicaRecord(**r) for r in body["replicas"]),
                parity_sets=tuple(
                    ParitySet(tuple(p["members"]), int(p["chunk"]), tuple(p["checksums"])) for p in body["parity_sets"]
                ),
                created=float(body["created"]),
                job_id=body.get("job_id"),
            )
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            raise CheckpointError(f"manifest {where} is not valid: {exc}", hint="that copy is ignored") from None


def _mac(body: dict) -> str:
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hmac.new(manifest_key(), text.encode(), hashlib.sha256).hexdigest()


def write_manifest(version_dir: Path, manifest: Manifest) -> None:
    """The commit point: tmp, fsync, rename, directory fsync."""
    write_atomic(version_dir / MANIFEST, manifest.to_json())


def read_manifest(version_dir: Path) -> Manifest | None:
    """The manifest in `version_dir`, or None when absent or invalid (logged)."""
    path = version_dir / MANIFEST
    try:
        with open(path, "rb") as f:
            return Manifest.from_json(f.read(MAX_MANIFEST_BYTES + 1), str(path))
    except FileNotFoundError:
        return None
    except (OSError, CheckpointError) as exc:
        log.warning("ignoring manifest %s: %s", path, exc)
        return None


def mark_failed(version_dir: Path, step: int, reason: str) -> None:
    """Record that a version failed at restore; it is skipped from now on (best effort)."""
    try:
        version_dir.mkdir(parents=True, exist_ok=True)
        body = {"step": step, "reason": reason, "time": time.time()}
        write_atomic(version_dir / FAILED, (json.dumps(body) + "\n").encode())
    except (OSError, CheckpointError) as exc:
        log.warning("cannot mark %s failed: %s", version_dir, exc)


@dataclass(frozen=True)
class LocalVersion:
    """What one directory holds of one version."""

    step: int
    path: Path
    manifest: Manifest | None
    shards: frozenset[int]
    replicas: frozenset[int]
    parities: frozenset[int]
    failed: str | None

    def files(self, kind: str) -> frozenset[int]:
        return {"shard": self.shards, "replica": self.replicas, "parity": self.parities}[kind]


def scan_dir(root: Path) -> dict[int, LocalVersion]:
    """Every version directory under `root` (a burst buffer or the shared directory), by step."""
    out: dict[int, LocalVersion] = {}
    try:
        children = list(root.iterdir())
    except FileNotFoundError:
        return out
    for child in children:
        step = parse_version_name(child.name)
        if step is None or not child.is_dir():
            continue
        found: dict[str, set[int]] = {"shard": set(), "replica": set(), "parity": set()}
        failed = None
        try:
            names = [p.name for p in child.iterdir()]
        except OSError:
            continue
        for name in names:
            m = _FILE.match(name)
            if m:
                found[m.group(1)].add(int(m.group(2)))
        if FAILED in names:
            try:
                failed = str(json.loads((child / FAILED).read_text()).get("reason", "failed"))
            except (OSError, ValueError, AttributeError):
                failed = "failed (unreadable marker)"
        out[step] = LocalVersion(
            step=step,
            path=child,
            manifest=read_manifest(child) if MANIFEST in names else None,
            shards=frozenset(found["shard"]),
            replicas=frozenset(found["replica"]),
            parities=frozenset(found["parity"]),
            failed=failed,
        )
    return out


def version_dir(root: Path, step: int) -> Path:
    return root / version_name(step)

