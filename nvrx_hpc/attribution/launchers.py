"""What the launchers say about ranks, and the ranks of the processes the kernel names by pid.

torchrun prints a failure box per failed rank (`time :`, `host :`, `rank : G (local_rank: L)`,
`exitcode : C (pid: P)`) and tags each worker line with its *local* rank (`[default5]:`); its own
`failed (exitcode: C) local_rank: L (pid: P)` line names a local rank too. DeepSpeed's launcher prints
which global ranks each host runs (`global_rank_mapping=...`) and, per host, which local process exited
(`['--local_rank=3', ...] exits with return code = -11`). NCCL's `host:pid:tid` prefix and its
`comm ... rank G nranks W` line tie a pid to a global rank, and so does a `ps` listing (a worker's
`--local-rank=L` under its torchrun's `--node_rank R --nproc_per_node P`). From these, `enrich` gives every hit the
global rank and host the other lines say, and `name_victims` gives a kernel line that names only a pid
(an OOM kill, a task blocked in the kernel, a segfault) the one rank a launcher saw die that way on
that host. Pure functions over hits.
"""

from __future__ import annotations

import dataclasses
import re
from collections import defaultdict
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit, Role
from nvrx_hpc.attribution.lines import parse_time, ranks_of, srun_label
from nvrx_hpc.attribution.local_ranks import file_local_maps, label_local_maps, label_node_ranks
from nvrx_hpc.attribution.rank_blocks import launch_world
from nvrx_hpc.attribution.signatures import NODE_LOST_SIGNATURES

__all__ = ["exception_before_exit", "enrich", "name_victims", "name_oom_victims", "ds_mapping", "NOT_HOSTS", "is_host"]

NOT_HOSTS = {"localhost", "127.0.0.1", "k", "log", "all"}
_CONTAINER_ID = re.compile(r"^[0-9a-f]{12}$")  # docker's default hostname in a container: not a node (round 27)
_IPV4 = re.compile(r"^\d{1,3}(?:\.\d{1,3}){3}$")
_DATED = re.compile(r"(?:19|20)\d\d-[01]\d-[0-3]\d")  # a run's stamp in a file name (`log-train-2021-04-11-21-04`)
_MAPPING_ITEM = re.compile(r"'([^']+)': \[([\d, ]*)\]")
_CRASH_CODES = {"-11", "-7", "-4", "139", "135", "132"}  # SIGSEGV, SIGBUS, SIGILL (negative or 128+N)
# A report of a lost node (`srun: error: Node failure on n2`) is about a node, not a box's rank (round 40).
_NODE_LINES = NODE_LOST_SIGNATURES | {"slurm_node_not_responding"}
_SRUN_TORCHRUN = re.compile(r"\bsrun\b[^\n]*\b(?:torchrun|torch\.distributed\.(?:run|launch))\b")
_CRASH_WORDS = ("Segmentation fault", "Bus error")
_NNODES = re.compile(r"--nnodes[= ](\d+)")  # a launch over several nodes: a local rank is not a global one
_TASK_ENDS = ("srun_task_exit", "slurm_oom_kill")  # srun's `host: task N: <how it ended>` lines


def _several_nodes(text: str) -> bool:
    m = _NNODES.search(text)
    return m is not None and int(m.group(1)) > 1


def is_host(name: str | None) -> bool:
    """Whether a name a line gives as a host can be a node's."""
    if not name:
        return False
    return name.lower() not in NOT_HOSTS and not _CONTAINER_ID.match(name) and not _DATED.search(name)


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.lstrip("-").isdigit() else None


def _pid(h: Hit) -> str | None:
    return h.fields.get("pid") or h.fields.get("pid2")


@dataclasses.dataclass
class _Box:
    """One entry of torchrun's failure box, keyed by the line of its `rank :`."""

    rank: int
    local: int | None
    host: str | None = None
    time: float | None = None
    pid: str | None = None
    label: str | None = None  # srun's label of the box's lines: the node's launcher, in a job-wide log



def _boxes(hits: Sequence[Hit]) -> dict[tuple[str, int], _Box]:
    """(source, line of `rank :`) -> the box entry; `time :` is two lines above, `host :` one above,
    `exitcode : C (pid: P)` one below."""
    by_line = {(h.source, h.line): h for h in hits if h.signature.startswith("elastic_box_")}
    out: dict[tuple[str, int], _Box] = {}
    for (source, line), h in by_line.items():
        if h.signature != "elastic_box_rank" or h.rank is None:
            continue
        box = _Box(h.rank, _int(h.fields.get("local_rank")), label=srun_label(h))
        host = by_line.get((source, line - 1))
        if host is not None and host.signature == "elastic_box_host" and host.node:
            box.host = host.node if is_host(host.node) else None
        when = by_line.get((source, line - 2))
        if when is not None and when.signature == "elastic_box_time":
            box.time = parse_time(when.fields.get("at", "").replace("_", " "))
        done = by_line.get((source, line + 1))
        if done is not None and done.signature == "elastic_box_exit":
            box.pid = done.fields.get("pid")
        out[(source, line)] = box
    return out


def ds_mapping(hits: Sequence[Hit]) -> dict[str, list[int]]:
    """host -> its global ranks in order, from DeepSpeed's `global_rank_mapping=` line, else its `WORLD INFO DICT`
    (each host's devices in turn: the first host's are ranks 0.., the next host's follow)."""
    for h in hits:
        if h.signature == "ds_rank_mapping":
            found = {host: [int(r) for r in ranks.replace(" ", "").split(",") if r]
                     for host, ranks in _MAPPING_ITEM.findall(h.fields.get("mapping", ""))}  # fmt: skip
            if found:
                return found
    for h in hits:
        if h.signature == "ds_world_info":
            found, first = {}, 0
            for host, devices in _MAPPING_ITEM.findall(h.fields.get("world", "")):
                count = len([d for d in devices.split(",") if d.strip()])
                found[host], first = list(range(first, first + count)), first + count
            if found:
                return found
    return {}


def _ps_ranks(hits: Sequence[Hit]) -> dict[str, int]:
    """pid -> global rank from a `ps` listing: a worker's `--local-rank=L` under its parent torchrun's
    `--node_rank R --nproc_per_node P` is rank R*P+L."""
    nodes = {h.fields["lpid"]: (int(h.fields["node_rank"]), int(h.fields["nproc"]))
             for h in hits if h.signature == "ps_launcher"}  # fmt: skip
    out: dict[str, int] = {}
    for h in hits:
        if h.signature == "ps_worker" and h.fields.get("ppid") in nodes:
            node_rank, nproc = nodes[h.fields["ppid"]]
            out[h.fields["wpid"]] = node_rank * nproc + int(h.fields["wlocal"])
    return out


def _ds_child_ranks(hits: Sequence[Hit]) -> dict[str, int]:
    """pid -> global rank from DeepSpeed's `Killing subprocess P` lines: its launcher lists its children in the
    order it started them, local rank 0 first, so the k-th pid of a host is that host's k-th rank in
    `global_rank_mapping=` (round 23: a kernel segfault of pid 52211, the host's second child)."""
    mapping = ds_mapping(hits)
    children: dict[str, list[int]] = defaultdict(list)
    kills = [h for h in hits if h.signature == "ds_kill_subprocess" and h.node]
    for h in sorted(kills, key=lambda h: (h.source, h.line)):
        if int(h.fields["kpid"]) not in children[h.node]:
            children[h.node].append(int(h.fields["kpid"]))
    # pids given out in the order of the list: anything else is not a launcher's own listing
    out = {str(pid): mapping[node][k] for node, pids in children.items() if node in mapping
           and len(pids) == len(mapping[node]) and pids == sorted(pids) for k, pid in enumerate(pids)}  # fmt: skip
    for h in hits:  # `process P spawned with command: [... '--local_rank=L' ...]` on a host of the mapping
        local = int(h.fields.get("local_rank", -1)) if h.signature == "ds_spawned" else -1
        if h.node in mapping and 0 <= local < len(mapping[h.node]):
            out.setdefault(h.fields["pid"], mapping[h.node][local])
    return out


def _short_host(name: str) -> str:
    return name if _IPV4.match(name) else name.split(".")[0]


def _pid_hosts(hits: Sequence[Hit], boxes: dict[tuple[str, int], _Box]) -> dict[str, set[str]]:
    """pid -> the hosts torchrun's failure boxes give it (`host :` above `exitcode : 1 (pid: 421)`): a pid another
    host's line prints is another process there (pods number their processes alike, round 94e: worker-0's pid 421 is
    not master-0's rank 3). A line's own host is not the pid's: Ray's driver lists every worker's pid (round 14b)."""
    hosts: dict[str, set[str]] = defaultdict(set)
    for box in boxes.values():
        if box.pid and box.host:
            hosts[box.pid].add(_short_host(box.host))
    return hosts


def _pid_ranks(hits: Sequence[Hit], boxes: dict[tuple[str, int], _Box], local_ok: bool = True) -> dict[str, int]:
    """pid (or "host:pid") -> global rank. Global sources first (torchrun's box, a line that carries both a pid and its
    global rank, NCCL's world communicator); a local rank (`local_rank: 3 (pid: 2231)`) only for a pid
    no global source names, and not when srun started one launcher per node (several nodes: a local
    rank is not the rank)."""
    world = max((int(h.fields["world"]) for h in hits if h.signature == "nccl_comm_init"
                 and h.fields.get("world", "").isdigit()), default=0)  # fmt: skip
    # a job whose every NCCL line is a tensor-parallel group's: torchrun's command gives the world (round 91e)
    world = max((world, *map(launch_world, hits)))
    sure: dict[str, int] = {}
    local: dict[str, int] = {}
    on_host: dict[str, int] = {}  # "host:pid" -> global rank, where the line that pairs them names its host too
    for box in boxes.values():
        if box.pid:
            sure.setdefault(box.pid, box.rank)
    sure.update(_ps_ranks(hits))
    sure.update(_ds_child_ranks(hits))
    for h in hits:
        pid = _pid(h)
        if not pid:
            continue
        if h.signature == "nccl_comm_init" and h.fields.get("world") != str(world):
            continue  # a sub-communicator: its rank is not the global one
        if h.rank is not None and "tee_local" not in h.fields:
            sure.setdefault(pid, h.rank)
            if h.node:
                on_host.setdefault(f"{h.node}:{pid}", h.rank)
        elif local_ok and (h.rank is not None or h.fields.get("local_rank", "").isdigit()):
            local.setdefault(pid, h.rank if h.rank is not None else int(h.fields["local_rank"]))
    # one pid on two hosts (containers number their processes alike): only the host's own pair says which rank
    hosts_of: dict[str, set[str]] = defaultdict(set)
    for key in on_host:
        host, pid = key.rsplit(":", 1)
        hosts_of[pid].add(host)
    shared = {pid for pid, hosts in hosts_of.items() if len(hosts) >= 2}
    return {**{pid: rank for pid, rank in {**local, **sure}.items() if pid not in shared},
            **{key: rank for key, rank in on_host.items() if key.rsplit(":", 1)[1] in shared}}


# Ray Train's workers print under Ray's actor prefix: srun's tasks started Ray's nodes, Ray placed the ranks.
_RAY_TRAIN = re.compile(r"^\((?:RayTrainWorker|TorchTrainer) pid=\d+")


def _one_task_a_node(hits: Sequence[Hit]) -> bool:
    """srun's tasks 0..n-1 ended one on each of n hosts (`Terminated`, `Out Of Memory`, ...) while torch names
    at least twice as many ranks as tasks: each task was a node's launcher (round 20: `torchrun x4, nproc 8`,
    tasks 0-3, ranks up to 31)."""
    task_hosts: dict[int, set[str]] = defaultdict(set)
    for h in hits:
        if h.signature in _TASK_ENDS and h.node and h.fields.get("tasks", "").isdigit():
            task_hosts[int(h.fields["tasks"])].add(h.node)
    n = len(task_hosts)
    if n < 2 or set(task_hosts) != set(range(n)) or any(len(hosts) != 1 for hosts in task_hosts.values()):
        return False
    if len({next(iter(hosts)) for hosts in task_hosts.values()}) != n:
        return False
    torch_ranks = [h.rank for h in hits if h.rank is not None and h.signature not in _TASK_ENDS and (
                   "spawn_rank" in h.fields or "srun_label" not in h.fields and "task_label" not in h.fields)]
    return bool(torch_ranks) and max(torch_ranks) + 1 >= 2 * n


def _ranks_beyond_labels(hits: Sequence[Hit]) -> bool:
    """Lines under srun's labels name, in their own text, two or more ranks beyond every label (`3: [E
    ProcessGroupNCCL.cpp:475] [Rank 24] Watchdog ...`, older torch with no `[rankN]:` prefix): the labels count
    the nodes' launchers, not the ranks (round 77c)."""
    labels = {int(h.fields["srun_label"]) for h in hits if h.fields.get("srun_label", "").isdigit()}
    beyond = {int(h.fields["own_rank"]) for h in hits if "srun_label" in h.fields
              and h.fields.get("own_rank", "").isdigit() and int(h.fields["own_rank"]) > max(labels, default=0)}
    return len(beyond) >= 2


def _rdzv_ranks_under_label(hits: Sequence[Hit]) -> bool:
    """torchrun's rendezvous result under an srun label lists several global ranks (`1:   global_ranks=[8, ..., 15]`):
    that label is a node's launcher, not a rank (round 106a)."""
    return any(h.signature == "elastic_rdzv_ranks" and h.fields.get("srun_label") is not None
               and len(ranks_of(h.fields.get("globals", "").replace(" ", ""))) >= 2 for h in hits)


def _box_under_other_label(hits: Sequence[Hit]) -> bool:
    """torchrun's failure box, printed under srun's label L, names a global rank other than L: the label counts the
    node's torchrun, not its ranks (round 101b: `2:   rank : 9 (local_rank: 1)`)."""
    return any(h.signature == "elastic_box_rank" and h.rank is not None
               and h.fields.get("srun_label") not in (None, str(h.rank)) for h in hits)


def _ds_per_node(hits: Sequence[Hit]) -> bool:
    """srun reported tasks of a job whose DeepSpeed launcher printed its `global_rank_mapping=`: that mapping is
    printed by `deepspeed.launcher.launch`, one per node, so srun's tasks were those launchers (round 21)."""
    return any(h.signature == "ds_rank_mapping" for h in hits) and any(
        h.signature in _TASK_ENDS and "tasks" in h.fields for h in hits)


def _launcher_tasks(hits: Sequence[Hit]) -> tuple[list[Hit], bool]:
    """When srun started one launcher per node (a line's srun label differs from torch's own `[rankN]:`
    beside it: `2: [rank21]:`), srun's task numbers are the launchers, not ranks: a line that only srun
    labels names no rank, `srun: error: host: task 2` names the host of task 2, and the ranks torch
    prints under label 2 run on that host. A command line that runs torchrun under srun (`srun -N2
    torchrun ...`) says so too (round 13). Returns the hits so corrected, and whether srun started
    launchers."""
    if not any("task_label" in h.fields and h.fields["task_label"] != str(h.rank) for h in hits) and not any(
            h.signature == "hf_process_rank" and h.fields.get("own_rank", h.fields.get("srun_label"))
            != h.fields.get("srun_label") for h in hits) and not any(
            h.signature == "torchrun_cmd" and _SRUN_TORCHRUN.search(h.text) or _RAY_TRAIN.match(h.text)
            or h.signature == "srun_node_rank_launch" for h in hits
    ) and not _one_task_a_node(hits) and not _ds_per_node(hits) and not _ranks_beyond_labels(hits) \
            and not _box_under_other_label(hits) and not _rdzv_ranks_under_label(hits):
        return list(hits), False
    task_host: dict[str, str] = {}
    for h in hits:
        tasks = h.fields.get("tasks", "")
        if h.signature == "srun_task_exit" and h.node:
            for t in ranks_of(tasks):
                task_host.setdefault(str(t), h.node)
    out = []
    for h in hits:
        rank, node, fields = h.rank, h.node, h.fields
        label = srun_label(h)
        if "srun_label" in fields and rank is not None and str(rank) == fields["srun_label"]:
            rank = int(fields["own_rank"]) if "own_rank" in fields else None
        if rank is not None and str(rank) == fields.get("cgroup_task"):
            rank = None  # the cgroup's task is srun's, a launcher: the killed process's rank is not in its path
        if "tasks" in fields:
            fields = {k: v for k, v in fields.items() if k != "tasks"} | {"launcher_tasks": fields["tasks"]}
            rank = None if h.rank is not None and fields["launcher_tasks"] == str(h.rank) else rank
        node = node or (task_host.get(label) if label else None)
        if (rank, node, fields) != (h.rank, h.node, h.fields):
            h = dataclasses.replace(h, rank=rank, node=node, fields=fields)
        out.append(h)
    return out, True


def _first_failure_below(h: Hit, boxes: dict[tuple[str, int], _Box]) -> tuple[int | None, str | None]:
    """A cause that names no rank nor host, printed above torchrun's box for the job's first failure (the
    earliest `time :` of the file's boxes, one rank): that rank and host (round 14: a rich traceback's ECC
    error, the other node's boxes its teardown)."""
    timed = [(line, box) for (source, line), box in boxes.items() if source == h.source and box.time is not None]
    if len(timed) < 2:
        return None, None
    first = min(box.time for _, box in timed)
    earliest = [(line, box) for line, box in timed if box.time == first]
    below = [line for line, _ in timed if line > h.line]
    if len(earliest) != 1 or not below or earliest[0][0] != min(below):
        return None, None
    return earliest[0][1].rank, earliest[0][1].host


def enrich(hits: Sequence[Hit]) -> list[Hit]:
    """Give hits the global rank, host and failure time that other lines say: a pid named with its rank
    elsewhere, torchrun's failure box (its host, time and pid for its rank; its local rank for the lines
    `[defaultL]:` tags in the same file), DeepSpeed's rank mapping for its launcher's exit lines, and, in
    a file whose box names one failed rank, that rank for the file's lines that name none."""
    hits, launchers = _launcher_tasks(hits)
    boxes = _boxes(hits)
    pid_rank = _pid_ranks(hits, boxes, local_ok=not launchers)
    pid_hosts = _pid_hosts(hits, boxes)
    mapping = ds_mapping(hits)
    in_box: dict[tuple[str, str | None], set[int]] = defaultdict(set)
    # a local rank is one node's: under srun's labels each node's processes count from 0 again (round 76a)
    local_global: dict[tuple[str, str | None, int], set[int]] = defaultdict(set)
    exits: dict[tuple[str, int], _Box] = {}
    for (source, line), box in boxes.items():
        in_box[(source, box.label)].add(box.rank)
        if box.local is not None:
            local_global[(source, box.label, box.local)].add(box.rank)
        exits[(source, line + 1)] = box
    file_maps = file_local_maps(hits)
    label_maps = label_local_maps(hits) if launchers else {}
    per_node = label_node_ranks(hits) if launchers else {}
    one_box = len({h.node for h in hits if h.node}) <= 1 and not any(
        srun_label(h) is not None or _several_nodes(h.text) for h in hits)
    out = []
    for h in hits:
        rank, node, when = h.rank, h.node, h.time
        if node and not is_host(node):
            node = None
        tee = _int(h.fields.get("tee_local"))
        label = srun_label(h)
        mapped = local_global.get((h.source, label, tee), set()) if label is not None else {
            r for (source, _label, local), ranks in local_global.items() if (source, local) == (h.source, tee)
            for r in ranks}  # a line without srun's label: whichever node's box names that local rank
        if tee is not None and len(mapped) == 1:
            rank = next(iter(mapped))  # torchrun's local rank -> its box's global one
        elif tee is not None and tee in file_maps.get(h.source, {}):
            rank = file_maps[h.source][tee]  # ... or the one its file's rendezvous or command line gives
        if h.signature == "ds_launcher_exit" and node in mapping:
            local = _int(h.fields.get("local_rank"))
            ranks = mapping[node]
            # DeepSpeed prints the command of the last process it started, whichever child failed: its node's
            # last local rank says only "a rank of this node" (round 23). An earlier one was the one that ended.
            rank = ranks[local] if local is not None and 0 <= local < len(ranks) - 1 else rank
        elif h.signature == "ds_launcher_exit" and rank is None and _int(h.fields.get("local_rank")) is not None:
            rank = file_maps.get(h.source, {}).get(_int(h.fields.get("local_rank")))  # the file's launch command
            if rank is None and one_box and "CalledProcessError" in h.text:
                rank = _int(h.fields.get("local_rank"))  # torch.distributed.launch on the one node: local is global
        if rank is None:
            pid = _pid(h)
            elsewhere = bool(node and pid_hosts.get(pid)) and _short_host(node) not in pid_hosts[pid]
            rank = pid_rank.get(f"{node}:{pid}", None if elsewhere else pid_rank.get(pid)) if pid else None
        if rank is None and h.signature == "elastic_child_failed":
            local = _int(h.fields.get("local_rank"))
            mapped = (label_maps.get((h.source, label), {}).get(local) if label is not None else None) \
                if local is not None else None
            mapped = mapped if mapped is not None else file_maps.get(h.source, {}).get(local) if local is not None \
                else None
            label = _int(h.fields.get("srun_label") or h.fields.get("task_label"))
            if mapped is None and launchers and local is not None and label is not None and h.source in per_node:
                mapped = label * per_node[h.source] + local  # srun's labels are torchrun's node ranks here
            rank = mapped if mapped is not None else None if launchers else local
        elif rank is None and h.signature == "ds_launcher_exit" and launchers and h.source in per_node:
            local, label = _int(h.fields.get("local_rank")), _int(srun_label(h))
            rank = label * per_node[h.source] + local if local is not None and label is not None else None
        if rank is None and len(in_box.get((h.source, srun_label(h)), ())) == 1 and h.signature not in _NODE_LINES:
            rank = next(iter(in_box[(h.source, srun_label(h))]))  # only its node's lines, where srun labels them
        elif rank is None and node is None and h.role is Role.ROOT:
            rank, node = _first_failure_below(h, boxes)
        box = boxes.get((h.source, h.line)) or exits.get((h.source, h.line))
        if box is not None:
            rank, node = box.rank, node or box.host
            when = when if when is not None else box.time
        if (rank, node, when) != (h.rank, h.node, h.time):
            h = dataclasses.replace(h, rank=rank, node=node, time=when, clock=h.clock or ("iso" if when else ""))
        out.append(h)
    return out


def name_victims(hits: Sequence[Hit]) -> list[Hit]:
    """A kernel line that names only a pid on a host takes the one rank a launcher saw end that way there.

    - An OOM kill, or a task blocked in the kernel (it ignores SIGTERM until its I/O returns): srun
      reports the task it SIGKILLed, `Killed`; exactly one such task on that host is the process.
    - Slurm's cgroup OOM on a host whose srun task was a launcher: exactly one rank that torchrun's box
      or DeepSpeed's launcher there reports ending by SIGKILL (round 13); the kernel's OOM kill too, when
      srun reports no `Killed` task there (round 17). A batch step's cgroup OOM, which names no host: the one
      rank of the whole job a launcher saw end by SIGKILL, and its host (mpirun's `exited on signal 9`).
    - A segfault, bus error or illegal instruction: exactly one rank on that host that srun
      (`Segmentation fault`, `Bus error`), DeepSpeed's launcher or torchrun's box reports ending by
      SIGSEGV, SIGBUS or SIGILL."""
    killed: dict[str, set[int]] = defaultdict(set)
    crashed: dict[str, set[int]] = defaultdict(set)
    sigkilled: dict[str, set[int]] = defaultdict(set)  # short host -> ranks a launcher saw end by SIGKILL
    for h in hits:
        if not h.node:
            continue
        if h.signature == "srun_task_exit":
            what = h.fields.get("what", "")
            if what == "Killed":
                killed[h.node].update(ranks_of(h.fields.get("tasks", "")))
            elif what in _CRASH_WORDS:
                crashed[h.node].update(ranks_of(h.fields.get("tasks", "")))
        elif h.signature == "mpirun_rank_exit" and h.rank is not None:
            if h.fields.get("signo") in ("11", "7", "4"):
                crashed[h.node].add(h.rank)
            elif h.fields.get("signo") == "9":
                sigkilled[h.node.split(".")[0]].add(h.rank)
        elif h.signature in ("ds_launcher_exit", "elastic_box_exit") and h.rank is not None:
            if h.fields.get("code") in _CRASH_CODES:
                crashed[h.node].add(h.rank)
            elif h.fields.get("code") in ("-9", "137"):
                sigkilled[h.node.split(".")[0]].add(h.rank)
    for h in hits:  # mp.spawn's `process 0 terminated with signal SIGKILL`, often with no host (round 82)
        if h.signature == "mp_spawn_exited" and h.rank is not None and h.fields.get("signal") == "SIGKILL":
            sigkilled[(h.node or "").split(".")[0]].add(h.rank)
    # the job's only rank a launcher saw SIGKILLed, anywhere: a batch step's cgroup OOM names no host (round 29), nor
    # does a pasted `dmesg` (round 82)
    only = [(host, rank) for host, ranks in sigkilled.items() for rank in ranks]
    out = []
    for h in hits:
        if h.rank is None and not h.node and h.signature in ("slurm_oom_kill", "linux_oom_kill") and len(only) == 1:
            h = dataclasses.replace(h, node=only[0][0] or None, rank=only[0][1])
        if h.rank is None and h.node:
            if h.signature in ("linux_oom_kill", "host_kernel_fault") and _pid(h):
                victims = killed.get(h.node, set())
                if not victims and h.signature == "linux_oom_kill":  # the one rank its launcher saw SIGKILLed
                    victims = sigkilled.get(h.node.split(".")[0], set())
            elif h.signature == "slurm_oom_kill":  # srun's task was a launcher: the rank it saw SIGKILLed
                victims = sigkilled.get(h.node.split(".")[0], set())
            elif h.signature in ("segfault", "bus_error"):
                victims = crashed.get(h.node, set())
            else:
                victims = set()
            if len(victims) == 1:
                h = dataclasses.replace(h, rank=next(iter(victims)))
        out.append(h)
    return out


name_oom_victims = name_victims  # the name of its first rule, kept for callers


_TRACEBACK_TO_EXIT = 2  # lines between a worker's last traceback line and its agent's `failed (exitcode: ...)`


def exception_before_exit(hits: Sequence[Hit]) -> list[Hit]:
    """An unranked exception line right above torchrun's `failed (exitcode: 1) local_rank: L` line in the same file
    is that worker's: the agent reports the exit as soon as the worker's stderr ends (round 45: a NameError above rank
    304's exit, with 48 nodes' lines around it). Only a worker that exited with a code of its own, not a signal."""
    exits = {(h.source, h.line): h for h in hits
             if h.signature == "elastic_child_failed" and h.rank is not None and h.fields.get("code", "").isdigit()}
    # so is one right above srun's report of one task's exit with a code, where srun's tasks are the ranks (round
    # 105d: Lightning under srun, `srun: error: gpu-r3n07: task 0: Exited with exit code 1`), the only one of its
    # file: of two, the tracebacks above them may be in either order (round 95f)
    coded = [h for h in hits if h.signature == "srun_task_exit" and h.fields.get("code", "").isdigit()]
    exits.update({(h.source, h.line): h for h in coded if h.rank is not None and h.fields.get("tasks", "").isdigit()
                  and sum(c.source == h.source for c in coded) == 1})
    if not exits:
        return list(hits)
    out = []
    for h in hits:
        if h.rank is None and h.role is Role.ROOT and h.signature == "python_exception":
            below = next((exits[(h.source, h.line + d)] for d in range(1, _TRACEBACK_TO_EXIT + 1)
                          if (h.source, h.line + d) in exits), None)  # fmt: skip
            if below is not None and below.fields.get("code") != "0":
                h = dataclasses.replace(h, rank=below.rank, node=h.node or below.node)
        out.append(h)
    return out
