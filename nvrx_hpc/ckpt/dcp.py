"""torch.distributed.checkpoint on the burst buffer: partner copies, an atomic commit, a `latest` pointer.

    dcp.save(state, storage_writer=DcpWriter("/dev/shm/nvrx/{domain}"), checkpoint_id="step-100")
    dcp.load(state, storage_reader=DcpReader("/dev/shm/nvrx/{domain}"))  # newest committed version
    dcp_drain(["/dev/shm/nvrx/node1"], "/lustre/run/dcp")               # then plain DCP reads
    dcp.load(state, checkpoint_id="/lustre/run/dcp/latest")              # (FileSystemReader)
    future = async_save(state, storage_writer=DcpWriter(...), checkpoint_id="step-200")  # nvrx_hpc.ckpt.dcp's

A domain root holds `.tmp-<version>/` while a save is written, then `<version>/` (torch's own `.distcp` files
and `.metadata`, plus `.nvrx-commit.json`) and a symlink `latest -> <version>`. Every rank writes its files
with torch's FileSystemWriter code (fsynced) and sends them to its partner in another domain (ckpt.layout's
ring). DCP calls `finish` on rank 0 once every rank wrote: rank 0 writes `.metadata`, renames its directory
and moves `latest` (the commit point), then hands the metadata to the other domains' leaders through the
process group's store; each renames its directory and moves its `latest`. `latest` never names anything else."""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import logging
import os
import re
import threading
import time
import uuid
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch.distributed as dist
from torch.distributed.checkpoint.filesystem import FileSystem, FileSystemReader, FileSystemWriter
from torch.futures import Future

from nvrx_hpc.ckpt import dcp_stage
from nvrx_hpc.ckpt.api import Scheme
from nvrx_hpc.ckpt.dcp_async import async_save  # the kept-thread async save (no per-call executor)
from nvrx_hpc.ckpt.drain import copy_file
from nvrx_hpc.ckpt.fsutil import fsync_dir, remove_quietly, remove_tree, write_atomic
from nvrx_hpc.ckpt.layout import Layout
from nvrx_hpc.ckpt.settings import default_failure_domain
from nvrx_hpc.core.errors import CheckpointError

__all__ = ["DcpWriter", "DcpReader", "dcp_drain", "committed_versions", "async_save", "LATEST"]


# Writers whose background commit may still run when the interpreter exits: one exit hook settles them all
# (a hook per writer would keep every writer of a writer-per-save loop alive).
_LIVE_WRITERS: weakref.WeakSet = weakref.WeakSet()


@atexit.register
def _settle_live_writers() -> None:
    for writer in list(_LIVE_WRITERS):
        writer._settle_committer()


log = logging.getLogger(__name__)

LATEST = "latest"
COMMIT = ".nvrx-commit.json"
METADATA = ".metadata"  # torch's name (filesystem._metadata_fn)
STAGE = ".tmp-"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_FILE = re.compile(r"^__\d+_\d+\.distcp$")  # torch's data file names
_TAG = 31
_POLL_S = 0.02
_GO_TIMEOUT_S = 5.0


def _check_name(version: str) -> str:
    if not _NAME.match(version) or version == LATEST:
        raise CheckpointError(f"checkpoint_id {version!r} is not a plain version name",
                              hint="use letters, digits, '.', '_' and '-' (e.g. 'step-100'); not 'latest'")
    return version


def committed_versions(root: Path) -> list[tuple[int, str]]:
    """(seq, name) of every committed version under `root`, oldest first."""
    out = []
    for child in Path(root).iterdir() if Path(root).is_dir() else ():
        if child.name.startswith(".") or child.name == LATEST or not child.is_dir():
            continue
        try:
            seq = int(json.loads((child / COMMIT).read_text())["seq"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        out.append((seq, child.name))
    return sorted(out)


def _commit(root: Path, version: str, seq: int, keep: int, metadata: bytes | None = None, sweep: bool = True) -> None:
    """Make `.tmp-<version>` the committed `<version>`, point `latest` at it, keep `keep` versions (0: all).

    No rank of this domain writes a staging directory now (the others wait in DCP's collectives, or for this
    leader's next set-up), so `sweep` removes leftovers of failed or killed saves.
    """
    stage = root / (STAGE + version)
    if metadata is not None:
        write_atomic(stage / METADATA, metadata)
    write_atomic(stage / COMMIT, json.dumps({"version": version, "seq": seq, "time": time.time()}).encode())
    fsync_dir(stage)
    os.rename(stage, root / version)
    link = root / f".latest.tmp-{os.getpid()}"  # `latest` moves by an atomic rename of a new symlink
    remove_quietly(link)
    os.symlink(version, link)
    os.replace(link, root / LATEST)
    fsync_dir(root)
    old = [name for _, name in committed_versions(root)[:-keep]] if keep > 0 else []
    stale = [p.name for p in root.iterdir() if p.name.startswith((STAGE, ".latest.tmp-"))] if sweep else []
    for name in old + stale:
        if name != version:
            (remove_tree if (root / name).is_dir() and not (root / name).is_symlink() else remove_quietly)(root / name)


@dataclasses.dataclass(frozen=True)
class _Local:  # a rank's local plan note: its failure domain, the newest seq it has, the version asked for
    domain: str
    seq: int
    version: str | None


@dataclasses.dataclass(frozen=True)
class _Plan:  # the global plan's note for each rank: torch's file prefix, the version, its seq, the layout
    prefix: str
    version: str
    seq: int
    domains: tuple[str, ...]
    token: str


class DcpWriter(FileSystemWriter):
    """A StorageWriter for `torch.distributed.checkpoint.save` that commits on the burst buffer.

    Args:
        root: burst-buffer directory; `{domain}` is replaced by the failure domain.
        failure_domain: this rank's failure domain (default as in AsyncCheckpointer: NVRX_FAILURE_DOMAIN,
            SLURMD_NODENAME, NVRX_NODE, else the host name).
        replicate: "auto" (partner copies when the job spans two or more domains), True (required), False.
        keep: committed versions kept per domain root (0 keeps all).
        commit_timeout_s: how long a non-zero domain's leader waits for rank 0's commit.
        cache_staging: `dcp.async_save` copies the state into a host copy kept across saves of the same
            structure (ckpt.dcp_stage; it holds one host copy of the state), so the copy touches no new
            memory. False: a new copy per save, as torch's own stager.

    The version is `checkpoint_id` given to dcp.save (a plain name), else `v<seq>`.
    """

    def __init__(self, root: str | os.PathLike[str], *, failure_domain: str | None = None,
                 replicate: bool | str = "auto", keep: int = 2, commit_timeout_s: float = 600.0,
                 thread_count: int = 1, cache_staging: bool = True) -> None:
        self.domain = failure_domain or default_failure_domain()
        self.root = Path(os.fspath(root).replace("{domain}", self.domain))
        super().__init__(self.root, single_file_per_rank=True, sync_files=True, thread_count=thread_count,
                         overwrite=False)
        if replicate not in ("auto", True, False):
            raise CheckpointError(f"replicate={replicate!r}", hint="use 'auto', True or False")
        self.replicate, self.keep, self.commit_timeout_s = replicate, int(keep), float(commit_timeout_s)
        self.version: str | None = None  # the last version this writer committed (or staged)
        self._requested: str | None = None
        self._info: _Plan | None = None
        self._transport: Any = None
        self._committer: threading.Thread | None = None
        self._stop = threading.Event()
        self._commit_error: BaseException | None = None
        self._world = 1
        self.cache_staging = bool(cache_staging)
        self._go: threading.Event | None = None  # set from stage() to synchronize_staging() of an async_save
        self._stager = 0  # the thread that called stage(): it never waits for _go itself
        _LIVE_WRITERS.add(self)  # settled at exit without being kept alive by it

    # -- dcp.async_save's blocking part, in the training thread ---------------------------------------------
    _synchronize_after_execute = True  # async_save calls synchronize_staging once the save's thread started

    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """The state's host copy (kept across saves unless cache_staging=False)."""
        if self.cache_staging:
            self.per_thread_copy_ahead = 0  # as FileSystemWriter.stage: the staged state is on the host already
            staged = dcp_stage.stage(state_dict)
        else:
            staged = super().stage(state_dict)
        self._go, self._stager = threading.Event(), threading.get_ident()
        return staged

    def synchronize_staging(self) -> None:
        """async_save's last step before it returns: the save's thread may go on (see _hold)."""
        if self._go is not None:
            self._go.set()

    def _hold(self) -> None:
        """In async_save's thread, wait until async_save returned: until then the caller needs the GIL (to
        start that thread and return), and the save's Python would hold it. DCP's first calls into the writer
        there: `checkpoint_id` (its log line, when none is given), reset (when one is), storage_meta."""
        go = self._go
        if go is not None and threading.get_ident() != self._stager:
            go.wait(_GO_TIMEOUT_S)
            if self._go is go:
                self._go = None

    @property
    def checkpoint_id(self) -> str | os.PathLike[str]:
        self._hold()
        return super().checkpoint_id

    # -- DCP's StorageWriter calls -----------------------------------------------------------------------
    def storage_meta(self) -> Any:
        self._hold()
        return super().storage_meta()

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        self._hold()
        if checkpoint_id:
            self._requested = _check_name(os.fspath(checkpoint_id))
        self.save_id = uuid.uuid4().hex

    @classmethod
    def validate_checkpoint_id(cls, checkpoint_id: str | os.PathLike[str]) -> bool:
        return bool(_NAME.match(os.fspath(checkpoint_id)))

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        super().set_up_storage_writer(is_coordinator, *args, **kwargs)
        # the previous save is over on every rank: its commit key is set or never will be. Its committer may be
        # another writer's (a writer per save), and its sweep would remove this save's staging directory
        with _pending_lock:
            previous = _pending.pop(self.root, None)
        if previous is not None and previous is not self:
            previous._settle_committer()
        self._settle_committer()
        self._world = dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1
        if self.rank is None:
            self.rank = dist.get_rank() if self._world > 1 else 0
        if self._world > 1 and self.replicate is not False and self._transport is None:
            self._transport = _shared_transport()

    def prepare_local_plan(self, plan: Any) -> Any:
        seqs = committed_versions(self.root)
        return dataclasses.replace(plan, storage_data=_Local(self.domain, seqs[-1][0] if seqs else 0,
                                                             self._requested))

    def prepare_global_plan(self, plans: list[Any]) -> list[Any]:
        notes: list[_Local] = [p.storage_data for p in plans]
        seq = max(n.seq for n in notes) + 1
        version = notes[0].version or f"v{seq:06d}"
        domains = tuple(n.domain for n in notes)
        if self.replicate is True:
            Layout(domains).check(Scheme.PARTNER, 2)
        token = f"nvrx-dcp/{version}/{seq}/{uuid.uuid4().hex}"
        return [dataclasses.replace(p, storage_data=_Plan(f"__{i}_", version, seq, domains, token))
                for i, p in enumerate(plans)]

    def write_data(self, plan: Any, planner: Any) -> Future:
        info: _Plan = plan.storage_data
        self._info, self._requested, self.version = info, None, info.version
        layout = Layout(info.domains)
        stage = self.root / (STAGE + info.version)
        results: list = []
        error: BaseException | None = None
        try:
            if (self.root / info.version).exists():
                raise CheckpointError(f"version {info.version!r} is already committed in {self.root}",
                                      hint="give each save a new checkpoint_id, or leave it out (v<seq>)")
            self.root.mkdir(parents=True, exist_ok=True, mode=0o700)
            stage.mkdir(exist_ok=True, mode=0o700)
            self.path = stage
            results = super().write_data(plan, planner).wait()
            for name in {r.storage_data.relative_path for r in results}:
                os.chmod(stage / name, 0o600)  # torch creates them 0644; checkpoints are the user's alone
        except Exception as exc:  # still take part in the exchange below, so the partner does not hang
            error = exc
        if self._transport is not None and _protects(layout):
            try:
                self._replicate(layout, stage, results, error is None)
            except Exception as exc:
                error = error or exc
        if error is not None:
            raise error
        fsync_dir(stage)
        if layout.leader(self.rank) and self.domain != info.domains[0]:  # rank 0 commits its domain in finish
            self._stop.clear()
            self._committer = threading.Thread(target=self._await_commit, name="nvrx-dcp-commit", daemon=True,
                                               args=(info, len(layout.domain_order) - 1))
            self._committer.start()
            with _pending_lock:
                _pending[self.root] = self
        fut: Future = Future()
        fut.set_result(results)
        return fut

    def finish(self, metadata: Any, results: list[list[Any]]) -> None:
        info = self._info
        if info is None:
            raise CheckpointError("finish() before write_data()", hint="a bug in the caller of the StorageWriter")
        super().finish(metadata, results)  # torch writes .metadata into rank 0's staging directory
        stage = self.root / (STAGE + info.version)
        os.chmod(stage / METADATA, 0o600)
        if self._world > 1 and len(set(info.domains)) > 1:
            dist.distributed_c10d._get_default_store().set(info.token, (stage / METADATA).read_bytes())
        _commit(self.root, info.version, info.seq, self.keep)
        self.path = self.root / info.version

    # -- partner copies and the other domains' commit ---------------------------------------------------
    def _replicate(self, layout: Layout, stage: Path, results: list, ok: bool) -> None:
        """Send this rank's files to its partner; write the partner source's files here (fsynced)."""
        names = sorted({r.storage_data.relative_path for r in results}) if ok else []
        sizes = [os.path.getsize(stage / n) for n in names]
        send, offset = np.empty(sum(sizes), dtype=np.uint8), 0
        for name, size in zip(names, sizes, strict=True):  # one copy: file straight into the send buffer
            with open(stage / name, "rb") as f:
                if f.readinto(memoryview(send)[offset: offset + size]) != size:
                    raise CheckpointError(f"{stage / name} changed while being sent", hint="a bug in nvrx-hpc")
            offset += size
        header = json.dumps({"ok": ok, "files": [[n, s] for n, s in zip(names, sizes, strict=True)]})
        headers = [json.loads(h) for h in self._transport.allgather_bytes(header.encode())]
        src, dst = layout.partner_source(self.rank), layout.partner(self.rank)
        incoming = headers[src]["files"]
        recv = np.empty(sum(size for _, size in incoming), dtype=np.uint8)
        self._transport.exchange([(dst, send, _TAG)] if len(send) else [], [(src, recv, _TAG)] if len(recv) else [])
        if not all(h["ok"] for h in headers):
            return  # the save fails on the rank that failed; nothing here will be committed
        offset = 0
        for name, size in incoming:
            if not _FILE.match(name):
                raise CheckpointError(f"partner rank {src} sent a file named {name!r}", hint="a bug in nvrx-hpc")
            write_atomic(stage / name, memoryview(recv)[offset: offset + size])  # type: ignore[arg-type]
            offset += size

    def _await_commit(self, info: _Plan, followers: int) -> None:
        """Wait for rank 0's metadata in the store, then commit this domain (a non-zero domain's leader)."""
        try:
            store = dist.distributed_c10d._get_default_store()
            deadline = time.monotonic() + self.commit_timeout_s
            while not store.check([info.token]):
                if self._stop.wait(_POLL_S) or time.monotonic() > deadline:
                    if not store.check([info.token]):  # dcp.save failed (or rank 0 died): stays uncommitted
                        log.info("version %s not committed on %s: rank 0 never committed it", info.version, self.root)
                        return
                    break
            _commit(self.root, info.version, info.seq, self.keep, store.get(info.token))
            if store.add(info.token + "/acks", 1) >= followers:  # the last domain to commit drops the keys
                with contextlib.suppress(Exception):  # not every store deletes; the keys are small
                    for key in (info.token, info.token + "/acks"):
                        store.delete_key(key)
        except BaseException as exc:
            log.warning("commit of version %s on %s failed: %s", info.version, self.root, exc)
            self._commit_error = exc

    def _settle_committer(self) -> None:
        if self._committer is not None:
            self._stop.set()
            self._committer.join()
            self._committer = None

    def wait_committed(self) -> None:
        """Return once this domain committed the last save (a non-zero domain's leader waits); CheckpointError
        when that commit failed."""
        self._settle_committer()
        if self._commit_error is not None:
            error, self._commit_error = self._commit_error, None
            raise CheckpointError(f"commit on {self.root} failed: {error}", hint="check the burst buffer") from error


_pending: dict[Path, DcpWriter] = {}  # per domain root: the writer whose committer may still run
_pending_lock = threading.Lock()
_shared: tuple[Any, Any] = (None, None)  # (the default process group, the TorchTransport made on it)
_shared_lock = threading.Lock()


def _shared_transport() -> Any:
    """The partner copies' gloo group, one per process and default group, shared by every DcpWriter: a new
    group costs each rank a rendezvous and a connection to every other. Made collectively by the first save
    that replicates (every rank's first one), again after the default group was replaced (a restart)."""
    from nvrx_hpc.ckpt.transport import TorchTransport

    global _shared
    world = dist.distributed_c10d._get_default_group()
    with _shared_lock:
        if _shared[0] is not world:
            _shared = (world, TorchTransport())
        return _shared[1]


def _protects(layout: Layout) -> bool:
    """True when every rank has a partner in another domain (Layout.check's rule; else "auto" makes no copies)."""
    return all(len(ring) > 1 for ring in layout.rings.values())


class _FirstFound(FileSystem):
    """Each file from the first directory that has it (own domain first, then partner copies)."""

    def __init__(self, dirs: Sequence[Path]) -> None:
        self.dirs = list(dirs)

    def concat_path(self, path: str | os.PathLike[str], suffix: str) -> Path:
        for d in self.dirs:
            if (d / suffix).exists():
                return d / suffix
        return self.dirs[0] / suffix


def _find(roots: Sequence[Path], version: str | None) -> tuple[str, list[Path]]:
    """`version` (default: the newest committed one) and the roots' committed directories of it."""
    found = [v for r in roots for v in committed_versions(r)]
    version = version or (max(found)[1] if found else "")
    dirs = [r / version for r in roots if version and (r / version / COMMIT).is_file()]
    if not dirs:
        raise CheckpointError(f"no committed version {version!r} in {', '.join(map(str, roots))}",
                              hint="a version is readable only after its commit; see each root's `latest`")
    return version, dirs


class DcpReader(FileSystemReader):
    """A StorageReader for `torch.distributed.checkpoint.load` from burst-buffer roots: `root` as for DcpWriter,
    filled with this rank's domain, then each of `domains` (roots this rank can see, read for files the own root
    lacks); `version` default: the newest committed one found (name it on multi-node jobs)."""

    def __init__(self, root: str | os.PathLike[str], *, version: str | None = None,
                 domains: Sequence[str] = (), failure_domain: str | None = None) -> None:
        domains = [failure_domain or default_failure_domain(), *domains]
        self.roots = list(dict.fromkeys(Path(os.fspath(root).replace("{domain}", d)) for d in domains))
        super().__init__(self.roots[0])
        self.version = None if version is None else _check_name(version)

    def reset(self, checkpoint_id: str | os.PathLike[str] | None = None) -> None:
        super().reset(None)
        if checkpoint_id:
            self.version = _check_name(os.fspath(checkpoint_id))

    validate_checkpoint_id = DcpWriter.validate_checkpoint_id

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("rank") is not None:
            raise FileNotFoundError("DcpReader checkpoints have one global .metadata")
        _, dirs = _find(self.roots, self.version)
        self.fs, self.path = _FirstFound(dirs), dirs[0]
        return super().read_metadata()

    def prepare_local_plan(self, plan: Any) -> Any:
        need = {self.storage_data[item.storage_index].relative_path for item in plan.items}
        missing = sorted(n for n in need if not Path(self.fs.concat_path(self.path, n)).exists())
        if missing:
            raise CheckpointError(f"{len(missing)} file(s) of {self.path.name} are on no visible root: "
                                  f"{', '.join(missing[:4])}",
                                  hint="name the domains whose roots hold partner copies, or load the drained copy")
        return plan


def dcp_drain(src_roots: Sequence[str | os.PathLike[str]], dst_root: str | os.PathLike[str],
              version: str | None = None) -> dict[str, Any]:
    """Copy a committed version from burst-buffer roots (own files or partner copies) to `dst_root` as plain
    DCP: every file `.metadata` names, then `.metadata`, the commit marker, a rename and `latest`. Files copied
    before are kept, so runs on several nodes with one `dst_root` complete a version between them (the run that
    finds the last file commits it). Returns {"version", "complete", "copied", "missing", "nbytes"}."""
    dst = Path(dst_root)
    version, dirs = _find([Path(r) for r in src_roots], version)
    out: dict[str, Any] = {"version": version, "complete": False, "copied": [], "missing": [], "nbytes": 0}
    if (dst / version / COMMIT).is_file():
        return {**out, "complete": True}
    md_dir = dirs[0]
    names = sorted({i.relative_path for i in FileSystemReader(md_dir).read_metadata().storage_data.values()})
    stage = dst / (STAGE + version)
    stage.mkdir(parents=True, exist_ok=True, mode=0o700)
    fs = _FirstFound(dirs)
    for name in names:
        src = fs.concat_path(md_dir, name)
        if not (stage / name).exists():
            if src.exists():
                out["nbytes"] += copy_file(src, stage / name)
                out["copied"].append(name)
            else:
                out["missing"].append(name)
    if out["missing"]:
        log.info("drain of %s: %d file(s) not here yet", version, len(out["missing"]))
        return out
    copy_file(md_dir / METADATA, stage / METADATA)
    seq = int(json.loads((md_dir / COMMIT).read_text())["seq"])
    try:
        _commit(dst, version, seq, keep=0, sweep=False)
    except FileNotFoundError:  # another node's run committed it first
        if not (dst / version / COMMIT).is_file():
            raise
    out["complete"] = True
    return out
