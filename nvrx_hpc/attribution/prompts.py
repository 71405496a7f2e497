"""Shell prompts in a pasted terminal session: the output under `[kvoss@gpu-b07 ~]$ nvidia-smi -q` or
`root@node12:/var/log# dmesg -T` is that host's, up to the next prompt.

Users paste what they ran on a node while it failed (dmesg, nvidia-smi, df, ibstat, py-spy). The prompt
names the node; no line of the output does. Only commands that look at the machine they run on place their
output (`tail slurm-42.out` on a login node shows every node's lines); `ssh <host> cmd` and `srun -w <host>
cmd` place it on that host instead of the prompt's.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from nvrx_hpc.attribution.api import Hit

__all__ = ["prompt_hosts", "env_rank_hosts", "read_prompts", "place_by_prompts", "Session"]

_MAX_BYTES = 1 << 20  # a pasted session; a large log is a program's output, not a terminal's
# `[user@host ~]$ cmd`, `user@host:~/run$ cmd`, `(venv) root@host:/# cmd`, zsh's `user@host ~ % cmd`; the host's
# domain is dropped. A container's host name is its short id (`root@7be21c94d0fa:/workspace#`), round 75b.
# behind a log collector's stamp too (`2024-06-11T09:13:31.000Z yli@dgx-lab02:~$ ...`), after a conda env and the
# last command's exit status (`(axolotl) 134 mlops@gpu-enc2-svr04:~/axolotl$`, round 75d)
_PROMPT = re.compile(
    rb"(?m)^(?:\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z? )?"
    rb"(?:\([\w.-]+\) )?(?:\d{1,3} )?\[?[a-z_][\w.-]*@([A-Za-z][\w-]*|[0-9a-f]{12})[\w.-]*"
    rb"(?::[^\s$#]*|\s[^\n$#\]]{0,80})"
    rb"\]?[$#%] ?([^\n]*)$"
)
# a bare `$ cmd` prompt names no host: only a command run on another (`$ ssh gpn-c14 dmesg -T`) places its output
_BARE_PROMPT = re.compile(rb"(?m)^[$#] ([^\n]*)$")
# Commands whose output describes the machine they run on (after `sudo`, `time`, an env assignment).
_LOCAL = frozenset(
    {
        "dmesg",
        "journalctl",
        "nvidia-smi",
        "nvidia-bug-report.sh",
        "dcgmi",
        "df",
        "du",
        "free",
        "ibstat",
        "ibstatus",
        "ibv_devinfo",
        "ibdev2netdev",
        "ip",
        "ifconfig",
        "ethtool",
        "mlxlink",
        "py-spy",
        "gdb",
        "ps",
        "pgrep",
        "top",
        "uptime",
        "last",
        "mount",
        "lsof",
        "ls",
        "cat",
        "grep",
        "egrep",
        "tail",
        "head",
        "less",
        "zgrep",
        "sensors",
        "ipmitool",
        "lspci",
        "numactl",
        "ulimit",
        "hostname",
        "date",
    }
)
# Launchers that start only this host's ranks (one per node: `composer --node_rank 1 ...`, `torchrun`): what they
# print comes from the prompt's host (round 28); not mpirun, deepspeed or srun, which start ranks elsewhere, nor a
# bare `python script.py`, which may be a driver printing a whole cluster's lines (Ray's)
_NODE_LAUNCHERS = frozenset({"torchrun", "composer", "accelerate", "deepspeed"})
_TORCH_RUN = re.compile(r"^python[\d.]*\s+-m\s+torch\.distributed\.(?:run|launch)\b")
# what a command reads from these is the machine's own state, whatever the command
_MACHINE_FILES = re.compile(r"(?:^|[\s<])/(?:proc|sys|var/log|dev/shm)/")
_WRAPPERS = frozenset({"sudo", "time", "nice", "command", "env"})
_SHARED_FILE = re.compile(r"slurm-\d|\.out\b|\.err\b|/(?:lustre|gpfs|scratch|home|shared|nfs|project)s?/")
_REMOTE = re.compile(
    # ssh's options that take an argument (`-o PasswordAuthentication=no`, `-p 2222`) are not its host (round 83)
    r"(?:^|[;&|(]\s*)(?:ssh(?:\s+-[bcDEeFIiJLlmOopQRSWw]\s*\S+|\s+-\w+)*\s+(?:[\w.-]+@)?"
    r"([A-Za-z][\w-]*|(?:\d{1,3}\.){3}\d{1,3}(?![\w.]))|"
    r"srun\b[^;|&]*?(?:(?<![\w-])-w\s*|--nodelist[= ])([A-Za-z][\w-]*[\d-][\w-]*)|"
    r"kubectl\s+debug\s+node/([A-Za-z][\w.-]*))"  # a debug pod on a Kubernetes node: that node's (round 64b)
)
_NOT_HOSTS = frozenset({"localhost"})
# `hostname` run at a prompt names the machine, where the prompt shows a container's id (round 82)
_CONTAINER_ID = re.compile(r"^[0-9a-f]{12}$")
_DOCKER = re.compile(r"\b(?:docker|podman) (?P<verb>run|exec|inspect|logs|attach|start)\b"
                     r"(?:[^\n]*?\s(?P<id>[0-9a-f]{12})\b)?")
_HOSTNAME = re.compile(r"^(?:sudo\s+)?hostname(?:\s+-[sf])?\s*$")
_NAME_LINE = re.compile(rb"\s*([A-Za-z][\w-]*[\d-][\w-]*)(?:\.[\w.-]+)?\s*$")
# a program started at a prompt as one rank of a job (`torchbiggraph_train --rank 2 cfg.py`): its output is that
# rank's; not a launcher's `--node_rank` or a worker's `--local_rank` (round 82)
_RANK_FLAG = re.compile(r"(?<![\w-])--rank[= ](\d{1,6})\b")
# a command that starts several processes itself: its `--rank` is the node's (PyTorch's ImageNet example)
_SPAWNS = re.compile(r"multiprocessing[-_]distributed|--nproc|--gpus?\b|--ngpus|"
                     r"(?:^|[\s/])(?:mpirun|mpiexec|srun|horovodrun|deepspeed|torchrun)\b|\s-np?\s")
# a launcher of several processes besides `_SPAWNS`' (accelerate's `--num_processes 8`, a `--world-size 8`)
_SEVERAL = re.compile(r"(?:^|[\s/])accelerate\s+launch\b|--num[-_]processes[= ]*(?:[2-9]|\d\d)|"
                      r"--world[-_]size[= ]*(?:[2-9]|\d\d)")
# `hostname -i` (or `-I`) printing a loopback address: the host's name resolves to itself only (round 87d)
_HOSTNAME_I = re.compile(r"\bhostname\s+-[iI]\b")
_LOOPBACK_LINE = re.compile(rb"(?m)^127\.\d{1,3}\.\d{1,3}\.\d{1,3}\s*$")
# the addresses `hostname -I` prints, on its one line: the prompt's host has them (Ray's `ip=10.20.4.14` lines are
# that host's, round 105g); not loopback, nor Docker's default bridge, which every node has
_ADDRESS_LINE = re.compile(rb"(?:\d{1,3}\.){3}\d{1,3}(?:\s+(?:\d{1,3}\.){3}\d{1,3})*\s*$")
_ADDRESS = re.compile(rb"(?:\d{1,3}\.){3}\d{1,3}")
_SHARED_ADDRESS = re.compile(rb"^(?:127\.|172\.17\.0\.1$)")
# the run again with NCCL's peer-to-peer transport off, and its output: steps going by (rounds 84a, 86b)
_P2P_OFF = re.compile(r"(?:^|\s)NCCL_P2P_DISABLE=1\s")
# a training step's report (`loss 2.41`, a step bar `3/2500 [00:04<58:12, 1.40s/it]`), not a loading bar's
_PROGRESS = re.compile(rb"(?m)^(?![^\n]*(?:Loading|shards|Map|Download|Fetching|Tokeniz|Generating|Processing))"
                       rb"[^\n]*(?:\d(?: ?it/s|s/it)\b|\bloss[ =:]+\d)")
_STALLED = re.compile(rb"Watchdog caught|timed out|Timeout\(ms\)|DistStoreError|RendezvousTimeout")
# a program that runs on the prompt's host: Python, a shell script, a one-node launcher
_HERE_PROGRAM = re.compile(r"^(?:python[\d.]*|(?:ba|z|da)?sh|\S+\.(?:sh|py)|torchrun|accelerate|deepspeed|composer)$")
# a variable as `env`, `printenv` and `/proc/<pid>/environ` split on NULs print it, alone or joined on a line
_ENV_RANK = re.compile(rb"(?m)(?:^|[ \t])(?:export )?(?:RANK|SLURM_PROCID|OMPI_COMM_WORLD_RANK|PMI_RANK)="
                       rb"(\d{1,6})(?=[ \t]|$)")


# a shell script run at the prompt (`bash examples/pretrain.sh`, `./run.sh`), and what its output shows when it
# started a one-node launcher there: the launcher's `set -x` trace, or torchrun's per-process OMP banner
_SCRIPT = re.compile(r"^(?:(?:ba|z|da)?sh\s+(?:-\w+\s+)*)?\S*\.sh\b")
_STARTED_HERE = re.compile(
    rb"(?m)^\++ (?:\S+/)?(?:torchrun|python[\d.]*\s+-m\s+torch\.distributed\.(?:run|launch))\b"
    rb"|^(?:\[[\d :,.-]+\] torch\.distributed\.run: \[WARNING\] )?"  # newer torch logs it (round 81)
    rb"Setting OMP_NUM_THREADS environment variable for each process"
)


def _command_host(prompt_host: str | None, command: str, output: bytes = b"") -> str | None:
    """The host whose state `command`'s output shows (`output`, up to the next prompt), or None when it may
    show other hosts' lines."""
    if _SCRIPT.match(command.strip()) and _STARTED_HERE.search(output):
        return prompt_host  # round 35: `bash pretrain_bert_distributed.sh` ran torch.distributed.launch here
    remote = _REMOTE.search(command)
    if remote:
        host = remote.group(1) or remote.group(2) or remote.group(3)
        return None if host.lower() in _NOT_HOSTS else host
    if _MACHINE_FILES.search(command):
        return prompt_host
    words = [w for w in command.replace(";", " ; ").split() if "=" not in w.split("/")[0]]  # drop `FOO=1`
    if words and words[0] in {"env", "printenv"} and (len(words) == 1 or words[1] == "|"):
        return prompt_host
    while words and words[0] in _WRAPPERS:
        words.pop(0)
    program = words[0].rsplit("/", 1)[-1] if words else ""
    if _TORCH_RUN.match(" ".join([program, *words[1:]])):
        program = "torchrun"

    if program not in _LOCAL and program not in _NODE_LAUNCHERS and _started_rank(command) is None:
        return None
    if program in {"cat", "grep", "egrep", "tail", "head", "less", "zgrep", *_NODE_LAUNCHERS} \
            and _SHARED_FILE.search(command):
        return None  # a job log on shared storage, read (or parsed) from wherever the user was logged in
    return prompt_host


def prompt_hosts(data: bytes) -> list[tuple[int, str | None]]:
    """(line number, host or None) of each prompt in `data`, 1-based lines as the scanner counts them; None
    ends the previous prompt's host without giving one (a command whose output is not one machine's)."""
    return _session(data).prompts


@dataclasses.dataclass
class Session:
    """What a pasted terminal session says (`read_prompts`)."""

    prompts: list[tuple[int, str | None]] = dataclasses.field(default_factory=list)  # `prompt_hosts`
    env_ranks: dict[int, str] = dataclasses.field(default_factory=dict)  # `env_rank_hosts`
    started: dict[int, int] = dataclasses.field(default_factory=dict)  # line -> the rank its command starts
    named: set[str] = dataclasses.field(default_factory=set)  # every host a prompt names, whatever its command
    ran_on: set[str] = dataclasses.field(default_factory=set)  # hosts whose prompts ran a program there, or nothing
    several: bool = False  # a command started several processes (a launcher, `--nproc_per_node 8`)
    containers: dict[str, str] = dataclasses.field(default_factory=dict)  # `_container_hosts`
    p2p_off_trains: bool = False  # a rerun with `NCCL_P2P_DISABLE=1` printed training progress
    loopback: set[str] = dataclasses.field(default_factory=set)  # hosts whose `hostname -i` printed 127.x.x.x
    addresses: dict[str, str] = dataclasses.field(default_factory=dict)  # address -> host, from `hostname -I`


def _session(data: bytes) -> Session:
    """`prompt_hosts`, the rank each placed prompt's command starts by line (`_started_rank`), every host a prompt
    names, those whose prompts ran a program there (`_runs_here`; not a login node's `sbatch` or `tail`), whether a
    command started several processes, the host of each container the session shows started or inspected from
    one (`_container_hosts`), whether a rerun with NCCL's peer-to-peer transport off trained, and the hosts whose
    `hostname -i` printed a loopback address: one pass."""
    found: list[tuple[int, str | None]] = []
    started: dict[int, int] = {}
    if b"@" not in data and b"$ " not in data:
        return Session()
    line, pos = 1, 0
    prompts = [(m.start(), m.end(), m.group(1).decode(), m.group(2)) for m in _PROMPT.finditer(data)]
    taken = {start for start, *_ in prompts}
    prompts += [(m.start(), m.end(), None, m.group(1)) for m in _BARE_PROMPT.finditer(data) if m.start() not in taken]
    prompts.sort()
    ends = [p[0] for p in prompts[1:]] + [len(data)] * bool(prompts)  # its output runs to the next prompt
    names = _hostnames(data, prompts, ends)
    ran_on: set[str] = set()
    several = p2p_off_trains = False
    loopback: set[str] = set()
    addresses: dict[str, str] = {}
    for (start, stop, host, command), end in zip(prompts, ends, strict=True):
        line += data.count(b"\n", pos, start)
        pos = start
        host = names.get(host, host) if host is not None else None
        text = command.decode(errors="replace")
        several = several or bool(_SPAWNS.search(text) or _SEVERAL.search(text))
        p2p_off_trains = p2p_off_trains or bool(_P2P_OFF.search(" " + text) and _PROGRESS.search(data, stop, end)
                                                and not _STALLED.search(data, stop, end))  # the rerun did not hang too
        if host is not None and _HOSTNAME_I.search(text) and _LOOPBACK_LINE.search(data, stop, end):
            loopback.add(host)
        if host is not None and _HOSTNAME_I.search(text) and (printed := _ADDRESS_LINE.match(data, stop + 1, end)):
            for addr in _ADDRESS.findall(printed.group()):
                if not _SHARED_ADDRESS.match(addr):
                    addresses.setdefault(addr.decode(), host)
        if host is not None and _runs_here(text):
            ran_on.add(host)
        placed = _command_host(host, text, data[stop:end])
        found.append((line, placed if host is not None or _REMOTE.search(text) else None))
        rank = _started_rank(text) if placed else None
        if rank is not None:
            started[line] = rank
    return Session(found, {}, started, {p[2] for p in prompts if p[2] is not None}, ran_on, several,
                   _container_hosts(prompts), p2p_off_trains, loopback, addresses)


def _runs_here(command: str) -> bool:
    """The command runs a program on the prompt's host (`CUDA_VISIBLE_DEVICES=0 python train.py`, `bash run.sh`),
    or none (the prompt after a run); not one that submits, reads a log or reaches another machine (a login node's
    `sbatch`, `tail slurm-42.out`, `kubectl logs` on a laptop)."""
    words = [w for w in command.split() if "=" not in w.split("/")[0]]
    while words and words[0] in {*_WRAPPERS, "nohup"}:
        words.pop(0)
    return not words or bool(_HERE_PROGRAM.match(words[0].rsplit("/", 1)[-1]))


def _container_hosts(prompts: Sequence[tuple[int, int, str | None, bytes]]) -> dict[str, str]:
    """container id -> the host whose prompt ran it: `docker run` followed by the container's own prompt
    (`root@5e1b7c93a0d4:/workspace#`), or `docker inspect|exec|logs <id>` naming it (round 80c's `[root@gpu-node07
    ~]# docker inspect 5b2e9c07d1f4`): a container's host name is its id, and its faults are its host's."""
    found: dict[str, str] = {}
    hosts = [p[2] for p in prompts]
    for i, (_start, _stop, host, command) in enumerate(prompts):
        if host is None or _CONTAINER_ID.match(host):
            continue
        m = _DOCKER.search(command.decode(errors="replace"))
        if m is None:
            continue
        named = m.group("id")
        after = next((h for h in hosts[i + 1 :] if h is not None), None)
        if named is None and m.group("verb") == "run" and after is not None and _CONTAINER_ID.match(after):
            named = after
        if named is not None:
            found.setdefault(named, host)
    return found


def _started_rank(command: str) -> int | None:
    """The rank a command at a prompt starts as one process of a job (`_RANK_FLAG`), unless it spawns its own."""
    flag = _RANK_FLAG.search(command)
    return int(flag.group(1)) if flag is not None and not _SPAWNS.search(command) else None


def _hostnames(data: bytes, prompts: Sequence[tuple[int, int, str | None, bytes]], ends: Sequence[int]) -> dict:
    """prompt host -> the name `hostname` printed under one of its prompts (a container's id -> its node)."""
    names: dict[str, str] = {}
    for (_start, stop, host, command), end in zip(prompts, ends, strict=True):
        if host is not None and _HOSTNAME.match(command.decode(errors="replace").strip()):
            m = _NAME_LINE.match(data, stop, end)
            if m is not None and m.group(1).decode() != host:
                names.setdefault(host, m.group(1).decode())
    return names


def env_rank_hosts(data: bytes, prompts: Sequence[tuple[int, str | None]]) -> dict[int, str]:
    """rank -> host of environment listings under a prompt (`tr '\\0' '\\n' < /proc/77134/environ`, `env |
    grep RANK`): a `RANK=9` line is a process of that host."""
    found: dict[int, str] = {}
    if not prompts or b"RANK=" not in data:
        return found
    starts = [line for line, _ in prompts]
    line, pos = 1, 0
    for m in _ENV_RANK.finditer(data):
        line += data.count(b"\n", pos, m.start())
        pos = m.start()
        at = bisect.bisect_right(starts, line) - 1
        if at >= 0 and prompts[at][1]:
            found.setdefault(int(m.group(1)), prompts[at][1])
    return found


def read_prompts(path: Path) -> Session:
    """What a pasted session says (`Session`), with the ranks its environment listings place (`env_rank_hosts`);
    nothing for a file too large to be one."""
    try:
        if path.stat().st_size > _MAX_BYTES:
            return Session()
        data = path.read_bytes()
    except OSError:
        return Session()
    session = _session(data)
    session.env_ranks = env_rank_hosts(data, session.prompts)
    return session


def place_by_prompts(
    hits: Sequence[Hit], prompts: Sequence[tuple[int, str | None]], file_host: str | None = None,
    ranks: Mapping[int, int] | None = None,
) -> list[Hit]:
    """`hits` of one file given the host of the prompt above them (see the module): those with no node, and
    those whose node is only the file's name's guess (`dmesg_f02.txt` under `[u@gpu-f02 ~]$ dmesg -T`); with
    `ranks`, the unranked ones under a prompt whose command started one rank take it."""
    if not hits or not prompts:
        return list(hits)
    starts = [line for line, _ in prompts]
    placed: list[Hit] = []
    for h in hits:
        at = bisect.bisect_right(starts, h.line) - 1
        host = prompts[at][1] if at >= 0 and (not h.node or h.node == file_host) else None
        if host:
            h = dataclasses.replace(h, node=host)
        rank = (ranks or {}).get(prompts[at][0]) if at >= 0 and h.rank is None else None
        placed.append(dataclasses.replace(h, rank=rank) if rank is not None else h)
    return placed
