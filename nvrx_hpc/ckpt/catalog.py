"""What the `nvrx-hpc ckpt` commands report: versions on disk, their verification, their contents.

Reads burst-buffer directories (one per node, or a glob) and the shared directory; imports no torch.
"""

from __future__ import annotations

import glob
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from nvrx_hpc.ckpt.manifest import LocalVersion, Manifest, file_name, scan_dir, version_dir
from nvrx_hpc.ckpt.shardfile import Progress, read_parity_file, read_shard_file, unpack_meta
from nvrx_hpc.core.errors import CheckpointError

__all__ = ["expand_dirs", "VersionRow", "list_versions", "CopyCheck", "VerifyResult", "verify_version",
           "inspect_version"]


def expand_dirs(patterns: Sequence[str]) -> list[Path]:
    """Directories named by `patterns` (shell globs allowed: '/tmp/nvrx-cluster/bb/*/42')."""
    out: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if any(ch in pattern for ch in "*?[") else [pattern]
        out.extend(Path(m) for m in matches if Path(m).is_dir())
    return list(dict.fromkeys(out))


def _scan_all(bb_dirs: Sequence[Path], shared: Path | None) -> dict[int, list[tuple[str, LocalVersion]]]:
    found: dict[int, list[tuple[str, LocalVersion]]] = {}
    places = [(str(d), d) for d in bb_dirs] + ([("shared", shared)] if shared is not None else [])
    for label, root in places:
        for step, v in scan_dir(root).items():
            found.setdefault(step, []).append((label, v))
    return found


def _best_manifest(copies: list[tuple[str, LocalVersion]]) -> Manifest | None:
    manifests = [v.manifest for _, v in copies if v.manifest is not None]
    return max(manifests, key=lambda m: m.created) if manifests else None


@dataclass(frozen=True)
class VersionRow:
    step: int
    status: str
    scheme: str | None
    ranks: int | None
    size_mib: float | None
    shards: int
    replicas: int
    parities: int
    in_shared: bool
    created: str | None


def list_versions(bb_dirs: Sequence[Path], shared: Path | None = None) -> list[VersionRow]:
    """One row per step found anywhere, newest first."""
    rows = []
    for step, copies in sorted(_scan_all(bb_dirs, shared).items(), reverse=True):
        m = _best_manifest(copies)
        failed = next((v.failed for _, v in copies if v.failed), None)
        status = f"failed: {failed}" if failed else ("committed" if m is not None else "incomplete")
        bb = [v for label, v in copies if label != "shared"]
        rows.append(VersionRow(
            step=step,
            status=status,
            scheme=m.scheme if m else None,
            ranks=m.world_size if m else None,
            size_mib=round(m.nbytes / (1 << 20), 3) if m else None,
            shards=len(set().union(*(v.shards for v in bb))) if bb else 0,
            replicas=len(set().union(*(v.replicas for v in bb))) if bb else 0,
            parities=len(set().union(*(v.parities for v in bb))) if bb else 0,
            in_shared=any(label == "shared" and v.manifest is not None for label, v in copies),
            created=time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(m.created)) if m else None,
        ))
    return rows


@dataclass(frozen=True)
class CopyCheck:
    rank: int
    kind: str
    path: str
    ok: bool
    reason: str = ""


@dataclass
class VerifyResult:
    step: int
    restorable: bool
    checks: list[CopyCheck] = field(default_factory=list)
    missing: list[int] = field(default_factory=list)
    message: str = ""


def _pick(found: dict[int, list[tuple[str, LocalVersion]]], step: int | None) -> tuple[int, Manifest]:
    committed = {s: _best_manifest(c) for s, c in found.items()}
    committed = {s: m for s, m in committed.items() if m is not None}
    if step is None:
        if not committed:
            raise CheckpointError("no committed checkpoint found", hint="check --bb-dir and --shared-dir")
        step = max(committed)
    if step not in committed:
        raise CheckpointError(f"no committed version of step {step}",
                              hint=f"committed steps: {sorted(committed)[-10:] or 'none'}")
    return step, committed[step]


def verify_version(bb_dirs: Sequence[Path], shared: Path | None = None, step: int | None = None,
                   progress: Progress | None = None) -> VerifyResult:
    """Read and check every copy of a version (newest committed by default): can a job restore it?"""
    found = _scan_all(bb_dirs, shared)
    step, m = _pick(found, step)
    result = VerifyResult(step=step, restorable=False)
    roots = [d for d in bb_dirs] + ([shared] if shared is not None else [])
    total = sum(1 for root in roots for kind in ("shard", "replica", "parity") for r in range(m.world_size)
                if (version_dir(root, step) / file_name(kind, r)).exists())
    done = 0
    good_data: set[int] = set()
    good_parity: set[int] = set()
    for root in roots:
        for r in range(m.world_size):
            for kind in ("shard", "replica", "parity"):
                path = version_dir(root, step) / file_name(kind, r)
                if not path.exists():
                    continue
                try:
                    if kind == "parity":
                        hit = m.parity_set_of(r)
                        read_parity_file(path, expect_checksum=hit[1].checksums[hit[0]] if hit else None)
                        good_parity.add(r)
                    else:
                        read_shard_file(path, expect_digest=m.shard(r).digest)
                        good_data.add(r)
                    result.checks.append(CopyCheck(r, kind, str(path), True))
                except CheckpointError as exc:
                    result.checks.append(CopyCheck(r, kind, str(path), False, exc.message))
                done += 1
                if progress is not None:
                    progress("verify", done, total)
    result.missing = [r for r in range(m.world_size) if r not in good_data]
    rebuildable = set()
    for ps in m.parity_sets:
        gone = [r for r in ps.members if r in result.missing]
        if len(gone) == 1 and all(j in good_parity for j in ps.members if j != gone[0]):
            rebuildable.add(gone[0])
    result.restorable = all(r in rebuildable for r in result.missing)
    bad = sum(1 for c in result.checks if not c.ok)
    result.message = (
        f"step {step}: {len(result.checks) - bad} good and {bad} bad copies; "
        + ("restorable" if result.restorable else f"NOT restorable: no good copy of ranks {result.missing[:8]}")
        + (f" (ranks {sorted(rebuildable)} from XOR parity)" if rebuildable else "")
    )
    return result


def inspect_version(bb_dirs: Sequence[Path], shared: Path | None = None, step: int | None = None,
                    rank: int = 0) -> dict:
    """The manifest of a version and the tensor table of one rank's shard (from the first copy found)."""
    found = _scan_all(bb_dirs, shared)
    step, m = _pick(found, step)
    if not 0 <= rank < m.world_size:
        raise CheckpointError(f"rank {rank} is not in step {step} (ranks 0..{m.world_size - 1})",
                              hint="pass --rank within the range")
    roots = [d for d in bb_dirs] + ([shared] if shared is not None else [])
    table, source = None, None
    for root in roots:
        for kind in ("shard", "replica"):
            path = version_dir(root, step) / file_name(kind, rank)
            if path.exists():
                import h5py

                with h5py.File(path, "r", locking=False) as f:
                    meta = unpack_meta(f["meta"][()].tobytes(), str(path))
                table = [{k: t[k] for k in ("path", "dtype", "shape", "nbytes", "xxh3")} for t in meta["tensors"]]
                source = str(path)
                break
        if table is not None:
            break
    return {
        "step": step,
        "scheme": m.scheme,
        "world_size": m.world_size,
        "nbytes": m.nbytes,
        "created": m.created,
        "job_id": m.job_id,
        "shards": [vars(s) for s in m.shards],
        "replicas": [vars(r) for r in m.replicas],
        "parity_sets": [{"members": list(p.members), "chunk": p.chunk} for p in m.parity_sets],
        "rank": rank,
        "tensors": table,
        "tensors_from": source,
    }
