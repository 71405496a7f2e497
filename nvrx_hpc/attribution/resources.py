"""Host resources that ran out (memory, a disk, `/dev/shm`): the job's demand, one node's state, or a
shared file system's.

One rule for all of them: a node-local resource that ran out on one node of several that ran the same
work is that node's state (restartable, exclude the node); alone it is the job's demand (stop), unless
the run had gone on for over an hour (a restart from its checkpoints makes progress: retry, exclude
nobody). What is node-local:

- `/dev/shm`, always;
- a disk found full (`No space left on device`) on a local device: a `df` listing shows the mount of the
  failing path (or, the path unknown, one mount) full on one host and on a local device (`/dev/...`,
  `tmpfs`), or the path is a node-local one (`/tmp`, `/local_nvme`, `/raid`, ...). A disk two or more
  ranks find full that is not node-local is a shared file system that filled (restartable, no rank);
  `Disk quota exceeded` is the job's own limit (stop);
- the kernel's global OOM killer (`Out of memory: Killed process`, `constraint=CONSTRAINT_NONE`): the
  node's memory ran out. A cgroup OOM kill (`Memory cgroup out of memory`, `CONSTRAINT_MEMCG`, Slurm's
  `oom_kill event`) is the job's own memory limit, the same on every node: never the node's fault.

`sample_disks` reads `df` listings from a file's sampled head and tail (regexes over whole blocks, no
per-line Python work); `judge` applies the rule. Pure functions.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import PurePosixPath

from nvrx_hpc.attribution.api import Category, Hit, Role

__all__ = [
    "DiskRow", "Judgement", "sample_disks", "file_host", "judge", "is_local_path", "shm_bus_errors", "HOST_OOM",
    "killed_workers_ranks",
    "RAN_LONG_S",
]  # fmt: skip

HOST_OOM = ("linux_oom_kill", "slurm_oom_kill")
RAN_LONG_S = 3600.0
_LONGEST_JOB_S = 14 * 86400.0  # an older stamp (a file's old header, a copied log) is no start of this run
_HOST = rb"[A-Za-z][\w-]*[\d-][\w.-]*"  # a host name has a digit or a hyphen
# `df` and `df -h`/`-hT`/`-P`: a header, then rows `fs [type] size used avail use% mount`, pdsh-prefixed or not.
_DF_HEAD = re.compile(rb"(?m)^(?:" + _HOST + rb": )?Filesystem\b[^\n]*?\bUse%\s+Mounted on[ \t]*\r?$")
_DF_ROW = re.compile(rb"(?:(" + _HOST + rb"): )?(\S+)(?:[ \t]+\S+){3,4}?[ \t]+(\d{1,3})%[ \t]+(/\S*)[ \t]*\r?")
_SSH = re.compile(rb"\bssh\s+(?:-\S+\s+(?:\S+\s+)?)*?(?:[\w.-]+@)?(" + _HOST + rb")\s")
_HOST_WORD = re.compile(rb"(?<![\w./@=-])(" + _HOST + rb")(?![\w/])")
_LOCAL_PATH = re.compile(r"^/(?:tmp|var/tmp|dev/shm|raid\d*|l?scratch[_-]?local|local[\w-]*|nvme[\w-]*|ssd[\w-]*|"
                         r"mnt/(?:local|nvme|ssd)[\w-]*)(?:/|$)")  # fmt: skip
_LOCAL_SUBDIR = re.compile(r"^/[\w-]+/(?:local|nvme|ssd)[\w-]*/")  # one level down: `/data/local_nvme/` (round 40)
_SHM_RAN_OUT = ("shm_exhausted", "nccl_shm_segment")  # a bus error on a full /dev/shm; NCCL's segment it could not make
_SHM_FULL = re.compile(r"/dev/shm/[^\n]*No space left on device|No space left on device[^\n]*/dev/shm/")
_ENOSPC_PATH = re.compile(r"No space left on device[^'\"/\n]*?['\"]?(/[^'\"\s]+)")



def is_local_path(path: str) -> bool:
    """A path on a node's own storage (`/tmp`, `/local_nvme`, `/raid`, `/data/local_nvme/...`), not a shared one."""
    return bool(_LOCAL_PATH.match(path) or _LOCAL_SUBDIR.match(path))

@dataclass(frozen=True)
class DiskRow:
    """One row of a `df` listing: on which host (None when the listing does not say), the file system,
    its mount point and how full it is."""

    host: str | None
    filesystem: str
    mount: str
    used_pct: int

    @property
    def full(self) -> bool:
        return self.used_pct >= 99

    @property
    def local(self) -> bool:
        return self.filesystem.startswith("/dev/") or self.filesystem in ("tmpfs", "shm")


def _listing_host(command: bytes, file_host: str | None) -> str | None:
    """The host a `df` ran on: `ssh <host> df ...`, a host named on its command line (`$ df -h /x  (trn-07)`),
    else the file's name (`df-trn-07.txt`)."""
    m = _SSH.search(command + b" ")
    if m:
        return m.group(1).decode()
    if b"df" in command:
        words = [w for w in _HOST_WORD.findall(command) if w not in (b"df", b"du")]
        if words:
            return words[0].decode().rstrip(".")
    return file_host


def file_host(name: str) -> str | None:
    """`df-trn-07.txt` -> `trn-07`: the host a file that holds a `df` listing is named after, if any."""
    if "df" not in name.lower():
        return None
    for token in re.split(r"[._]", name):
        token = token.removeprefix("df-").removesuffix("-df")
        if token.lower() != "df" and re.fullmatch(_HOST.decode(), token):
            return token
    return None


def sample_disks(data: bytes, host_of_file: str | None = None) -> list[DiskRow]:
    """The rows of every `df` listing in `data`, each with the host it ran on."""
    rows: list[DiskRow] = []
    for head in _DF_HEAD.finditer(data):
        start = data.rfind(b"\n", 0, max(head.start() - 1, 0)) + 1
        command = data[start : head.start()] if head.start() > 0 else b""
        host = _listing_host(command, host_of_file)
        pos = head.end() + 1
        while pos < len(data):
            m = _DF_ROW.match(data, pos)
            end = data.find(b"\n", pos)
            end = len(data) if end < 0 else end
            if not m or m.end() != end:
                break
            row_host = m.group(1).decode() if m.group(1) else host
            rows.append(DiskRow(row_host, m.group(2).decode(), m.group(4).decode(), int(m.group(3))))
            pos = end + 1
    return rows


@dataclass(frozen=True)
class Judgement:
    """What the rule says: who to name, whether a restart helps, whether to leave the node out, and why."""

    ranks: tuple[int, ...]
    nodes: tuple[str, ...]
    restartable: bool
    exclude: bool
    why: str


def _other_nodes(nodes: Sequence[str], rank_nodes: Mapping[int, str], more: Iterable[str] = ()) -> bool:
    return bool(({*rank_nodes.values(), *more} - {None}) - set(nodes))


def _ran_long(when: float | None, stamps: Iterable[float]) -> bool:
    return when is not None and any(RAN_LONG_S <= when - t <= _LONGEST_JOB_S for t in stamps)


def _full_disk(text: str, disks: Sequence[DiskRow]) -> tuple[str | None, set[str]]:
    """The host whose local disk a `No space left on device` line found full (from `df` listings or a
    node-local path; None when neither says), and the hosts whose same mount was not full."""
    m = _ENOSPC_PATH.search(text)
    path = m.group(1) if m else None
    candidates = [d for d in disks if d.full and d.local and d.host]
    if path:
        under = [d for d in candidates if PurePosixPath(path).is_relative_to(d.mount)]
        longest = max((len(d.mount) for d in under), default=0)
        candidates = [d for d in under if len(d.mount) == longest]
    hosts = {d.host for d in candidates}
    if len(hosts) != 1:
        return None, set()
    mounts = {d.mount for d in candidates}
    spared = {d.host for d in disks if d.host and d.mount in mounts and not d.full} - hosts
    return hosts.pop(), spared


def _oom_is_global(node: str | None, hits: Sequence[Hit]) -> bool:
    """The kernel's own lines about the kill on that node say the node ran out, not the job's cgroup."""
    kills = [h for h in hits if h.signature == "linux_oom_kill" and (node is None or h.node == node)]
    cgroup = any({"memcg", "memcg_limit"} & h.fields.keys() or h.fields.get("constraint", "").endswith("MEMCG")
                 for h in kills)  # fmt: skip
    whole = any("whole" in h.fields or h.fields.get("constraint") == "CONSTRAINT_NONE" for h in kills)
    return whole and not cgroup


def judge(
    signature: str, text: str, when: float | None, ranks: Sequence[int], nodes: Sequence[str], *,
    hits: Sequence[Hit], rank_nodes: Mapping[int, str], disks: Sequence[DiskRow], stamps: Iterable[float],
    job_nodes: Iterable[str] = (),
) -> Judgement | None:
    """The verdict's culprit and restart decision for a root cause that is a host resource running out;
    None for any other root cause (or one this rule leaves as the catalog says). `job_nodes`: the job's
    nodes as Slurm or a nodelist in the logs gives them, beside those the ranks are placed on."""
    ranks, nodes, job_nodes = tuple(ranks), tuple(nodes), tuple(job_nodes)
    alone_why = "; it ran out on the job's only node, so it is the job's demand"
    # Run out on several nodes alike (round 53a: /dev/shm of every container, the kernel's OOM kills on two nodes):
    # the job's demand or its containers' size, not one node; a single rank named stays named (its own kill)
    killed_on = {h.node for h in hits if h.signature in HOST_OOM and h.node}
    if (signature in _SHM_RAN_OUT and len(set(nodes)) >= 2) or (
            signature in HOST_OOM and len(killed_on) >= 2 and len(ranks) != 1):
        return Judgement((), (), False, False, "; it ran out on several nodes alike: the job's demand, not a node")
    if signature == "nccl_shm_segment" and len(nodes) == 1 and len(ranks) >= 2:  # several of one node's ranks:
        return Judgement((), nodes, True, True, "; the node's /dev/shm ran out") if _other_nodes(  # the node's
            nodes, rank_nodes, job_nodes) else None
    if signature == "shm_exhausted":
        if len(nodes) == 1 and _other_nodes(nodes, rank_nodes, job_nodes):
            return Judgement(ranks, nodes, True, True, "; the job's other nodes ran the same work without it")
        return None
    if signature == "disk_full":
        if "quota" in text.lower():
            return Judgement(ranks, nodes, False, False, "; the job's own quota")
        host, spared = _full_disk(text, disks)
        if host is None and (m := _ENOSPC_PATH.search(text)) and is_local_path(m.group(1)) and len(nodes) == 1:
            host = nodes[0]
        if host is not None:
            writers = tuple(r for r in ranks if rank_nodes.get(r, host) == host)
            if _other_nodes((host,), rank_nodes, (*spared, *job_nodes)):
                why = f"; the node-local disk of {host} filled while the job's other nodes ran the same work"
                return Judgement(writers, (host,), True, True, why)
            return Judgement(writers, (host,), False, False, alone_why)
        if _SHM_FULL.search(text):  # node-local always: several ranks filling it is their node's size, a container's
            return Judgement((), nodes if len(set(nodes)) == 1 else (), False, False,
                             "; /dev/shm is the node's own: its size is the job's limit")  # on several: alike (55b)
        on = {rank_nodes.get(r) for r in ranks}
        if len(ranks) >= 2 and len(on) == 1 and None not in on and _other_nodes(tuple(on), rank_nodes, job_nodes):
            host = on.pop()  # every writer that found it full ran on one node of several: that node's disk (99a)
            return Judgement((), (host,), True, True, f"; the ranks that found it full all ran on {host}, while the "
                                                      "job's other nodes ran the same work: its node-local disk")
        if len(ranks) >= 2:
            return Judgement((), (), True, False,
                             "; several ranks found it full, so the shared file system is full, not one rank's disk")
        if len(nodes) == 1 and not _ENOSPC_PATH.search(text) and _other_nodes(nodes, rank_nodes, job_nodes):
            # No path and one writer: the job's other nodes wrote the same without it, so its own disk (round 14)
            return Judgement(ranks, nodes, True, True, f"; one writer on {nodes[0]} found its disk full while the "
                                                       "job's other nodes ran the same work")  # fmt: skip
        return Judgement(ranks, nodes, False, False, "; one writer filled it: the job's demand")
    if signature in HOST_OOM:
        if len(nodes) == 1 and _oom_is_global(nodes[0], hits) and _other_nodes(nodes, rank_nodes, job_nodes):
            why = f"; the kernel found all of {nodes[0]}'s memory used while the job's other nodes ran the same work"
            return Judgement(ranks, nodes, True, True, why)
        stamps = tuple(stamps)
        # An OOM kill ends the step: with no stamp of its own it came at about the job's last dated line (round 19)
        last = max([*stamps, *(h.time for h in hits if h.time is not None)], default=None)
        if _ran_long(when if when is not None else last, stamps):
            return Judgement(ranks, nodes, True, False, "; it came after the job ran over an hour, so a restart "
                                                        "makes progress")  # fmt: skip
        return Judgement(ranks, nodes, False, False, "; the job's own memory demand (its cgroup limit, or its only "
                                                     "node's memory), with no hour of run before it")  # fmt: skip
    return None


def shm_bus_errors(hits: Sequence[Hit], disks: Sequence[DiskRow]) -> list[Hit]:
    """A process gets SIGBUS when it touches a page of /dev/shm that cannot be backed. Where a `df` listing in the
    logs shows /dev/shm full, each bus error is the host's shared memory running out (a container's default of
    64 MB, round 30), not a crash of unknown cause: it becomes `shm_exhausted`."""
    if not any(d.mount == "/dev/shm" and d.full for d in disks):
        return list(hits)
    return [replace(h, signature="shm_exhausted", category=Category.HOST, role=Role.ROOT, restartable=False,
                    summary="a bus error with /dev/shm full: the host's shared memory ran out")
            if h.signature == "bus_error" or _bus_exit(h) else h for h in hits]  # fmt: skip


def _bus_exit(h: Hit) -> bool:
    """A launcher's report of a worker SIGBUS ended (`exits with return code = -7`; round 53a, DeepSpeed in docker)."""
    return h.signature in ("ds_launcher_exit", "elastic_child_failed") and h.fields.get("code") in ("-7", "135")


def killed_workers_ranks(hits: Sequence[Hit]) -> list[int]:
    """The ranks whose DataLoader worker the kernel's OOM killer killed: the killed pid is the one a rank reports
    (`DataLoader worker (pid 48215) is killed by signal: Killed.`), round 63a."""
    killed = {h.fields["pid"] for h in hits if h.signature == "linux_oom_kill" and h.fields.get("pid")}
    return sorted({h.rank for h in hits if h.rank is not None and h.fields.get("pid") in killed
                   and h.signature != "linux_oom_kill" and "DataLoader worker" in h.text})
