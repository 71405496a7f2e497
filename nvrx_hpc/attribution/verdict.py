"""The verdict: one decision from every source (log hits, failure records, launcher events, health
snapshots, flight recorder, Slurm's job state). A pure function of its inputs; no I/O.

Rule of thumb, in order: the strongest kind of cause present wins (a root signature over a weak one, such as
a watchdog timeout, over cascade lines); among those, the earliest; GPU hardware evidence on the same node
explains an application or framework error there; everything after the root on other ranks is cascade. Lines
printed by the victims of a hang (timeouts, remote-peer errors, stacks inside a collective) name who they wait
on, not who printed them (`hang_suspects`); teardown lines alone give `unknown`; category, restartable and
action always agree. A failed node's ranks are the job's ranks no source places elsewhere; NaN on ranks of
several nodes, or one error or teardown on every rank, names no rank; `resources.judge` judges a resource."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from nvrx_hpc.attribution.aliases import short_hosts
from nvrx_hpc.attribution.api import (
    Action,
    Cascade,
    Category,
    Culprit,
    Evidence,
    Hit,
    TimelineEvent,
    Verdict,
)
from nvrx_hpc.attribution.box_copies import box_ranks_of_copies
from nvrx_hpc.attribution.bridge_host import bridge_advertiser
from nvrx_hpc.attribution.causes import Cause, Findings, cause_key, gather_causes, unplaced_gpu_error
from nvrx_hpc.attribution.dcp_ranks import failed_ranks
from nvrx_hpc.attribution.dead_peer import killed_first, raised_on_peer
from nvrx_hpc.attribution.driver_skew import kernels_unfit
from nvrx_hpc.attribution.fabric import FABRIC_WINDOW_S, LINK_EVENTS, SET_UP_SIGNATURES, fabric_wide
from nvrx_hpc.attribution.first_nan import first_bad_rank
from nvrx_hpc.attribution.gpu_bus import idle_gpu_rank, rank_on_device, ranks_on_buses
from nvrx_hpc.attribution.hang_suspects import DIVERGED, SUSPECT_WHY, dump_hosts, hang_suspects
from nvrx_hpc.attribution.job_shape import (
    beyond_one_node,
    each_saw_it_twice,
    gpus_held_by_others,
    one_node_hang,
    one_node_of_several,
    one_process,
)
from nvrx_hpc.attribution.lines import ranks_of
from nvrx_hpc.attribution.localise import known_ranks
from nvrx_hpc.attribution.localise import rank_nodes as map_rank_nodes
from nvrx_hpc.attribution.lone_exit import (
    crashed_on_node,
    every_node_alike,
    every_rank_of_node,
    exited_on_node,
    lone_exit_rank,
    lone_exit_tasks,
    raised_alike,
    the_only_host,
)
from nvrx_hpc.attribution.lost_node import lost_host, ranks_of_lost_node, taken_vm
from nvrx_hpc.attribution.node_wide import node_alone, node_wide_ranks
from nvrx_hpc.attribution.peers import names_peer, peer_suspect, peerless
from nvrx_hpc.attribution.recurrence import recurs_across_runs, same_node_every_run
from nvrx_hpc.attribution.rendezvous_split import own_rendezvous
from nvrx_hpc.attribution.resources import judge, killed_workers_ranks
from nvrx_hpc.attribution.signatures import NODE_LOST_SIGNATURES as NODE_LOST
from nvrx_hpc.attribution.signatures import VICTIM_SIGNATURES
from nvrx_hpc.attribution.timeline import build_timeline
from nvrx_hpc.attribution.unique_id_wait import waited_for_id

__all__ = ["Findings", "decide", "DEFAULT_RESTARTABLE"]

_BASE_CONFIDENCE = {3: 0.75, 2: 0.5, 1: 0.3, 0: 0.2}
_LOST_AFTER_S = 600.0  # a node's loss is declared this long at most after its peers' links to it failed
DEFAULT_RESTARTABLE = {
    Category.GPU_HARDWARE: True, Category.NETWORK: True, Category.HOST: True, Category.SCHEDULER: True,
    Category.APPLICATION: False, Category.NUMERICAL: False, Category.FRAMEWORK_CRASH: True,
    Category.DISTRIBUTED_HANG: True, Category.UNKNOWN: True,
}  # fmt: skip
# a cascade's end, a framework's weak error, a network error: on every node alike, they name no node
_ALIKE = {(Category.UNKNOWN, 1), (Category.FRAMEWORK_CRASH, 2), (Category.FRAMEWORK_CRASH, 3), (Category.NETWORK, 3)}


# the node a Ray line names by address: its raylet's or actor's prefix, or its memory monitor's report (round 61b)
_RAY_ADDRESS = re.compile(r"^\([\w-]+(?:,? pid=\d+)?, ip=([\d.]+)\)|Memory on the node \(IP: ([\d.]+),")
# the node a Ray memory kill was on, in the raylet's report or the memory monitor's: where no log names its host
_RAY_KILLED_ON = re.compile(r"\bat node \(ID: \w+, IP: ([\d.]+)\)|Memory on the node \(IP: ([\d.]+),")

_UNDER_THE_GPU = re.compile(r"CUDA error|CUDA out of memory|cuda runtime error|CUBLAS_STATUS|ncclUnhandledCudaError|"
                         r"Segmentation fault")  # a crash under a failing GPU's memory (round 98d)
_ENDED_BY_OPERATOR = ("k8s_pod_deleted", "k8s_node_drained")
_HELD_BACK = ("gpu_thermal_slowdown", "oom_no_killable")
_OWN_CODE = (Category.APPLICATION, Category.FRAMEWORK_CRASH)  # a process's own error: its own exit names it (100c)
_OWN_FAILURES = (Category.APPLICATION, Category.FRAMEWORK_CRASH, Category.NUMERICAL, Category.GPU_HARDWARE,
                 Category.HOST, Category.NETWORK)
# a node's limit that one process met (the kernel's OOM kill, its open-file limit): that process's rank with the node
_PROCESS_HOST_FAULTS = ("linux_oom_kill", "open_files_exhausted")


def _rank_nodes(f: Findings) -> dict[int, str]:
    return {**f.rank_hosts, **map_rank_nodes(f.hits, (*f.records, *f.events))}


def _shown_ranks(hits: Sequence[Hit]) -> set[int]:
    """The ranks torchrun's `--local-ranks-filter` lets print, on a one-node job (`set()` when it prints all)."""
    shown = [h.fields["shown"] for h in hits if h.signature == "torchrun_cmd" and h.fields.get("shown")
             and (h.fields.get("nnodes") or "1") == "1"]
    return {int(r) for r in shown[0].split(",")} if len(set(shown)) == 1 else set()


def _port_down_guess(f: Findings, timeline: tuple[TimelineEvent, ...]) -> Verdict | None:
    """Nothing failed in the logs, but one host's pasted port listing shows a port down: what the user suspected (a
    job stuck in its connection set-up, round 76b). A guess, so a low confidence; None unless exactly one host."""
    down = sorted(short_hosts({h.node for h in f.hits if h.signature == "ib_port_down" and h.node}))
    if len(down) != 1:
        return None
    return Verdict(
        category=Category.NETWORK, root_cause=f"no failure line; {down[0]} shows an InfiniBand port down",
        culprit=Culprit(nodes=tuple(down)), restartable=True, confidence=0.3, timeline=timeline,
        action=Action.EXCLUDE_AND_RETRY, exclude_nodes=tuple(down),
    )


def _pick_root(causes: list[Cause], rank_nodes: dict[int, str]) -> tuple[Cause | None, tuple[int, ...]]:
    """The root cause, and the ranks it hit when the cause itself names none (a GPU that failed under
    an application error on the same node explains that error: its ranks are the culprits)."""
    usable = [c for c in causes if c.strength >= 1]
    if not usable:
        return None, ()
    best = max(c.strength for c in usable)
    root = min((c for c in usable if c.strength == best), key=cause_key)
    if root.signature in ("launcher.culprit.exited", "horovod_missing_rank") and root.ranks:
        # The launcher saw *who* exited (Horovod: who never arrived); that rank's own output says *why* (not
        # Slurm's cancel line: the launcher's own kill of the step prints it on the same rank; not a hang's).
        why = [c for c in causes if c.kind in ("log", "record") and c.strength >= (3 if root.kind == "event" else 2)
               and set(c.ranks) & set(root.ranks) and c.category not in (Category.SCHEDULER, Category.DISTRIBUTED_HANG)]
        if why:
            root = min(why, key=cause_key)
    root = _specific(root, causes)
    if (root.category is Category.NETWORK and root.time is not None) or unplaced_gpu_error(root):
        # the peers of a node that went down see their links fail before the scheduler declares it lost (after its
        # timeout), a process on it a CUDA error (round 100e): that node's loss is the cause (round 83)
        lost = [c for c in causes if c.signature in NODE_LOST and c.strength == 3 and (root.time is None or (
            c.time is not None and 0 <= c.time - root.time <= _LOST_AFTER_S))]
        if lost:
            root = min(lost, key=cause_key)
    if root.signature == "slurm_node_prolog_error":
        # the prolog's health check caught a GPU the node's kernel log shows failing: the GPU (round 66b)
        gpu = [c for c in causes if c.category is Category.GPU_HARDWARE and c.strength >= 2
               and set(c.nodes) & set(root.nodes)]
        if gpu:
            return min(gpu, key=cause_key), ()
    if root.category in _OWN_CODE:
        nodes = set(root.nodes) | {rank_nodes[r] for r in root.ranks if r in rank_nodes}
        # a CUDA-level error or a crash is also explained by weaker evidence of its GPU (nvidia-smi's ECC count, 64b)
        least = 2 if _UNDER_THE_GPU.search(root.evidence.text) else 3
        for c in sorted(causes, key=cause_key):
            if c.category is Category.GPU_HARDWARE and c.strength >= least and (set(c.nodes) & nodes or
                                                                                set(c.ranks) & set(root.ranks)):
                return c, root.ranks
    if root.category is Category.SCHEDULER and (slow := [c for c in usable if c.signature in _HELD_BACK]):
        return min(slow, key=cause_key), ()  # a GPU slowed by its heat, or a node's memory, held it back (98, 101f)
    if root.signature in (*_ENDED_BY_OPERATOR, "stall_before_time_limit"):
        # a pod deleted or a node drained may be the cleanup after a failure the logs show, and a silence before a
        # time limit the hang that failure left: that failure, if any (round 87a's rank claimed twice)
        failed = [c for c in usable if c.strength == 3 and c.kind == "log" and c.category in _OWN_FAILURES]
        if failed:
            return min(failed, key=cause_key), ()
    return root, ()


def _specific(root: Cause, causes: list[Cause]) -> Cause:
    """A generic exception line carries a more specific cause printed with it (the OSError of a full disk,
    the RuntimeError of a CUDA OOM): the specific signature of the same rank and traceback wins. So does a full disk
    under torch.save's failed write (not restartable as it stands)."""
    if root.signature not in ("python_exception", "storage_write_failed"):
        return root
    near = [c for c in causes if c.kind == "log" and c.strength == 3 and c.signature != "python_exception"
            and c.category is not Category.DISTRIBUTED_HANG  # a stall report naming this rank: not its why
            and c.category is not Category.SCHEDULER  # nor the time limit that ended the job it hung (round 90g)
            # a NaN beside a framework's own assertion is the state its overflow handling choked on (fp16 loss
            # scaling skips such steps): the assertion is the failure (round 28, ColossalAI)
            and not (c.category is Category.NUMERICAL and root.category is Category.FRAMEWORK_CRASH)
            and (root.signature == "python_exception" or c.signature == "disk_full")
            and c.evidence.source == root.evidence.source and c.ranks == root.ranks
            and abs((c.evidence.line or 0) - (root.evidence.line or 0)) <= 30]  # fmt: skip
    return min(near, key=lambda c: abs((c.evidence.line or 0) - (root.evidence.line or 0))) if near else root


def _fmt_time(t: float | None) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t is not None else "an unknown time"


def _where(ranks: Sequence[int], nodes: Sequence[str], gpus: Sequence[str]) -> str:
    parts = []
    if nodes:
        parts.append("node " + ", ".join(nodes[:8]) + (" ..." if len(nodes) > 8 else ""))
    if ranks:
        parts.append("rank " + ", ".join(str(r) for r in ranks[:8]) + (" ..." if len(ranks) > 8 else ""))
    if gpus:
        parts.append("GPU " + ", ".join(gpus[:4]))
    return "; ".join(parts) or "no single place"


def decide(f: Findings) -> Verdict:
    """The verdict over `f` (see the module docstring for the rules)."""
    record_time = {r.rank: r.time for r in f.records if r.rank is not None and r.time is not None}
    for h in f.hits:  # torchrun's failure box says when its rank failed, like a failure record
        if h.signature == "elastic_box_rank" and h.rank is not None and h.time is not None:
            record_time.setdefault(h.rank, h.time)
    rank_nodes = _rank_nodes(f)
    causes = gather_causes(f, record_time)
    root, hit_ranks = _pick_root(causes, rank_nodes)
    timeline = build_timeline(f.events, f.records, f.health, f.hits, rank_nodes)
    if root is None and (guess := _port_down_guess(f, timeline)) is not None:
        return guess
    if root is None:
        return Verdict(
            category=Category.UNKNOWN,
            root_cause="no known failure signature, failure record or launcher event was found",
            culprit=Culprit(),
            restartable=True,
            confidence=0.1,
            timeline=timeline,
            action=Action.RETRY,
        )
    co = [c for c in causes if c.key == root.key and c.strength == root.strength]
    ranks = box_ranks_of_copies(co, f.hits) or sorted({r for c in co for r in c.ranks} | set(hit_ranks))
    nodes_from_co = True
    if (waited := waited_for_id((c.evidence.text for c in co), ranks)) is not None:
        ranks, nodes_from_co = [waited], False  # they all timed out waiting for that rank's NCCL id (90d)
    diverged = False  # the ranks' code took different paths into the hang: a restart replays it
    category = root.category
    found_by = ""
    universe = known_ranks(f.hits, (*f.seen_ranks, *(r.rank for r in f.records), *(e.rank for e in f.events)))
    hung = [c for c in causes if c.kind in ("fr", "event") and c.category is Category.DISTRIBUTED_HANG]
    if root.category is Category.DISTRIBUTED_HANG and hung:
        # Watchdog lines come from the victims; the flight recorder and hang events name the cause.
        root = min(hung, key=lambda c: (c.kind != "fr", cause_key(c)))
        co = hung
        ranks = sorted({r for c in hung for r in c.ranks})
    elif root.kind == "log" and root.signature in VICTIM_SIGNATURES and (
            dead := killed_first(f.hits, rank_nodes, VICTIM_SIGNATURES)):
        category, ranks, nodes_from_co = Category.UNKNOWN, [dead.rank], False  # they wait on a rank killed first
        found_by = f"; rank {dead.rank} was killed ({dead.signal}) before these timeouts, which wait on it"
    elif root.kind == "log" and root.signature in (*VICTIM_SIGNATURES, "stall_before_time_limit"):
        # Who prints a timeout or a peer error, or goes quiet until the time limit, waits on someone else: name whom.
        suspects, how = hang_suspects(f.hits, universe)
        ranks, nodes_from_co = list(suspects), False
        found_by = SUSPECT_WHY[how]
        if how == "elsewhere":  # the hosts the suspects' own dumps were taken on
            rank_nodes = {**dump_hosts(f.hits), **rank_nodes}
        diverged = how in DIVERGED
    elif waited is not None and root.strength == 1:  # a rank that never came to its communicator: a hang (101a)
        category, found_by = Category.DISTRIBUTED_HANG, "; the others timed out waiting for its NCCL unique id"
    elif root.strength == 1:  # only teardown lines (srun's task exits, torchrun's summary): its cause is not here
        category = Category.UNKNOWN
    if root.category is Category.GPU_HARDWARE and not ranks:
        ranks = (sorted(_ranks_under_gpu(root, causes, rank_nodes)) or ranks_on_buses(root.gpus, root.nodes, f.hits,
                 rank_nodes) or exited_on_node(root.nodes, f.hits, unplaced=True)
                 or (lone_exit_rank(f.hits) if not root.nodes else []))
    if (root.category is Category.GPU_HARDWARE or root.signature == "linux_oom_kill") and not ranks \
            and len(set(root.nodes)) == 1:
        # A GPU that faulted (fell off the bus, hung), or a process the kernel killed (round 55b), silences its rank
        # while the others time out: the silent ranks no source places on another node, one per faulted GPU (a
        # whole node silent says nothing about which of its ranks had the GPU).
        suspects, how = hang_suspects(f.hits, universe)
        silent = [r for r in suspects if how == "silent" and rank_nodes.get(r, root.nodes[0]) == root.nodes[0]]
        ranks = silent if len(silent) <= max(1, len({g for c in co for g in c.gpus})) else []
    # Teardown lines name their ranks in srun's task lists: all of the job's ranks ended alike.
    named = set(ranks) | {r for h in f.hits if root.kind == "log" and root.strength == 1
                          and h.signature == root.signature for r in ranks_of(h.fields.get("tasks", ""))}  # fmt: skip
    if root.kind == "log" and len(named) >= 2 and universe and named >= universe:
        ranks, nodes_from_co = [], False  # every rank failed the same way: the job's code or data, not one rank
    listed = failed_ranks(root.evidence.text) if root.kind == "log" else []
    if root.kind == "log" and not listed and len(ranks) > 1:  # each rank's own error, then the checkpoint's on
        # every rank that lists which of them failed (a storage error seen by several ranks, one rank's write lost)
        dcp = {r for h in f.hits for r in failed_ranks(h.text)}
        listed = sorted(dcp) if dcp and dcp < set(ranks) else []
    if listed:
        ranks, nodes_from_co = listed, False  # every rank raises a checkpoint's failure: those it lists failed
    if root.kind == "log" and waited is None and every_node_alike(root.signature, f.hits, rank_nodes, {
            *f.listed_nodes, *f.job_nodes}, weak=(category, root.strength) in _ALIKE):
        ranks, nodes_from_co = [], False  # every node of the job ended alike: none stands out (a framework
        # crash that several ranks met alike is then not restartable, below; a network error is the fabric's)
    if category is Category.APPLICATION and root.kind == "log" and not listed and raised_alike(
            (c.evidence.text for c in co), ranks, rank_nodes, f.hits, (*f.listed_nodes, *f.job_nodes),
            {n for c in co for n in c.nodes}):
        ranks, nodes_from_co = [], False  # one error raised alike on every node: the job's code, no rank of it
    if (category in _OWN_CODE or root.signature in ("disk_full", "shm_exhausted")) and root.kind == "log" and not ranks:
        ranks = lone_exit_rank(f.hits)  # an unranked traceback (or OSError): the one task that exited on its own
    if category is Category.HOST and root.kind == "log" and not ranks and not any(c.nodes for c in co):
        ranks = lone_exit_tasks(f.hits)  # a node's fault that names no node: the one node srun saw fail on its own
    if root.signature == "host_kernel_fault" and not ranks:
        ranks = crashed_on_node(sorted({n for c in co for n in c.nodes}), f.hits)  # the process the fault hit
    if root.signature == "linux_oom_kill" and root.kind == "log" and not ranks:
        ranks = killed_workers_ranks(f.hits)  # the rank whose data loader's worker the kernel killed
    if (category in (Category.APPLICATION, Category.FRAMEWORK_CRASH) or root.signature in _PROCESS_HOST_FAULTS) \
            and root.kind == "log" and not ranks:
        on = sorted({n for c in co for n in c.nodes})  # the one rank seen to end there, or each rank raised it
        at = (root.evidence.source, root.evidence.line)
        ranks = (rank_on_device(root.gpus, rank_nodes) if root.signature == "cuda_oom" else []) \
            or every_rank_of_node(at, on, f.hits, rank_nodes) or exited_on_node(on, f.hits) \
            or idle_gpu_rank(f.hits, rank_nodes, universe)
    if category in (Category.APPLICATION, Category.FRAMEWORK_CRASH) and root.kind == "log" and ranks \
            and set(ranks) <= _shown_ranks(f.hits):
        ranks, nodes_from_co = [], False  # torchrun printed only these ranks' output: the others may have failed alike
    lost_too = root.category is Category.HOST and {n for c in causes if c.signature in NODE_LOST for n in c.nodes}
    lost: set[str] = set()
    if not ranks and (root.signature in NODE_LOST or (lost_too and set(root.nodes) == lost_too)):
        # The node was lost (a host fault that Slurm also reports as a node failure): all its ranks. Slurm's
        # line may name only a survivor: then the node Slurm or srun's teardown says is gone (lost_node.py).
        lost = {n for c in co for n in c.nodes} or {n for n in (lost_host(f.hits, rank_nodes),) if n}
        ranks = ranks_of_lost_node(lost, universe | set(rank_nodes), rank_nodes)
    nodes = sorted(({n for c in co for n in c.nodes} if nodes_from_co else set()) | lost
                   | {rank_nodes[r] for r in ranks if r in rank_nodes})  # fmt: skip
    gpus = sorted({g for c in co for g in c.gpus}) if nodes_from_co else []
    same = [(c.signature, c.evidence.text) for c in causes if c.strength == 3 and set(c.nodes) == set(nodes)]
    ranks = node_wide_ranks(root.category, same, nodes, ranks, rank_nodes)  # a part the node shares (node_wide.py)
    if root.kind == "log" and node_alone(root.category, category, root.signature, ranks, nodes, bool(lost)):
        ranks = []  # several ranks of one node met its adapter, link, disk or container failing: the node's
    peer_unknown = False
    dead = killed_first(f.hits, rank_nodes) if category is Category.NETWORK and root.kind == "log" else None
    if dead is not None:  # a rank killed before its peers' network errors: they are its echo (dead_peer.py)
        category, ranks, nodes, gpus = Category.UNKNOWN, [dead.rank], [dead.node] if dead.node else [], []
        found_by = f"; rank {dead.rank} was killed ({dead.signal}) before these errors, which are its echo"
    elif category is Category.NETWORK and root.kind == "log" and root.signature != "nccl_ib_local_error" \
            and (names_peer(root.evidence.text) or peerless(root)):
        # hosts report errors talking to a peer: the peer most of them name (a host's own link going down stays its)
        peer = peer_suspect(f.hits, rank_nodes, f.addr_hosts)
        if peer is not None:
            ranks, nodes, gpus, peer_unknown = [], [peer.node] if peer.node else [], [], peer.node is None
            found_by = "; " + peer.explain()
        if peer is not None and peer.node and (echo := raised_on_peer(peer.node, causes, root)) is not None:
            category, ranks, found_by = echo.category, list(echo.ranks), f"; {peer.node} raised first: {echo.summary}"
    bridge = root.signature == "bridge_address_unreachable"
    advertiser = bridge_advertiser(root.evidence.text, f.hits) if bridge else None
    if advertiser is not None:  # the host that gave out the bridge's address, not the peer that dialled it
        ranks, nodes, gpus = [], [advertiser], []
        found_by = f"; {advertiser} advertised that address, which the others dialled"
    if root.signature == "loopback_peer_refused" and len(f.loopback_hosts) == 1:
        ranks, nodes, gpus = [], sorted(f.loopback_hosts), []  # the host whose name resolves to loopback advertised it
    hosts = {h.node for h in f.hits if h.node} or set(f.prompt_hosts)
    p2p_stall = category is Category.DISTRIBUTED_HANG and f.p2p_off_trains and len(hosts) == 1
    if p2p_stall:  # a hang on one host's GPUs that trains with peer-to-peer copies off: its PCIe path (ACS, IOMMU)
        category, ranks, nodes, gpus = Category.HOST, [], sorted(hosts), []
        found_by = "; the run trains with NCCL_P2P_DISABLE=1: the host's PCIe path stalls the GPUs' peer copies"
    downs = [(n, c.time, c.evidence.text, c.evidence.source) for c in co for n in c.nodes if c.signature in LINK_EVENTS]
    together = fabric_wide(downs) if root.signature in LINK_EVENTS else 0
    if together:  # links of several hosts lost at once: the switch they share, not one node (fabric.py)
        ranks, nodes, gpus = [], [], []
        found_by = f"; {together} hosts lost their links within {FABRIC_WINDOW_S:.0f} s: the fabric, not one node"
    if category is Category.NETWORK and root.kind == "log" and not ranks and len(nodes) >= 3:
        nodes, gpus = [], []  # three or more hosts' own errors, no peer named: the fabric between them (round 50b)
    elif category is Category.NETWORK and root.kind == "log" and len(nodes) == 2 and each_saw_it_twice(co) \
            and not any(names_peer(c.evidence.text) for c in co) \
            and {h.node for h in f.hits if h.node} | set(f.listed_nodes) | set(f.job_nodes) <= set(nodes):
        # both hosts of the job failed alike on their own links, more than once each, naming no peer: the fabric
        # between them or its set-up (round 92c: a RoCE fabric without flow control), not one node
        ranks, nodes, gpus = [], [], []
    set_up = category is Category.NETWORK and root.signature in SET_UP_SIGNATURES and root.restartable is False
    if set_up:
        ranks, nodes, gpus = [], [], []  # one set-up error on several hosts (fabric.py): the set-up, no one node
    # A host resource that ran out (memory, a disk, /dev/shm): the job's demand, one node's or a shared FS's.
    resource = judge(root.signature, root.evidence.text, root.time, ranks, nodes, hits=f.hits,
                     rank_nodes=rank_nodes, disks=f.disks, stamps=f.stamps,
                     job_nodes=(*f.job_nodes, *f.listed_nodes)) if root.kind == "log" else None  # fmt: skip
    if resource is not None:
        gpus, found_by = gpus if list(resource.nodes) == nodes else [], found_by + resource.why
        ranks, nodes = list(resource.ranks), list(resource.nodes)
    if category is Category.NUMERICAL and (first := first_bad_rank(f.hits)) is not None:
        ranks, nodes, gpus = [first], [rank_nodes[first]] if first in rank_nodes else [], []  # where the NaN began
    elif (category is Category.NUMERICAL or root.signature == "cuda_oom") and (len(nodes) >= 2
                                                                             or beyond_one_node(ranks, universe, f)):
        # NaN (or CUDA OOM) on several nodes: the run diverged, no one GPU did it; one rank's on two follows its shard
        ranks, nodes, gpus = ranks if len(ranks) == 1 and len(nodes) >= 2 else [], [], []
    elif category is Category.NUMERICAL and len(ranks) >= 2 and not one_node_of_several(ranks, rank_nodes, f):
        ranks, nodes, gpus = [], [], []  # several ranks' loss went bad together: the run diverged, no GPU did it
    if category is Category.SCHEDULER:  # a time limit or a cancel is the job's; a cloud may take back one VM
        (nodes, ranks), gpus = taken_vm(root.signature, nodes, universe | set(rank_nodes), rank_nodes), []
    if not nodes and not set_up and root.kind == "log" and (m := _RAY_ADDRESS.search(root.evidence.text)):
        nodes = [m.group(1) or m.group(2)]  # Ray names the node only by its address, and no log gives its host name
    if not nodes and (category in (Category.GPU_HARDWARE, Category.HOST) or category is Category.UNKNOWN
                      and len(ranks) == 1 or one_node_hang(category, ranks, universe, f.hits)) \
            and root.signature != "disk_full":
        nodes = the_only_host(f.hits, (*f.listed_nodes, *f.job_nodes))  # a one-node job: where it happened (lone_exit)
        if not nodes and not f.listed_nodes and not f.job_nodes and not any(h.node for h in f.hits):
            # the host of the prompts the job was started at, when no line names another (round 68a: the GPU's
            # Xid in a dmesg pasted beside `(lf) hsun@a100-ws02:~$ python train.py`)
            at = f.prompt_hosts or f.shell_hosts
            nodes = sorted(at) if len(at) == 1 else []
    if not ranks and len(nodes) == 1 and category in (Category.GPU_HARDWARE, Category.HOST) \
            and one_process(universe | set(rank_nodes), gpus, f) and not {*f.listed_nodes, *f.job_nodes} - set(nodes):
        ranks = [0]  # one process on one node: the node's fault hit it (round 68a's `python train.py`)
    killed_on = [m.group(1) or m.group(2) for c in co
                 if c.kind == "log" and (m := _RAY_KILLED_ON.search(c.evidence.text))]
    nodes = killed_on[:1] if not nodes and root.kind == "log" and killed_on else nodes  # Ray's report of the kill (78a)
    nodes, gpus = short_hosts([f.addr_hosts.get(n, n) for n in nodes]), short_hosts(gpus)  # an address: its host (14b)
    if (split := own_rendezvous(root.signature, f.hits)) is not None:
        category, ranks, nodes, gpus, found_by = Category.APPLICATION, [], [], [], f"; {split}"  # the launch command
    held = root.signature == "cuda_oom" and root.kind == "log" and len(nodes) <= 1 and gpus_held_by_others(co)
    unfit = kernels_unfit(root.evidence.text, ranks, rank_nodes, f) if root.kind == "log" else None
    category, skew = unfit or category, unfit is Category.HOST  # the build's, or one node's driver (driver_skew.py)
    if held or skew:
        category, ranks, gpus = Category.HOST, [], []
        found_by = "; only this node's ranks could not run the job's CUDA kernels: its driver" if skew else \
            "; another process held each rank's own GPU (a previous job's, left running on the node)"
    shared = same_node_every_run(root.signature, f.hits) if category is Category.FRAMEWORK_CRASH else None
    if shared is not None:  # the crash came back on that node only, in runs whose other nodes changed
        category, ranks, nodes, gpus, found_by = Category.HOST, [], [shared], [], f"; every run that crashed so had " \
            f"{shared} in it, and other nodes each time"
    restartable = root.restartable if root.restartable is not None else DEFAULT_RESTARTABLE[category]
    if category in (Category.APPLICATION, Category.NUMERICAL):
        restartable = False  # the workload's own failure comes back on any node
    elif category is Category.UNKNOWN or held or skew:
        restartable = True  # unknown; on another node, or once the node's stale processes (or old driver) are gone
    elif resource is not None:
        restartable = resource.restartable
    elif p2p_stall:
        restartable = False  # the host's set-up: every run on it stalls alike
    alike = not (ranks or nodes) and (len({r for c in co for r in c.ranks}) >= 2 or len(co) >= 3  # none stands out
                                      or len({n for c in co for n in c.nodes}) >= 2)
    diverged = diverged or category is Category.DISTRIBUTED_HANG and root.kind == "log" and list(ranks) in ([], [0]) \
        and (ranks or not nodes)
    if diverged or category is Category.FRAMEWORK_CRASH and (alike or recurs_across_runs(root.signature, f.hits)):
        restartable = False  # the code took its own path (a hang no rank or node explains, or rank 0 alone: its own
        # work, an evaluation or a save), ranks crashed alike, or a rerun elsewhere met it again
    corroborated = any(
        c.kind != root.kind and (set(c.ranks) & set(ranks) or set(c.nodes) & set(nodes)) for c in causes
    ) or (root.kind != "log" and any(c.kind == "log" and c.category is root.category for c in causes))
    rivals = {c.category for c in causes if c.strength == root.strength and c.category is not root.category}
    confidence = _BASE_CONFIDENCE[root.strength] + (0.1 if corroborated else 0) + (0.05 if nodes or ranks else 0)
    confidence -= 0.1 if rivals and root.strength < 3 else 0
    confidence -= 0.15 if peer_unknown else 0
    if category is Category.UNKNOWN:
        confidence = min(confidence, 0.3)
    unhealthy = {p.node for p in f.health}
    if not restartable:
        action, exclude = Action.STOP, ()
    elif nodes and (category.infra or set(nodes) & unhealthy) and (resource is None or resource.exclude):
        action, exclude = Action.EXCLUDE_AND_RETRY, tuple(nodes)
    else:
        action, exclude = Action.RETRY, ()
    # the job's one pod on the culprit node: users and their labels name it as often as the node (round 86a)
    on_node = [p for p, n in f.pod_nodes.items() if short_hosts([n]) == nodes != [p]] if len(nodes) == 1 else []
    pods = tuple(on_node) if len(on_node) == 1 else ()  # several pods of the job there: none stands out
    in_co = {id(c) for c in co}  # by identity: comparing causes field by field is quadratic on a long log
    rest = [c for c in causes if id(c) not in in_co and c.kind == "log" and c.signature != "traceback_start"]
    cascade = _cascade(rest)
    text = f"{root.summary} ({_where(ranks, nodes, gpus)}) at {_fmt_time(root.time)}{found_by}"
    if cascade:
        total = sum(c.count for c in cascade)
        text += f"; {total} later line(s) on {len({r for c in cascade for r in c.ranks})} rank(s) are its cascade"
    evidence = [c.evidence for c in sorted(co, key=cause_key)[:6]]
    evidence += [c.evidence for c in causes if c.kind != "log" and id(c) not in in_co][:8]
    evidence += [Evidence(c.source, c.first, line=c.line, entry=c.signature, role="cascade") for c in cascade[:8]]
    return Verdict(
        category=category,
        root_cause=text,
        culprit=Culprit(nodes=tuple(nodes), ranks=tuple(ranks), gpus=tuple(gpus), pods=pods),
        restartable=restartable,
        confidence=max(0.05, min(0.99, confidence)),
        evidence=tuple(evidence),
        timeline=timeline,
        cascade=tuple(cascade),
        action=action,
        exclude_nodes=exclude,
        signature=root.signature,
    )


def _ranks_under_gpu(root: Cause, causes: list[Cause], rank_nodes: dict[int, str]) -> set[int]:
    """The ranks a GPU fault with no rank of its own hit: ranks whose own root errors (CUDA, ECC, a crash)
    ran on its node, or GPU errors on ranks whose node nobody says."""
    found: set[int] = set()
    for c in causes:
        if c is root or c.kind not in ("log", "record") or c.strength != 3:
            continue
        if c.category not in (Category.GPU_HARDWARE, Category.APPLICATION, Category.FRAMEWORK_CRASH) \
                and c.signature != "gpu_devices_busy":  # a GPU the driver wants reset refuses work: "busy" (round 88b)
            continue
        for r in c.ranks:
            node = rank_nodes.get(r) or (c.nodes[0] if c.nodes else None)
            if (node is not None and node in root.nodes) or (node is None and c.category is Category.GPU_HARDWARE):
                found.add(r)
    return found


def _cascade(causes: list[Cause]) -> list[Cascade]:
    groups: dict[str, list[Cause]] = defaultdict(list)
    for c in sorted(causes, key=cause_key):
        groups[c.signature].append(c)
    out = [
        Cascade(sig, len(cs), tuple(sorted({r for c in cs for r in c.ranks})),
                tuple(sorted({n for c in cs for n in c.nodes})), cs[0].evidence.text, cs[0].evidence.source,
                cs[0].evidence.line)
        for sig, cs in groups.items()
    ]  # fmt: skip
    return sorted(out, key=lambda c: -c.count)
