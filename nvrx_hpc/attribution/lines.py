"""One log line in, one `Hit` out: strip the prefixes (srun `--label`, torchrun `[defaultN]:`, `[rankN]:`,
a pdsh/DeepSpeed `host: `), read the line's own header (syslog and `journalctl` host and time, `dmesg -T`
and raw `dmesg` stamps, `slurmstepd-<host>:`), pick the first signature that matches, and pull out
rank, node, GPU, pid and time. Pure functions; the scanner decides which lines get here.

A hit's `clock` says how its time was read: `iso` (a full date), `noyear` (syslog, journal short and glog
stamps carry no year: the analysis moves them to the year of the job's other stamps), `boot` (raw
`dmesg`: seconds since boot, kept in `fields["boot_s"]`, no wall time) or "" (none)."""

from __future__ import annotations

import re
from datetime import datetime

from nvrx_hpc.attribution.api import Hit, Role
from nvrx_hpc.attribution.collector_clock import LEAD_BEHIND, LEAD_ONLY
from nvrx_hpc.attribution.exception_roles import exception_role
from nvrx_hpc.attribution.signature_index import signatures_for
from nvrx_hpc.attribution.signatures import CATALOG, Signature

__all__ = ["classify_line", "parse_time", "read_header", "LineContext", "split_prefix", "split_prefixes", "ranks_of",
           "MAX_TEXT", "torch_rank_prefixes", "hit_ranks", "srun_label"]

MAX_TEXT = 400  # characters of a line kept in a hit

# A collector's or `ts`'s stamp before a line (`2024-03-14T02:10:00.123Z 12: ...`): stripped, its time
# kept, unless a journal's `host unit[pid]: ` header follows (`-o short-iso`: read_header wants it whole).
# mpirun --timestamp-output ends it with a colon (`2019-06-02T16:08:41.667Z: [1,12]<stdout>:`).
_STAMP = r"\[?\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?: ?(?:Z|[+-]\d\d:?\d\d))?\]?"
LEAD_STAMP = _STAMP + r":?\s+(?=\s*\d{1,7}: |\[rank\d|\[default\d|\[\d+,\d+\]<)"  # before a runner prefix
# A collector may stamp a line that already carries its own stamp (`2025-11-09 15:39:31.043 +08:00 [2025-11-09
# 07:39:30] h100-28:238:1313 [0] NCCL WARN ...`): both are stripped.
# A console's table row (CloudWatch's export: `|\t2025-05-16T16:39:54.017-07:00\t|\t<message>`, round 60b) is one too.
_LEAD = re.compile("^(?:" + _STAMP + r":? |\|\s*" + _STAMP + r"\s*\|\s?){1,2}"
                   # a journal's host holds a digit, '-' or '.' (not `Initializing distributed: `, `run sh: `)
                   r"(?![A-Za-z0-9]*[\d.-][\w.-]* [\w./@-]+(?:\[\d+\])?: )")
_SRUN_LABEL = re.compile(r"^\s*(\d{1,7}): |^\[(\d{1,7})\]:(?=\[)")  # `12: `; `[1]:[default8]:` (a node index)
# TorchX (and NeMo-Run through it) puts `role/replica ` before each line: `i.pretrain/0 [default2]:`.
_TORCHX_ROLE = re.compile(r"^[A-Za-z][\w.-]*/\d{1,5} (?=\s|\[)")
# A label before torchrun's: a pod's role (a Kubeflow job's `[worker-1] [default5]:`, round 83's stamped check) goes;
# a host's name (`[gpu-n04] [default3]:`) is the line's node
_OUTER_LABEL = re.compile(r"^\[(?P<name>[A-Za-z][\w.-]*)\] (?=\[default\d)")
# A gang scheduler's lead before each task's line: `task=21 host=s4kdxr71 ` (a JAX job's controller, round 84c)
_KV_LEAD = re.compile(r"^(?:task|rank)=(?P<rank>\d{1,7}) host=(?P<host>[A-Za-z][\w.-]*) ")  # not logfmt's pid
_POD_ROLE = re.compile(r"^(?:worker|master|launcher|head|chief|ps|evaluator)-?\d*$")
_TORCH_RANK = re.compile(r"^\[rank(\d{1,7})\]:\s?")
_TEE_RANK = re.compile(r"^\[default(\d{1,7})\]:")  # torchrun --tee: `[default3]:`
# mpirun --tag-output: `[1,3]<stderr>:`; Horovod's gloo runner `[3]<stderr>:`, after a ctime stamp with
# --timestamp-output (`Tue May 23 11:04:33 2023[3]<stderr>:`, round 40)
_MPI_RANK = re.compile(r"^(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})?\[(?:\d+,)?(\d{1,7})\]"
                       r"<(?:stdout|stderr|stddiag)>:\s?")
_MPI_CTIME = re.compile(r"^([A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4})\[(?:\d+,)?\d{1,7}\]<")


def _ctime(stamp: str) -> float | None:
    """`Tue Nov 19 11:58:41 2019` (ctime, local time) -> epoch seconds."""
    try:
        return datetime.strptime(" ".join(stamp.split()), "%a %b %d %H:%M:%S %Y").timestamp()
    except ValueError:
        return None


# A runner's `[host:rank]:` before each line (`[dgx-114:3]:[rank3]: ...`); UCX's `[host:pid:0:tid]` has more colons.
# ESPnet2's `[host:rank/world] ` before each of its log lines (round 74a).
_HOST_RANK = re.compile(r"^\[(?P<host>[A-Za-z][\w.-]*):(?P<rank>\d{1,7})(?:\]:|/\d{1,7}\] )")
# pdsh / DeepSpeed multi-node runners put `host: ` before each line (a job log's collector `host >> `, round 98e); a
# host name has a digit or a hyphen, an exception name ("ValueError: ") has neither. A hostfile of addresses gives
# `10.52.0.22: ` (round 22). NVIDIA's tools, Flux's and Python's versioned binaries name themselves the same way
# (`nvidia-container-cli: `, `flux-job: `, `python3: `).
_HOST_PREFIX = re.compile(r"^(?!rank\d|slurmstepd|srun|flux-(?:job|shell):|"
                          r"nvidia-(?:container|smi|persistenced|fabricmanager|ctk)|python\d|pip\d)"
                          r"(?P<host>[a-z][a-z0-9_-]*[\d-][a-z0-9_.-]*|(?:\d{1,3}\.){3}\d{1,3})(?:: | >> )(?=\s*\S)")
# A kernel line quoted inside another line (an alert bot's `node-health: Xid errors on ...: May 18 16:01:47
# ip-26-0-160-12 kernel: ...`, round 89e): the host in its syslog header is the line's node, not the relay before it.
_QUOTED_KERNEL = re.compile(r"\b[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d (?P<host>[A-Za-z][\w.-]*) kernel: ")
# A runner that tags each line with its origin and stream: `host [stderr] `, or milabench's
# `bench.host [stdout] ` (`dinov2-giant-nodes.cn-d003 [stderr] [rank0]:...`, the host maybe a FQDN).
_STREAM_TAG = re.compile(r"^(?P<tag>[A-Za-z][\w.-]*) \[(?:stdout|stderr|start|end(?: \(\d+\))?)\] ")
_HOST_PART = re.compile(r"^[A-Za-z][\w-]*\d$")  # the tag's part that names a host ends in a digit
_MONTHS = {m: i for i, m in enumerate(("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov",
                                        "Dec"), 1)}  # fmt: skip
_SYSLOG = re.compile(r"^(?:<\d+>)?(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>\d{1,2}) (?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d)"
                     r"(?:\.\d+)? (?P<host>[A-Za-z0-9][\w.-]*) ")
# journalctl `-o short-iso` and RFC 5424 syslog (`<4>1 2024-10-02T14:32:40.117+02:00 host kernel - - - ...`)
_JOURNAL_ISO = re.compile(r"^(?:<\d{1,3}>\d )?(?P<ts>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d+)?)(?:Z|[+-]\d\d:?\d\d)? "
                          r"(?P<host>[A-Za-z0-9][\w.-]*) ")
_DMESG_T = re.compile(r"^\[(?:[A-Z][a-z]{2} )?(?P<mon>[A-Z][a-z]{2}) {1,2}(?P<day>\d{1,2}) "
                      r"(?P<h>\d\d):(?P<mi>\d\d):(?P<s>\d\d) (?P<y>\d{4})\] ")
# An ops export of several hosts' kernel logs: `s4kdxr71 kernel: [Thu Oct  2 06:53:48 2026] NVRM: ...` (round 84c)
_HOST_KERNEL = re.compile(r"^(?P<host>[A-Za-z][\w.-]*\d[\w.-]*) kernel: (?=\[)")
_DMESG_RAW = re.compile(r"^\[\s*(?P<boot>\d+\.\d+)\] ")
_STEPD_HOST = re.compile(r"slurmstepd-(?P<host>[A-Za-z0-9][\w.-]*?): ")
_SRUN_WHERE = re.compile(r"srun: error: (?P<host>[A-Za-z0-9][\w.-]*): tasks? (?P<tasks>[\d,-]+): ")
_CGROUP_TASK = re.compile(r"/step_(?:\d+|batch|extern)/task_(?P<task>\d+)")
# UCX's and Open MPI's crash reports lead with `[host:pid :thread:tid]` (`[g1003:977423 :0:977423] Caught signal 11`).
_PID = re.compile(r"\bpid[=:] ?(\d+)|\(pid(?:: |\(s\) | )(\d+)\)|\bPID (\d+)|Killed process (\d+)|\[\w+:(\d+)\]$|"
                  r"[\w.-]+\[(\d+)\]: (?:segfault|trap)|^\[[\w.-]+:(\d+) ?:\d+:\d+\]")
# A rank inside the line: torch's `[Rank 3]`, `rank 3:`, Lightning's `[rank: 3]`, a logging format's field
# (`| rank 24 |`, `rank=24`; not `node_rank=` or `local_rank=`).
_INLINE_RANK = re.compile(r"\[Rank (\d{1,7})\]|\bRank (\d{1,7}):|\brank:? (\d{1,7})\b[:\]]|\[rank(\d{1,7})\]|"
                          r"\|\s*rank\s+(\d{1,7})\s*\||(?<![\w-])(?:global_|world_)?rank=(\d{1,7})\b")
# NCCL's `host:pid:tid [dev]`, maybe after a logger's bracketed stamp (`[2024-06-23 15:45:07] h:1:2 [0]`, round 46)
_NCCL_PREFIX = re.compile(r"^(?:\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?\] )?"
                          # a container's short id is its host name (`5e0b7d31c9af:2211:2211 [0]`, round 83c), or a
                          # UUID a platform names its containers by (`3f9a61c2-7be4-4d0e-9a55-e21c08d4b7a1:61207:...`)
                          r"(?P<host>[A-Za-z][\w.-]*|[0-9a-f]{12}|[0-9a-f]{8}(?:-[0-9a-f]{4}){3}-[0-9a-f]{12})"
                          r":(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\]")
# `node=h3`; Megatron's result validation: `Rank 10, node gpu-h03, device 2, iteration 7: Unexpected result nan`
_PY_WARNING = re.compile(r"\b[A-Z]\w*Warning: ")  # `...py:312: UserWarning: `, before a signature's match
# torchrun's tee prefix behind another launcher's (SkyPilot's `(head, rank=0, pid=7712) [default3]:`, round 53b)
_TEE = re.compile(r"^(?:\([^()]*\)\s*)?\[default\d+\]:")
# a line that names its node (`node: gpu-3`, `Rank 13, node gpu-3`, a launcher's `on host 'gn-a'`: round 83)
_NODE_WORD = re.compile(r"(?:\bnode[:=] ?|\bRank \d{1,7}, node |\bon host ')(?P<node>[A-Za-z][\w.-]*)")
# Ray's prefix of a remote actor's line: `(RayTrainWorker pid=73310, ip=10.8.2.33) ...`, SkyPilot's `(node-1 pid=7,
# ip=A)`; the address is its host's (aliases.py places the line there where the logs pair the address with a host name).
# `(raylet, ip=A)`, `(RayTrainWorker pid=7, ip=A)`, a launcher's `(worker8, rank=8, pid=7, ip=A)` (round 37)
_RAY_ACTOR = re.compile(
    r"^\((?:[\w-]+,? )?(?:(?:rank=(?P<rank>\d+)|pid=\d+), ?)*ip=(?:(?P<ip>[\d.]+|[0-9a-fA-F:]+)|"
    r"(?P<iphost>[A-Za-z][\w-]*[\d-][\w.-]*))\) ")  # a cluster that gives Ray its pods' names (round 42)
# A Ray actor's prefix without its address (`(WorkerDict pid=869405) ml-a100-07:869405:870211 [2] NCCL WARN`, round
# 85e): NCCL's own prefix after it names the host
_ACTOR_PREFIX = re.compile(r"^\([\w-]+(?:,? \w+=[\w.:-]+)+\) ")
_INDEX_PREFIX = re.compile(r"^\[\d{1,6}\] ")  # a launcher's `[56] ` before NCCL's own prefix (round 92c)
# Open MPI's own lines about one process: `[h06c0901:07661] Signal: Segmentation fault (11)`
# UCX's own: `[h:pid:0:tid]`, and after its timestamp `[1530172089.514402] [h:pid:0]` (rounds 37, 38)
_OMPI_PROCESS = re.compile(r"^(?:\[\d+\.\d+\] +)?\[(?P<host>[A-Za-z][\w.-]*):(?P<pid>\d+)(?::\d+(?::\d+)?)?\] ")
_DEVICE_WORD = re.compile(r"\bDevice[:=] ?(?P<dev>\d+)")
# `_` between date and time: torchrun's failure box (`time : 2024-08-23_13:16:09`).
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[T _](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?")
# glog pads the month (`[E0520`); torch's c10 logger does not (`[E520` is May 20, `[E1023` October 23).
_GLOG = re.compile(r"\[[IWEF](\d{1,2})(\d\d) (\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?")


class LineContext:
    """What a file says about all its lines: the rank/node it belongs to and the year for glog stamps."""

    __slots__ = ("source", "rank", "node", "year", "file_index")

    def __init__(
        self, source: str, *, rank: int | None = None, node: str | None = None, year: int | None = None,
        file_index: int = 0,
    ) -> None:
        self.source = source
        self.rank = rank
        self.node = node
        self.year = year if year is not None else datetime.now().year
        self.file_index = file_index


def split_prefix(line: str) -> tuple[int | None, str]:
    """Strip `srun --label` (`12: `) and torch (`[rank12]:`) prefixes; return (rank or None, the rest)."""
    rank, _node, rest = split_prefixes(line)
    return rank, rest


def split_prefixes(line: str) -> tuple[int | None, str | None, str]:
    """Strip the runner prefixes a line may carry, outermost first: srun `--label` (`12: `) or mpirun's
    `[1,12]<stderr>:`, a pdsh host (`node-b7: `), torchrun's `[default3]:`, torch's `[rank12]:`.
    Returns (rank, host, the rest). torch's `[rank12]:` is the process's own global rank and wins; srun's
    and mpirun's labels are the task, the rank when each task is one rank (`2: [rank21]:` is rank 21: srun
    started one torchrun per node); torchrun's `[default3]` is the local rank on its node: it stands in for
    the rank only when no global one is given (`[default6]:[rank14]:` is rank 14)."""
    rank, node, rest, _local, _label = _split_prefixes(line)
    return rank, node, rest


def torch_rank_prefixes(line: str) -> tuple[int | None, int | None]:
    """The `[rankN]:` prefixes of a line after srun's, mpirun's, a host's and torchrun's `[defaultN]:`
    ones: (outer, inner); inner is not None only for a doubled `[rank2]:[rank6]:`."""
    line = _outer_prefixes(line)[-1]
    m = _TEE_RANK.match(line)
    line = line[m.end() :] if m else line
    m = _TORCH_RANK.match(line)
    if not m:
        return None, None
    inner = _TORCH_RANK.match(line[m.end() :])
    return int(m.group(1)), int(inner.group(1)) if inner else None


def _outer_prefixes(line: str) -> tuple[int | None, str | None, str]:
    """(srun's or mpirun's label, a pdsh host, the rest) after a collector's stamp."""
    label = node = None
    m = _LEAD.match(line)
    if m:
        line = line[m.end() :]
    m = _TORCHX_ROLE.match(line)
    if m:
        line = line[m.end() :]
    m = _KV_LEAD.match(line)
    if m:
        return int(m.group("rank")), m.group("host"), line[m.end() :]
    m = _OUTER_LABEL.match(line)
    if m:
        node = None if _POD_ROLE.match(m.group("name")) else m.group("name")
        return None, node, line[m.end() :]
    m = _SRUN_LABEL.match(line) or _MPI_RANK.match(line)
    if m:
        label = int(m.group(1) or m.group(2) if m.re is _SRUN_LABEL else m.group(1))
        line = line[m.end() :]
    elif m := _HOST_RANK.match(line):
        return int(m.group("rank")), m.group("host"), line[m.end() :]
    m = _HOST_PREFIX.match(line)
    if m:
        node = m.group("host")
        line = line[m.end() :]
    elif m := _STREAM_TAG.match(line):
        parts = m.group("tag").split(".")
        node = next((p for p in parts if _HOST_PART.match(p)), parts[0])
        line = line[m.end() :]
    return label, node, line


def _split_prefixes(line: str) -> tuple[int | None, str | None, str, int | None, tuple[int, bool] | None]:
    """`split_prefixes` plus the local rank when the rank is only torchrun's `[defaultN]`, and srun's or
    mpirun's label with whether torch's own rank prefix stood beside it."""
    local = None
    torch = False
    label, node, line = _outer_prefixes(line)
    rank = label
    m = _TEE_RANK.match(line)
    if m:
        local = int(m.group(1))
        line = line[m.end() :]
        if label is not None:  # a label outside torchrun's own prefix is its launcher's: the process is torchrun's
            rank, torch = None, True
    m = _TORCH_RANK.match(line)
    if m:
        rank, torch = int(m.group(1)), True
        line = line[m.end() :]
        m = _TORCH_RANK.match(line)  # `[rank2]:[rank6]:`: torchrun's local prefix (`--role rank`), then torch's
        if m:
            rank = int(m.group(1))
            line = line[m.end() :]
    labelled = (label, torch) if label is not None else None
    if rank is None and local is not None:
        return local, node, line, local, labelled
    return rank, node, line, None, labelled


def read_header(text: str, year: int | None) -> tuple[float | None, str, str | None, str | None]:
    """(time, clock, host, boot seconds) from a syslog, journal, `dmesg -T` or raw `dmesg` line header."""
    m = _HOST_KERNEL.match(text)
    if m:
        when, clock, _host, boot = read_header(text[m.end() :], year)
        return when, clock, m.group("host"), boot
    try:
        m = _SYSLOG.match(text)
        if m and m.group("mon") in _MONTHS:
            when = datetime(year or datetime.now().year, _MONTHS[m.group("mon")], int(m.group("day")),
                            int(m.group("h")), int(m.group("mi")), int(m.group("s")))  # fmt: skip
            return when.timestamp(), "noyear", m.group("host"), None
        m = _JOURNAL_ISO.match(text)
        if m:
            return parse_time(m.group("ts")), "iso", m.group("host"), None
        m = _DMESG_T.match(text)
        if m and m.group("mon") in _MONTHS:
            when = datetime(int(m.group("y")), _MONTHS[m.group("mon")], int(m.group("day")), int(m.group("h")),
                            int(m.group("mi")), int(m.group("s")))  # fmt: skip
            return when.timestamp(), "iso", None, None
    except ValueError:
        return None, "", None, None
    m = _DMESG_RAW.match(text)
    if m:
        return None, "boot", None, m.group("boot")
    return None, "", None, None


def _in_year_of(when: float, other: float, clock: str) -> float:
    """`when`, a stamp without a year (glog's `E0408 04:06:22`) moved to `other`'s year; a dated one as it is."""
    if clock == "iso":
        return when
    try:
        return datetime.fromtimestamp(when).replace(year=datetime.fromtimestamp(other).year).timestamp()
    except ValueError:  # 29 February
        return when


def _clock(text: str) -> str:
    return "iso" if _ISO.search(text) else "noyear" if _GLOG.search(text) else ""


def ranks_of(tasks: str) -> list[int]:
    """`0-3,5` -> [0, 1, 2, 3, 5] (empty when it does not parse or is implausibly long)."""
    out: list[int] = []
    for part in tasks.split(","):
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return []
        out.extend(range(int(lo), int(hi or lo) + 1))
        if len(out) > 100_000:
            return []
    return out


_TASK_CAUSES = ("slurm_oom_kill", "segfault")  # what srun reports per task as a cause, not as teardown


def hit_ranks(h: Hit) -> tuple[int, ...]:
    """A hit's ranks: its own, or every task srun's OOM or crash line names (`tasks 13-15: Out Of Memory`, round
    15; `tasks 4-7: Segmentation fault`, round 40; not when srun's tasks were launchers: launchers.py renames the
    field then)."""
    if h.rank is not None:
        return (h.rank,)
    return tuple(ranks_of(h.fields.get("tasks", ""))) if h.signature in _TASK_CAUSES else ()


def _frac(digits: str | None) -> float:
    return float("0." + digits) if digits else 0.0


def parse_time(text: str, year: int | None = None) -> float | None:
    """Epoch seconds from the first ISO (`2024-04-20T09:09:37`, `2024-04-20 09:09:37,123`) or glog
    (`[E1016 03:31:38.928`, torch's unpadded `[E520 04:18:11.412`) stamp in `text`, read as local time;
    None when there is none."""
    m = _ISO.search(text)
    try:
        if m:
            y, mo, d, h, mi, s = (int(g) for g in m.groups()[:6])
            return datetime(y, mo, d, h, mi, s).timestamp() + _frac(m.group(7))
        m = _GLOG.search(text)
        if m:
            mo, d, h, mi, s = (int(g) for g in m.groups()[:5])
            return datetime(year or datetime.now().year, mo, d, h, mi, s).timestamp() + _frac(m.group(6))
    except ValueError:  # 2024-13-45 is not a time: treat the line as untimed
        return None
    return None


_UNFILLED = re.compile(r"\s*\([^(){}]*\{\w+\}[^(){}]*\)|\s*\{\w+\}")


def srun_label(h: Hit) -> str | None:
    """srun's `--label` of the hit's line (`task_label` when torch's own rank prefix stood beside it)."""
    return h.fields.get("task_label") or h.fields.get("srun_label")


def _summary(sig: Signature, fields: dict[str, str]) -> str:
    try:
        return sig.summary.format_map({k: v for k, v in fields.items()})
    except (KeyError, IndexError, ValueError):  # an optional field missing: say the rest without it
        return _UNFILLED.sub("", sig.summary).strip() or sig.id


def _first_int(m: re.Match[str] | None) -> int | None:
    if not m:
        return None
    for g in m.groups():
        if g is not None:
            return int(g)
    return None


def classify_line(
    raw: str, line_no: int, ctx: LineContext, catalog: tuple[Signature, ...] = CATALOG
) -> Hit | None:
    """The hit for one line (1-based `line_no`), or None when no signature matches it."""
    prefix_rank, prefix_node, text, tee_local, label = _split_prefixes(raw.rstrip("\r\n"))
    body = text
    if (ray := _RAY_ACTOR.match(text)) and ray.group("rank") is not None:  # the launcher's prefix is not the line's
        body, prefix_rank = text[ray.end() :], prefix_rank if prefix_rank is not None else int(ray.group("rank"))
    for sig in signatures_for(body, catalog):
        m = sig.compiled().search(body)
        if m:
            break
    else:
        return None
    fields = {k: v for k, v in m.groupdict().items() if v is not None}
    role, category = sig.role, sig.category
    if role is Role.ROOT and _PY_WARNING.search(body, 0, m.start()):
        role = Role.CONTEXT  # a Python warning that quotes an error (FSDP's `Failed to clone() ... out of memory`)
    exc = fields.get("exc", "")
    if sig.id == "python_exception":
        role, category = exception_role(exc.rpartition(".")[2], role, category, fields.get("msg", ""))
    when, clock, head_node, boot = read_header(text, ctx.year)
    if when is None:
        when = parse_time(text, ctx.year)
        clock = _clock(text) if when is not None else clock
    lead = _LEAD.match(raw)
    if when is None and (ctime := _MPI_CTIME.match(raw)):  # mpirun --timestamp-output's stamp before its tag
        when, clock = _ctime(ctime.group(1)), "iso"
    if when is None and lead:
        when, clock = parse_time(raw, ctx.year), "iso"  # the stamp before the prefixes
        if when is not None:
            fields[LEAD_ONLY] = "1"
    elif when is not None and lead and (stamped := parse_time(lead.group(), ctx.year)) is not None \
            and 1 < _in_year_of(when, stamped, clock) - stamped < 86400:
        fields[LEAD_BEHIND] = "1"  # the collector's clock is behind the node's (collector_clock.py)
    if boot is not None:
        fields["boot_s"] = boot
    rank = prefix_rank
    if "culprit" in fields:  # the line names another rank as the one at fault (Horovod's missing ranks)
        rank = int(fields.pop("culprit"))
    if "rank" in fields and (rank is None or sig.id == "elastic_box_rank" and label is not None and not label[1]):
        rank = int(fields.pop("rank"))  # torchrun's box names its global rank; an srun label there is a launcher
    if "rank" in fields and label is not None and not label[1]:
        fields["own_rank"] = fields.pop("rank")  # the line's own rank, for when srun's label is a launcher's
    where = _SRUN_WHERE.search(text)
    if where:
        fields.setdefault("tasks", where.group("tasks"))
    if rank is None:
        cg = _CGROUP_TASK.search(text)
        rank = int(cg.group("task")) if cg else None
        if cg:
            fields["cgroup_task"] = cg.group("task")  # the node's own task index (cgroup_task.py)
    if rank is None:
        rank = _first_int(_INLINE_RANK.search(text))
    if rank is None and fields.get("tasks", "").isdigit():
        rank = int(fields["tasks"])
    if rank is None:
        rank = ctx.rank
    node = fields.pop("failed", None) or fields.pop("node", None)
    fields.pop("node", None)
    gpu = fields.pop("gpu", None)
    stepd = _STEPD_HOST.search(text)
    node = node or (where.group("host") if where else None) or (stepd.group("host") if stepd else None)
    nccl = (_NCCL_PREFIX.match(text) or _NCCL_PREFIX.match(_TEE.sub("", body, count=1))  # after a launcher's prefix
            or _NCCL_PREFIX.match(_ACTOR_PREFIX.sub("", body, count=1))
            or _NCCL_PREFIX.match(_INDEX_PREFIX.sub("", body, count=1)))
    if prefix_node and prefix_node[0].isdigit() and nccl:
        prefix_node = nccl.group("host")  # pdsh's address prefix: NCCL's own prefix names the host
    if prefix_node and not head_node and (quoted := _QUOTED_KERNEL.search(text)):
        prefix_node = quoted.group("host")  # a relay's name before the node's own kernel line it quotes (a bot's alert)
    node = node or head_node or prefix_node
    if nccl:
        node = node or nccl.group("host")
        gpu = gpu or nccl.group("dev")
        fields.setdefault("pid", nccl.group("pid"))
    if label is not None:  # srun's task: the rank, unless srun started launchers (localise.launcher_tasks)
        fields["task_label" if label[1] else "srun_label"] = str(label[0])
        inline = _first_int(_INLINE_RANK.search(text)) if rank == label[0] and "own_rank" not in fields else None
        if inline is not None and inline != rank:
            fields["own_rank"] = str(inline)  # older torch's `[Rank 24] Watchdog ...` under a launcher's label
    outer, inner = torch_rank_prefixes(raw) if "]:[rank" in raw else (None, None)
    if inner is not None and inner == rank and outer is not None:
        fields["rank_tee"] = str(outer)  # torchrun's local prefix outside torch's global one (local_ranks.py)
    if sig.id == "nccl_comm_init" and tee_local is not None and rank == tee_local and "rank" in fields:
        rank, tee_local = int(fields.pop("rank")), None  # NCCL's own rank in the communicator beats the local prefix
    if tee_local is not None and rank == tee_local:
        fields["tee_local"] = str(tee_local)  # the rank is torchrun's local one (see localise.enrich)
    if node is None:
        word = _NODE_WORD.search(text)
        node = word.group("node") if word else ctx.node
    if node is None and (ray := _RAY_ACTOR.match(text)):
        if ray.group("ip"):
            fields["ray_ip"] = ray.group("ip")
        else:
            node = ray.group("iphost")
    if node is None and (ompi := _OMPI_PROCESS.match(text)):
        node = ompi.group("host")
        fields.setdefault("pid", str(int(ompi.group("pid"))))
    if gpu is None:
        dev = _DEVICE_WORD.search(text)
        gpu = dev.group("dev") if dev else None
    if "pid" not in fields:
        pid = _first_int(_PID.search(text))
        if pid is not None:
            fields["pid"] = str(pid)
    shown = dict(fields)
    if node:
        shown.setdefault("node", node)
    if gpu:
        shown.setdefault("gpu", gpu)
    return Hit(
        signature=sig.id,
        category=category,
        role=role,
        source=ctx.source,
        line=line_no,
        text=raw.strip()[:MAX_TEXT],
        time=when,
        rank=rank,
        node=node,
        gpu=gpu,
        fields=fields,
        order=(ctx.file_index, line_no),
        restartable=sig.restartable if category is sig.category else None,
        summary=_summary(sig, shown),
        clock=clock if when is not None else ("boot" if boot is not None else ""),
    )
