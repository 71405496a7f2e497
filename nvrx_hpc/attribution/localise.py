"""Where a failure happened, from every source at once: which node a file or line belongs to, which rank
a pid or a torchrun failure box names, which ranks the job has, one timeline for stamps without a year,
and which ranks a hang is waiting on.

Pure functions over hits (plus a little file reading in `prefix_ranks`); `analyze` applies them after
the scan and `verdict` asks `hang_suspects` when the evidence comes from the victims of a hang.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import NamedTuple

from nvrx_hpc.attribution.aliases import node_aliases, pod_nodes
from nvrx_hpc.attribution.api import Hit, Role
from nvrx_hpc.attribution.coll_ops import CollSample, sample_collectives
from nvrx_hpc.attribution.job_hosts import scheduler_hosts
from nvrx_hpc.attribution.launchers import ds_mapping, enrich, is_host, name_oom_victims, name_victims
from nvrx_hpc.attribution.lines import LEAD_STAMP, parse_time, ranks_of
from nvrx_hpc.attribution.peers import sample_addresses
from nvrx_hpc.attribution.rank_blocks import WORLD_KEYS, fill_blocks, launch_world
from nvrx_hpc.attribution.resources import DiskRow, file_host, sample_disks
from nvrx_hpc.slurm.hostlist import HostlistError, expand

__all__ = ["node_of_file", "traceback_ranks", "sample_file", "FileSample", "align_years", "enrich", "drop_recovered",
           "name_oom_victims", "name_victims", "rank_nodes", "known_ranks"]

_KERNEL_WORDS = ("journalctl", "journal", "dmesg", "syslog", "kern", "kernel", "messages", "slurmd")  # one node's logs
_EXTENSIONS = (".gz", ".log", ".txt", ".out", ".err")
_HOSTISH = re.compile(r"^[A-Za-z][\w.-]*$")
_LEAD = LEAD_STAMP.encode()  # a collector's stamp before the runner prefix (lines.LEAD_STAMP)
_PREFIX_RANKS = re.compile(rb"(?m)^(?:" + _LEAD + rb")?\s*(\d{1,6}): |^(?:" + _LEAD
                           + rb")?\[default(\d{1,6})\]:|^(?:" + _LEAD + rb")?\[\d+,(\d{1,6})\]<std")
# torch's `[rankN]:` anywhere in a line, apart: a literal start lets the regex engine skip ahead (6x faster)
_ANY_TORCH_RANK = re.compile(rb"\[rank(\d{1,6})\]:")
# A host and a rank on one line's prefixes: `w2: [rank6]:` (pdsh), `6: w2:311:320 [6] NCCL` (srun + NCCL).
_HOST_RANK = re.compile(rb"(?m)^([a-z][\w-]*[\d-][\w.-]*): \[rank(\d{1,6})\]:|"
                        rb"^(?:" + _LEAD + rb")?\s*(\d{1,6}): ([A-Za-z][\w.-]*):\d+:\d+ \[\d+\] NCCL")
# ESPnet2's logging prefix: `[gv041:0/4] 2020-09-05 20:04:10,347 (abs_task:1096) INFO: ...` (host, rank, world)
_HOST_RANK_OF_WORLD = re.compile(rb"(?m)^\[([A-Za-z][\w-]*[\d-][\w.-]*):(\d{1,6})/\d{1,6}\] ")
# A start-up banner that names a rank and its host, in either order (`[init] host=cn-g042 local_rank=3
# global_rank=11`, `rank=6 local_rank=2 host=cn-207`, `distributed init (rank 6): ..., host gpu-m22`);
# a node's or local rank (`node_rank=`, `local_rank=`) is not the rank. Each pattern starts with its
# literal word (fast to find); `_banner_hosts` checks what stands before it.
_BANNER_HOST = rb"[Hh]ost(?:name)?[ =:][ \t]*([A-Za-z][\w-]*[\d-][\w.-]*)"  # RETURNN: `Hostname h, pid 7, rank 3`
_BANNER_RANK = rb"(?:global_|world_)?rank[ =:][ \t]*(\d{1,6})\b"
_BANNERS = ((re.compile(rb"rank[ =:][ \t]*(\d{1,6})\b[^\n]{0,160}?(?<![\w-])" + _BANNER_HOST), 1, 2),
            (re.compile(_BANNER_HOST + rb"[^\n]{0,160}?(?<![\w-])" + _BANNER_RANK), 2, 1),
            # `rank 1/2 on kws-cnn-hvd-worker-1` (a Horovod script's own banner, round 84b); not a device (`cuda-3`)
            (re.compile(rb"rank[ =:]?[ \t]*(\d{1,6})(?:/\d{1,6})? on (?:host |node )?"
                        rb"(?!(?:cuda|xpu|npu|hpu|mps|device)[-:]?\d)([A-Za-z][\w-]*[\d-][\w.-]*)"), 1, 2))
# A per-node launcher's banner that names its host in the line's lead and the range of global ranks it
# runs (`[gx-203] torchrun node_rank=2: local ranks 0-3 -> global ranks 8-11`, `[nid001229] rank 0-3 up`,
# pdsh's `gx-203: ranks 8-11`); a local range is not the ranks.
# `[host] ` or `host: `, behind a log collector's stamp too (`2024-11-01T21:03:15.000Z [gpu-d12] NODE_RANK=3`)
_LEAD_HOST = (rb"(?m)^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z? )?"
              rb"(?:\[([A-Za-z][\w-]*[\d-][\w.-]*)\]|([a-z][\w-]*[\d-][\w.-]*):) ")
_RANGE_BANNER = re.compile(_LEAD_HOST + rb"[^\n]{0,160}?"
                           rb"(?<![\w-])(?<!local )(?:global )?ranks? (\d{1,6})-(\d{1,6})\b")
# the same as key=value pairs (`[launcher] task 3 host=gb-r10-n03 ranks=12-15`, round 37)
_KV_RANGE = re.compile(rb"(?<![\w-])host=([A-Za-z][\w-]*[\d-][\w.-]*)[ \t,]+(?:[\w]+=\S+[ \t,]+)?"
                       rb"(?:global_)?ranks=(\d{1,6})-(\d{1,6})\b")
# Ray Train's worker table: `(node_id=..., ip=10.0.1.22, pid=344408) world_rank=8, local_rank=0` (round 29)
_RAY_WORLD_RANK = re.compile(rb"\bip=((?:\d{1,3}\.){3}\d{1,3}), pid=\d+\) world_rank=(\d{1,6})\b")
# Determined's trial logs: a container's agent, then each rank's lines under its container's short id
_CONTAINER_AGENT = re.compile(rb"\(container ([0-9a-f]{8})[0-9a-f-]*\) on agent ([A-Za-z][\w.-]*)")
_CONTAINER_RANK = re.compile(rb"(?m)^\[[^\]\n]{8,40}\] ([0-9a-f]{8}) \[rank=(\d{1,6})\] \|\|")
# mpirun's `--display-map` table (`Data for node: n-31 ...`, then a `Process rank: 2` row per process) and
# `--report-bindings` lines (`[n-31:4410] MCW rank 2 bound to ...`, Open MPI 5: `[n-31:4410] Rank 2 bound`):
# with `--map-by node` the only rank -> host map a log may have (round 10).
_MPI_NODE = re.compile(rb"Data for node: ([A-Za-z][\w.-]*)")
_MPI_PROC = re.compile(rb"Process (?:OMPI )?jobid: \S+ App: \d+ Process rank: (\d{1,6})")
_MPI_MAP_END = re.compile(rb"\n\s*={8,}")
_MPI_BINDING = re.compile(rb"\[([A-Za-z][\w-]*[\d-][\w.-]*):\d+\] (?:MCW )?[Rr]ank (\d{1,6}) (?:bound|is not bound)")
# Open MPI's own `[host:pid]` lines (its signal handler, its errors) under mpirun's `[1,13]<stderr>:` prefix
_MPI_PREFIX_HOST = re.compile(rb"(?m)^\[\d+,(\d{1,6})\]<std(?:out|err)>:\[([A-Za-z][\w-]*[\d-][\w.-]*):\d+\] ")
# A line led by its host that gives the node's rank and processes per node (`[gpu-d12] NODE_RANK=3 ...
# NPROC_PER_NODE=8`, `gpu-j06: NODE_RANK=2 torchrun --nproc_per_node 8`): that host runs ranks 24-31 (round 12)
_HOST_LEAD = re.compile(_LEAD_HOST + rb"[^\n]*")
_NODE_RANK = re.compile(rb"(?:\bNODE_RANK=|--node[-_]rank[= ]|\bnode_rank=)(\d{1,5})\b")
_NPROC = re.compile(rb"(?:\bNPROC_PER_NODE=|--nproc[-_]per[-_]node[= ]|\bnproc_per_node=)(\d{1,4})\b")
_NOT_BANNER_HOSTS = re.compile(r"^(?:default|rank)\d+$")
_WORD_BEFORE = re.compile(rb"(?:global_|world_)?\Z")
# a job's nodelist: a hostlist (a bracket, or several names) after a word that says it is the job's nodes
_NODELIST = re.compile(rb"(?i)(?:(?<![a-z])node_?list|\bnodes|\brunning on|\ballocated|\bjob \d+ on)[=: ]+\s*"
                       rb"([a-z][\w-]*\[[\d,-]+\][\w-]*(?:,[a-z][\w-]*(?:\[[\d,-]+\])?[\w-]*)*|"
                       rb"[a-z][\w-]*\d(?:,[a-z][\w-]*\d)+)(?![\w\[-])")
# a job script's banner naming the one host it runs on (`Job 4412 on c004 started ...`, `Job 7 running on gpu-q12`,
# `Running on host: gpu-q12`), round 40
_JOB_ON_HOST = re.compile(rb"(?im)^(?:job \d+ (?:is )?(?:running )?on|running on(?: host)?:?) "
                          rb"([a-z][\w-]*\d[\w-]*)(?=[\s.,]|$)")
# the host of rank 0 or of torchrun's c10d store is one of the job's nodes (not an etcd rendezvous: its own host)
_MASTER_HOST = re.compile(rb"(?:\bMASTER_ADDR=|--master[-_]addr[= ]|--rdzv[-_]endpoint[= ])([a-z][\w-]*\d[\w-]*)"
                          rb"(?![\w.-])(?![^\n]*etcd)")
# mpirun's or horovodrun's host list (`-H gpu-c01:4,gpu-c02:4`, `--host a,b`; torchpack's `dist-run`, which runs
# mpirun with it, round 99h): the job ran on all of them
_MPI_HOSTS = re.compile(rb"(?m)(?:^|[\s;&|])(?:mpirun|horovodrun|torchpack dist-run)\b[^\n]*?\s(?:-H|--?host)\s+"
                        rb"([a-z][\w.-]*(?::\d+)?(?:,[a-z][\w.-]*(?::\d+)?)+)")
# mpirun fills each host's slots before the next unless told to go round the nodes (round 22)
_MPI_ROUND_ROBIN = re.compile(rb"(?:--?map-by\s+(?!slot|core|socket)|-bynode|--?npernode|-N\s|--?rankfile)")
_DATED = re.compile(rb"(?:19|20)\d\d-\d\d-\d\d[T ]\d\d:\d\d:\d\d")
_SAMPLE = 256 * 1024
_FLAG = re.compile(r"^(?:[A-Za-z]|iso|short|short-iso)$")  # dmesg -T, journalctl -k / -o short-iso
# which boot or which part of the log a name says it holds (`sparkpair-b_journal_prev_boot.txt`, round 94c)
_WHICH_PART = re.compile(r"^(?:prev(?:ious)?|last|current|this|boot|reboot|crash(?:ed)?|tail|head|full|before|after|"
                         r"excerpt|snippet)(?:[-.](?:prev(?:ious)?|last|boot|crash(?:ed)?))?$", re.IGNORECASE)


def _strip_words(name: str) -> str:
    """`gpu-n03.kern.log` -> `gpu-n03`, `dmesg-node017.txt` -> `node017`; "" when no kernel word is in it."""
    for ext in _EXTENSIONS:
        name = name.removesuffix(ext)
    strip = {*_KERNEL_WORDS, "k"}
    words: list[list[str]] = []  # per '_'-separated word (no host name holds '_'), its kept '.'-parts
    seen = False
    for word in name.split("_"):
        kept = []
        for token in word.split("."):  # '-' stays: host names hold it
            sub = token.split("-")
            here = False  # a kernel word in this token: a one-letter word beside it is its flag (`dmesg-T`)
            while sub and (sub[0].lower() in strip or (here and _FLAG.match(sub[0]))):
                here = here or sub[0].lower() in _KERNEL_WORDS
                seen = seen or sub[0].lower() != "k"
                sub.pop(0)
            while sub and sub[-1].lower() in strip:
                seen = seen or sub[-1].lower() != "k"
                sub.pop()
            if sub:
                kept.append("-".join(sub))
        if kept:
            words.append(kept)
    if not seen or not words:
        return ""
    # `hoth_dmesg_T.txt`: the flag may stand in a word of its own
    words = [w for w in words if not _FLAG.match(".".join(w)) and not _WHICH_PART.match(".".join(w))]
    if not words:
        return ""
    # `nvidia-smi_dmesg_gpu-n061.txt`: several words besides the kernel one; a host name has a digit
    numbered = [w for w in words if any(c.isdigit() for c in "".join(w))]
    return ".".join((numbered or words)[-1]) if len(words) > 1 else ".".join(words[0])


def node_of_file(path: Path, root: Path | None = None) -> str | None:
    """The host a kernel log belongs to, from its name (`gpu-n03.kern.log`, `dmesg-node017.txt`,
    `journalctl-k-dgx-17.txt`, `n2.dmesg`) or, for a bare `syslog`/`dmesg`, its directory (`a03/syslog`).
    None for files whose name says nothing about a kernel log."""
    name = path.name
    if not any(w in name.lower() for w in _KERNEL_WORDS):
        return None
    host = _strip_words(name)
    if not host and path.parent != root and path.parent.name:
        host = path.parent.name
    if host and _HOSTISH.match(host) and is_host(host) and host.lower() not in _KERNEL_WORDS:
        return host
    return None


class FileSample(NamedTuple):
    """What a file's sampled head and tail say (see `sample_file`)."""

    ranks: set[int]
    dated: list[float]
    hosts: dict[int, str]
    addresses: dict[str, str]
    disks: list[DiskRow]
    listed: frozenset[str] = frozenset()  # the job's nodes, from a nodelist the log prints (`_NODELIST`)
    aliases: Mapping[str, str] = MappingProxyType({})  # a node's host name or address -> its Slurm name (aliases.py)
    coll: CollSample = CollSample({}, [])  # NCCL's log of each collective call (coll_ops.py)
    pods: Mapping[str, str] = MappingProxyType({})  # a Kubernetes pod -> the node it ran on (aliases.py)


def sample_file(path: Path, sample: int = _SAMPLE) -> FileSample:
    """What the first and last `sample` bytes of a file say about the job, failure lines or not: the
    ranks named by line prefixes (`12: `, `[rank12]:`, `[default12]:`; a rank that prints nothing wrong
    still prints at start-up or at its end), a few dated stamps (to put yearless ones in their year), the
    hosts those prefixes and start-up banners pair with a rank, the hosts lines pair with an address
    (`peers`), and the rows of `df` listings (`resources`). mpirun's `--display-map` table and
    `--report-bindings` lines pair hosts with ranks too."""
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            head = f.read(sample)
            tail = b""
            if size > 2 * sample:
                f.seek(size - sample)
                tail = f.read(sample)
    except OSError:
        return FileSample(set(), [], {}, {}, [])
    found, dated, hosts, addresses, disks = set(), [], {}, {}, []
    for data in (head, tail):
        if b"Mounted on" in data:
            disks.extend(sample_disks(data, file_host(path.name)))
        for addr, host in sample_addresses(data).items():
            addresses.setdefault(addr, host)
        for m in _HOST_RANK.finditer(data):
            host, rank = (m.group(1), m.group(2)) if m.group(1) else (m.group(4), m.group(3))
            hosts.setdefault(int(rank), host.decode())
        for m in _HOST_RANK_OF_WORLD.finditer(data):
            hosts.setdefault(int(m.group(2)), m.group(1).decode())
        for r, host in _banner_hosts(data):
            hosts.setdefault(r, host)
        for r, host in _range_hosts(data):
            hosts.setdefault(r, host)
        for r, host in [*_mpi_hosts(data), *_mpi_slot_hosts(data)]:
            hosts.setdefault(r, host)
        for m in _MPI_PREFIX_HOST.finditer(data):
            hosts.setdefault(int(m.group(1)), m.group(2).decode())
        for r, host in [*_node_rank_hosts(data), *_container_hosts(data)]:
            hosts.setdefault(r, host)
        for m in _RAY_WORLD_RANK.finditer(data):  # at an address this file pairs with a host (`Local node IP`), or
            # at the address itself, Ray's node name when it names its nodes by address (round 40)
            address = m.group(1).decode()
            hosts.setdefault(int(m.group(2)), addresses.get(address, address))
        for m in _PREFIX_RANKS.finditer(data):
            found.add(int(next(g for g in m.groups() if g is not None)))
        found.update(int(m.group(1)) for m in _ANY_TORCH_RANK.finditer(data))
        for m in _DATED.finditer(data[:65536]):
            t = parse_time(m.group().decode())
            if t is not None:
                dated.append(t)
            if len(dated) >= 8:
                break
    listed = frozenset(_listed_nodes(head))
    master = _rank0_host(head, listed)
    if master is not None:
        hosts.setdefault(0, master)
    coll = sample_collectives(head + b"\n" + tail)
    return FileSample(found, dated, hosts, addresses, disks, listed, node_aliases(head), coll, pod_nodes(head))


# torch's env:// rendezvous (and torchrun's static one) takes MASTER_ADDR as rank 0's host (round 42); a c10d
# rendezvous endpoint may be any host, so it does not count
_RANK0_HOST = re.compile(rb"(?:\bMASTER_ADDR=|--master[-_]addr[= ])([a-z][\w-]*\d[\w-]*)(?![\w.-])")
_INTERFACE_SUFFIXES = ("i", "ib", "-ib", "-ib0", "-hsn", "-hsn0")  # a node's fabric name (`jwb0012i`, `nid001-hsn0`)


def _rank0_host(data: bytes, listed: frozenset[str]) -> str | None:
    """The host of rank 0 that the one MASTER_ADDR (or `--master_addr`) of `data` names, as the job's nodelist spells
    it when that address is a node's fabric interface name; None when `data` names none or several."""
    named = {m.group(1).decode() for m in _RANK0_HOST.finditer(data[:65536])}
    if len(named) != 1:
        return None
    host = named.pop()
    base = [n for n in listed if host != n and host.startswith(n) and host[len(n):] in _INTERFACE_SUFFIXES]
    return base[0] if len(base) == 1 else host


def _listed_nodes(data: bytes) -> set[str]:
    """The hosts of a job's nodelist as a script or launcher prints it (`SLURM_JOB_NODELIST=gpu-f[01-04]`,
    `Running on gpu-f[01-04]`, `nodes: gpu-k[01-02]`, `NodeList=n[1-2]`): the job ran on all of them. Also
    the host `MASTER_ADDR=`, `--master_addr` or a c10d `--rdzv_endpoint` names (round 14), and mpirun's `-H`
    hosts (round 18)."""
    found: set[str] = set()
    for m in _NODELIST.finditer(data[:65536]):
        try:
            found.update(expand(m.group(1).decode()))
        except (HostlistError, UnicodeDecodeError):
            continue
    found.update(m.group(1).decode() for m in _MASTER_HOST.finditer(data[:65536]))
    found.update(m.group(1).decode() for m in _JOB_ON_HOST.finditer(data[:65536]))
    for m in _MPI_HOSTS.finditer(data[:65536]):
        found.update(host.split(":")[0] for host in m.group(1).decode().split(","))
    return found | scheduler_hosts(data[:65536])


def _node_rank_hosts(data: bytes) -> list[tuple[int, str]]:
    """(rank, host) of lines led by a host that name its node rank and processes per node (`_HOST_LEAD`)."""
    found: list[tuple[int, str]] = []
    if b"ODE_RANK=" not in data and b"node_rank" not in data and b"node-rank" not in data:
        return found
    for m in _HOST_LEAD.finditer(data):
        node, nproc = _NODE_RANK.search(m.group()), _NPROC.search(m.group())
        if node and nproc and 0 < int(nproc.group(1)) <= 1024:
            base, count = int(node.group(1)) * int(nproc.group(1)), int(nproc.group(1))
            found.extend((r, (m.group(1) or m.group(2)).decode()) for r in range(base, base + count))
    return found


def _banner_hosts(data: bytes) -> list[tuple[int, str]]:
    """(rank, host) of the start-up banners in `data` (see `_BANNERS`)."""
    found: list[tuple[int, str]] = []
    if b"host" not in data and b"Host" not in data and b" on " not in data:
        return found
    for pattern, r, h in _BANNERS:
        pos = 0
        while (m := pattern.search(data, pos)) is not None:
            at = m.start()
            if pattern is _BANNERS[0][0]:  # `rank` stands alone or as `global_rank`, `world_rank`
                at = _WORD_BEFORE.search(data, max(0, at - 7), at).start()
            host = m.group(h).decode().rstrip(".")
            if (at == 0 or not (data[at - 1 : at].isalnum() or data[at - 1 : at] in b"_-")) and is_host(host):
                found.append((int(m.group(r)), host))
                pos = m.end()
            else:
                pos = m.start() + 1
    return found


def _range_hosts(data: bytes) -> list[tuple[int, str]]:
    """(rank, host) of per-node banners that map a host to a range of global ranks (see `_RANGE_BANNER`)."""
    found: list[tuple[int, str]] = []
    if b"rank" not in data:
        return found
    for m in _RANGE_BANNER.finditer(data):
        host = (m.group(1) or m.group(2)).decode().rstrip(".")
        lo, hi = int(m.group(3)), int(m.group(4))
        if not _NOT_BANNER_HOSTS.match(host) and is_host(host) and 0 <= hi - lo <= 1024:
            found += [(r, host) for r in range(lo, hi + 1)]
    for m in _KV_RANGE.finditer(data) if b"ranks=" in data else ():
        lo, hi = int(m.group(2)), int(m.group(3))
        if 0 <= hi - lo <= 1024:
            found += [(r, m.group(1).decode().rstrip(".")) for r in range(lo, hi + 1)]
    return found


def _mpi_slot_hosts(data: bytes) -> list[tuple[int, str]]:
    """(rank, host) from mpirun's `-H cn-s01:4,cn-s02:4,...` when every host gives its slots and nothing maps
    by node: Open MPI fills the hosts in order, ranks 0-3 on the first, 4-7 on the second."""
    found: list[tuple[int, str]] = []
    for m in _MPI_HOSTS.finditer(data[:65536]):
        line_end = data.find(b"\n", m.end())
        if _MPI_ROUND_ROBIN.search(data, m.start(), line_end if line_end >= 0 else len(data)):
            continue
        slots = [entry.partition(":") for entry in m.group(1).decode().split(",")]
        if all(n.isdigit() and 0 < int(n) <= 1024 for _h, _c, n in slots):
            base = 0
            for host, _c, n in slots:
                found.extend((r, host) for r in range(base, base + int(n)))
                base += int(n)
    return found


def _container_hosts(data: bytes) -> list[tuple[int, str]]:
    """Determined's trial logs: `New trial runner in (container 3f9a71c2-...) on agent gpu-worker-03` names each
    container's agent (its node), and every rank's line leads with its container's short id (`[ts] 3f9a71c2
    [rank=5] || ...`), round 28."""
    agents = {m.group(1): m.group(2).decode() for m in _CONTAINER_AGENT.finditer(data)}
    if not agents:
        return []
    return [(int(m.group(2)), agents[m.group(1)]) for m in _CONTAINER_RANK.finditer(data) if m.group(1) in agents]


def _mpi_hosts(data: bytes) -> list[tuple[int, str]]:
    """(rank, host) of mpirun's `--display-map` table and `--report-bindings` lines (see `_MPI_NODE`)."""
    found: list[tuple[int, str]] = []
    if b"Data for node: " in data:
        nodes = list(_MPI_NODE.finditer(data))
        for i, m in enumerate(nodes):
            stop = nodes[i + 1].start() if i + 1 < len(nodes) else len(data)
            end = _MPI_MAP_END.search(data, m.end(), stop)
            host = m.group(1).decode()
            if is_host(host):
                found += [(int(r), host) for r in _MPI_PROC.findall(data, m.end(), end.start() if end else stop)]
    if b"ank " in data and b"bound" in data:
        found += [(int(r), host.decode()) for host, r in _MPI_BINDING.findall(data)]
    return found


def align_years(hits: Sequence[Hit], anchors: Iterable[float]) -> list[Hit]:
    """Move stamps that carry no year (syslog, journal short, glog) to the year that puts them nearest
    the job's dated stamps (ISO lines, `dmesg -T`, events, failure records)."""
    dated = sorted([h.time for h in hits if h.clock == "iso" and h.time is not None] + list(anchors))
    if not dated:
        return list(hits)
    ref = dated[len(dated) // 2]
    ref_year = datetime.fromtimestamp(ref).year
    out = []
    for h in hits:
        if h.clock == "noyear" and h.time is not None:
            when = datetime.fromtimestamp(h.time)
            best = h.time
            for year in (ref_year - 1, ref_year, ref_year + 1):
                try:
                    t = when.replace(year=year).timestamp()
                except ValueError:  # 29 February
                    continue
                if abs(t - ref) < abs(best - ref):
                    best = t
            h = dataclasses.replace(h, time=best)
        out.append(h)
    return out


def traceback_ranks(hits: Sequence[Hit], reach: int = 60, headers: tuple[str, ...] = ("traceback_start",)) -> list[Hit]:
    """A traceback's header names its rank (`[rank: 3] Traceback ...`), its lines often do not: an error
    line with no rank takes the rank of the nearest `Traceback` header above it in the same file (within
    `reach` lines). Ray's `RayTaskError(...): ray::f() (pid=N, ...)` is such a header once its pid has a
    rank (`headers=("ray_task_error",)` after `enrich`). A header's rank that is torchrun's local one
    (`tee_local`) goes with that mark, for `enrich` to make global."""
    last: dict[str, tuple[int, int | None, str | None]] = {}
    out = list(hits)
    for i in sorted(range(len(out)), key=lambda i: (out[i].source, out[i].line)):
        h = out[i]
        if h.signature in headers:
            last[h.source] = (h.line, h.rank, h.fields.get("tee_local"))
        elif h.rank is None and h.source in last:
            line, rank, tee = last[h.source]
            if rank is not None and 0 < h.line - line <= reach:
                fields = h.fields if tee is None else {**h.fields, "tee_local": tee}
                out[i] = dataclasses.replace(h, rank=rank, fields=fields)
    return out


def drop_recovered(hits: Sequence[Hit]) -> list[Hit]:
    """A stall the kernel later reports over (`nfs: server X not responding`, then `nfs: server X OK` in
    the same log; an mlx5 device's `health compromised`, then `health recovered`) was transient: it stays
    on the timeline as context, never as the root cause."""
    ends = ("nfs_recovered", "nic_recovered")  # an NFS server answering again, a NIC's health poll recovering
    recovered = {(h.source, h.fields.get("server") or h.fields.get("device")): h.order for h in hits
                 if h.signature in ends}  # fmt: skip
    out = []
    for h in hits:
        server = h.fields.get("server") or h.fields.get("device")
        back = recovered.get((h.source, server)) if server and h.signature not in ends else None
        if back is not None and back > h.order:
            h = dataclasses.replace(h, role=Role.CONTEXT)
        out.append(h)
    return out


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


def rank_nodes(hits: Iterable[Hit], others: Iterable = ()) -> dict[int, str]:
    """rank -> node from every hit and record/event that names both, `srun: error: host: tasks 4-5` and
    DeepSpeed's `global_rank_mapping=`."""
    nodes: dict[int, str] = {}
    for item in others:
        if item.rank is not None and item.node and item.rank not in nodes:
            nodes[item.rank] = item.node
    hits = list(hits)
    launched = max(map(launch_world, hits), default=0)
    for h in hits:
        if not h.node or h.signature == "nccl_comm_init" and int(h.fields.get("world") or 0) < launched:
            continue  # a tensor-parallel group's communicator: its rank is not the global one (round 91e)
        if h.rank is not None:
            nodes.setdefault(h.rank, h.node)
        tasks = h.fields.get("tasks")
        if tasks and not tasks.isdigit():
            for r in ranks_of(tasks):
                nodes.setdefault(r, h.node)
        if h.signature == "torchrun_cmd" and h.fields.get("node_rank"):  # one node's launcher: its ranks (round 35)
            node_rank, nproc = int(h.fields["node_rank"]), int(h.fields["nproc"])
            for r in range(node_rank * nproc, (node_rank + 1) * nproc):
                nodes.setdefault(r, h.node)
    for host, ranks in ds_mapping(hits).items():  # DeepSpeed's `global_rank_mapping=` (round 14); not `localhost`
        for r in ranks if is_host(host) else ():
            nodes.setdefault(r, host)
    return fill_blocks(nodes, hits)


def ready_ranks(hits: Iterable[Hit]) -> set[int]:
    """The ranks a Horovod stall warning lists as ready: they submitted the tensors, the others did not."""
    return {int(r) for h in hits if h.fields.get("ready") for r in h.fields["ready"].split(", ")}


def known_ranks(hits: Iterable[Hit], others: Iterable[int] = ()) -> set[int]:
    """Every rank the job is known to have: named anywhere, in srun task lists, Horovod's ready lists, the
    world size, and every rank below the highest one named (ranks are 0..N-1)."""
    hits = list(hits)
    ranks = {r for r in others if r is not None} | ready_ranks(hits)
    world = 0
    for h in hits:
        if h.rank is not None:
            ranks.add(h.rank)
        tasks = h.fields.get("tasks")
        if tasks:
            ranks.update(ranks_of(tasks))
        for key in WORLD_KEYS:
            if h.fields.get(key, "").isdigit():
                world = max(world, int(h.fields[key]))
        world = max(world, launch_world(h))
    top = max(ranks, default=-1) + 1
    size = max(world, top)
    return set(range(size)) if size <= 100_000 else ranks
