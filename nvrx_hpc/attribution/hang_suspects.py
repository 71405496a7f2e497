"""The ranks a hang waits on, judged from its victims' lines (`hang_suspects`), and how they were found.

Pure functions over hits; verdict.py asks them when a hang's root is a victim's timeout.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit, Role
from nvrx_hpc.attribution.lines import ranks_of
from nvrx_hpc.attribution.localise import ready_ranks
from nvrx_hpc.attribution.recurrence import job_files
from nvrx_hpc.attribution.signatures import VICTIM_SIGNATURES

__all__ = ["hang_suspects", "dump_hosts", "SUSPECT_WHY", "DIVERGED"]

_ABORTED = re.compile(r"communicator was aborted")  # a rank's NCCL communicator torn down under it
_PG_OF_LINE = re.compile(r"\[PG (?:ID )?(\d+)\b")  # the process group a watchdog line names
_DESYNC_RANK = re.compile(r"Rank (\d+) is running")  # TORCH_DISTRIBUTED_DEBUG=DETAIL's mismatch report
_BANNERS = ("pid_rank_banner", "pyspy_dump_banner")  # lines that name the rank of the dump below them
_CMD_RANK = re.compile(r"(?<![\w-])--(?:distributed[-_]|global[-_])?rank[= ](\d{1,6})\b")
_CMD_LOCAL_RANK = re.compile(r"(?<![\w-])--local[-_]rank[= ](\d{1,6})\b")
_FEW_CALLS = 16  # a rank fallen a few collectives behind the others, not another group's count


# Ways of finding suspects that took another code path than the others (another operation at the same call, the
# only rank to enter the collective, a desync report, a rank that left the loop before the others): the program's own
# divergence, which a restart replays
DIVERGED = ("mismatch", "alone", "desync", "ahead", "departed")

SUSPECT_WHY = {  # how hang_suspects found them -> the verdict's words
    "missing": "; named because the others' stall reports list them as missing",
    "behind": "; named because they never issued the collective the others wait on",
    "ahead": "; named because their watchdog counted more calls than every other rank's: their code went its own way",
    "silent": "; named because they report nothing while the others time out",
    "late": "; named because its peer timed out waiting and it reported only the peer's abort, after",
    "alone": "; named because it alone waited in the collective: the job's other ranks, heard from before, never "
             "entered it",
    "mismatch": "; named because they timed out in another operation than every other rank",
    "desync": "; named because every collective-mismatch report names it, or it alone runs a collective whose "
              "fingerprint differs from the one the other ranks share",
    "elsewhere": "; named because its stack dump waits outside any collective while the others' wait in one",
    "departed": "; named because srun lists every other rank as ended by the teardown's signal and not it: it had "
                "left already, and the others waited for it",
    "none": "; every rank reports it, so the logs do not say who is late",
}


def _desynced(hits: Sequence[Hit]) -> tuple[int, ...] | None:
    """The rank that every collective-mismatch report names, when two or more reports name it and no other; else
    the ranks whose fingerprint differs from the one that at least three times as many ranks share (each report
    gives two ranks' fingerprints: `Rank 11 is running ...[268435456]..., but Rank 0 is running ...[301989888]`,
    round 85b: rank 11 names rank 0 while the others name rank 11)."""
    desyncs = [h for h in hits if h.signature == "collective_desync"]
    reports = [{int(r) for r in _DESYNC_RANK.findall(h.text)} | {int(h.fields[k]) for k in ("arank", "brank")
                                                                  if k in h.fields} for h in desyncs]  # fmt: skip
    reports = [r for r in reports if r]
    common = set.intersection(*reports) if len(reports) >= 2 else set()
    if len(common) == 1:
        return tuple(common)
    prints: dict[int, str] = {}
    for h in desyncs:
        for rank, key in (("arank", "afp"), ("brank", "bfp")):
            if rank in h.fields and key in h.fields:
                prints.setdefault(int(h.fields[rank]), h.fields[key])
    by_print: dict[str, list[int]] = defaultdict(list)
    for rank, fp in prints.items():
        by_print[fp].append(rank)
    if len(by_print) != 2:
        return None
    odd, usual = sorted(by_print.values(), key=len)
    return tuple(sorted(odd)) if len(usual) >= 3 * len(odd) else None


def _process_group(text: str) -> str | None:
    """The process group a watchdog line names (`[PG ID 6 PG GUID 31(...) Rank 0]`, `[PG 3 Rank 4]`), if any."""
    m = _PG_OF_LINE.search(text)
    return m.group(1) if m else None


def _odd_operation(victims: Sequence[Hit]) -> tuple[int, ...] | None:
    """The ranks, a quarter of the reporters at most (one at least), whose timed-out work differs from that of the
    others, at least three, which agree on it, in another operation (at the same call or another: a rank that took
    another path has counted its calls differently too, round 30; the two ranks of an empty validation shard,
    round 53a). One process group's watchdog lines only."""
    ops: dict[int, tuple[str | None, str, str, str | None]] = {}
    for h in victims:
        # PyTorch 1.x's lines count no calls: their operation and shape alone (round 104b)
        if h.signature == "watchdog_timeout" and h.fields.get("op"):
            # every rank of these gives the same size; an all-to-all's may differ from rank to rank, but not when all
            # ranks but one agree on it (a capacity-padded MoE dispatch whose one rank had a short last batch, round
            # 89c): two sizes alone are kept apart below
            size = h.fields.get("numel") or h.fields.get("shape")
            ops.setdefault(h.rank, (_process_group(h.text), h.fields.get("seq") or "", h.fields["op"], size))
    if len({bool(work[1]) for work in ops.values()}) > 1:
        return None  # some lines count calls and some do not: two versions' lines, not one collective's
    if len(ops) < 4 or len({work[0] for work in ops.values()}) != 1 or len(job_files(victims)) > 1:
        return None  # two runs' lines (`slurm-3291177.out`, `slurm-3304581.out`) time out in two runs' work
    counts: dict[tuple[str | None, str, str, str | None], list[int]] = {}
    for rank, work in ops.items():
        counts.setdefault(work, []).append(rank)
    if len(counts) != 2:
        return None
    (lone_work, lone), (work, _agreeing) = sorted(counts.items(), key=lambda item: len(item[1]))
    # another operation, or the same all-reduce of another size (a rank that left its epoch early reduces its
    # metrics while the others reduce gradients, round 31)
    if len(lone) > max(1, len(ops) // 4) or len(_agreeing) < 3 or lone_work[2:] == work[2:]:
        return None
    return tuple(sorted(lone))


def _gap_needed(ahead: set[int | None], victims: Sequence[Hit]) -> int:
    """How many calls further on the few ranks ahead must wait to have gone their own way: two; one when a lone rank
    ahead waits in another operation than all the others, which agree (rank 0 in an all-reduce while fifteen ranks
    wait in its broadcast, round 104g), not a call that merely finished first there."""
    ops: dict[int, str] = {}
    for h in victims:
        if h.signature == "watchdog_timeout" and h.rank is not None and h.fields.get("op"):
            ops.setdefault(h.rank, h.fields["op"])
    lone = next(iter(ahead)) if len(ahead) == 1 else None
    others = {op for r, op in ops.items() if r != lone}
    return 1 if lone in ops and len(others) == 1 and ops[lone] not in others and len(ops) >= 4 else 2


def _out_of_step(victims: Sequence[Hit]) -> tuple[tuple[int, ...], str]:
    """The ranks, fewer than half the reporters (one of two), whose watchdog timed out in an earlier call of the same
    operation and process group than the others' (`SeqNum=5184` against `5186`, a few calls apart): the others
    issued later ones, so these fell behind and the others wait for them (round 74a): "behind". Or a quarter at most
    that timed out two or more calls after all the others, which agree: their code went its own way (round 80d):
    "ahead".
    """
    seqs: dict[int, tuple[str | None, str, int]] = {}
    for h in victims:
        if h.signature == "watchdog_timeout" and h.fields.get("seq", "").isdigit() and h.fields.get("op"):
            seqs.setdefault(h.rank, (_process_group(h.text), h.fields["op"], int(h.fields["seq"])))
    if len(seqs) < 2 or len({work[:2] for work in seqs.values()}) != 1 or len(job_files(victims)) > 1:
        return (), "none"
    first, last = min(work[2] for work in seqs.values()), max(work[2] for work in seqs.values())
    if last - first > _FEW_CALLS:  # thousands apart: two groups' counts that the lines do not tell apart
        return (), "none"
    lagging = sorted(rank for rank, work in seqs.items() if work[2] < last)
    if lagging and len(lagging) <= max(1, (len(seqs) - 1) // 2):  # fewer than half (one of two)
        return tuple(lagging), "behind"
    # the other way round: a few ranks, a quarter at most, counted more calls than all the others, which agree: they
    # took another path (a rank with no data left skipped ahead, round 80d)
    ahead = sorted(rank for rank, work in seqs.items() if work[2] > first)
    skew = min((work[2] for work in seqs.values() if work[2] > first), default=first) - first
    # one call ahead is a kernel that finished before the others' did (round 30); two or more, calls they never made
    if ahead and skew >= 2 and len(ahead) <= max(1, len(seqs) // 4) and len(seqs) - len(ahead) >= 3:
        return tuple(ahead), "ahead"
    return (), "none"


def _process_rank(h: Hit, one_host: bool) -> int | None:
    """The rank py-spy's `Process 418823: python train.py ... --distributed-rank 1` names for its dump; on a
    one-node job, torch.distributed.launch's `--local_rank=3` is the rank too (round 77c)."""
    if h.signature != "pyspy_process":
        return None
    m = _CMD_RANK.search(h.text) or (_CMD_LOCAL_RANK.search(h.text) if one_host else None)
    return int(m.group(1)) if m else None


def _dumps(hits: Sequence[Hit]) -> tuple[dict[int, bool], dict[int, str]]:
    """Each ranked stack dump: rank -> whether its main thread waits in a collective, and rank -> the host the dump
    was taken on (where its lines are placed). A dump is a file with one main thread, or in a file of several, what
    follows a banner naming its rank (`# py-spy dump --pid 2281 (node-3, global rank 0)`, round 32)."""
    by_source: dict[str, list[Hit]] = defaultdict(list)
    one_host = len({h.node for h in hits if h.node}) <= 1
    for h in hits:
        if h.signature in ("stack_main_thread", "stack_in_collective", *_BANNERS) \
                or _process_rank(h, one_host) is not None:
            by_source[h.source].append(h)
    inside: dict[int, bool] = {}
    hosts: dict[int, str] = {}
    for seq in by_source.values():
        mains = [h for h in seq if h.signature == "stack_main_thread"]
        if len(mains) == 1 and mains[0].rank is not None:
            inside[mains[0].rank] = any(h.signature == "stack_in_collective" for h in seq)
            if mains[0].node:
                hosts[mains[0].rank] = mains[0].node
            continue
        current: int | None = None  # the rank whose banner the lines are under
        for h in sorted(seq, key=lambda h: h.line):
            if h.signature in _BANNERS or (named := _process_rank(h, one_host)) is not None:
                current = h.rank if h.signature in _BANNERS or h.rank is not None else named
            elif current is not None and (h.signature == "stack_main_thread" or current in inside):
                inside[current] = inside.get(current, False) or h.signature == "stack_in_collective"
                if h.node:
                    hosts.setdefault(current, h.node)
    return inside, hosts


def dump_hosts(hits: Sequence[Hit]) -> dict[int, str]:
    """rank -> the host its stack dump was taken on (see `_dumps`)."""
    return _dumps(hits)[1]


def _dumped_outside_collectives(hits: Sequence[Hit]) -> tuple[int, ...] | None:
    """The ranks whose stack dump shows no collective frame, when at least as many dumps sit in one (`_dumps`)."""
    inside, _hosts = _dumps(hits)
    waiting = {rank for rank, waits in inside.items() if waits}
    elsewhere = set(inside) - waiting
    if not waiting or not elsewhere or len(elsewhere) > len(waiting):
        return None
    return tuple(sorted(elsewhere))


def _two_ranks_late(victims: Sequence[Hit], universe: set[int]) -> tuple[int, ...] | None:
    """Of two ranks, one timed out in its watchdog and the other reported only after it (the peer's abort: `remote
    process exited`): the other had not arrived when the first gave up (round 82c: still compiling its kernels)."""
    timed = [h for h in victims if h.signature == "watchdog_timeout" and h.time is not None]
    if len(universe) != 2 or len({h.rank for h in timed}) != 1:
        return None
    other = universe - {timed[0].rank}
    first = min(h.time for h in timed)
    after = sorted((h for h in victims if h.rank in other), key=lambda h: h.order)
    # its report's first line, which carries the program's own stamp (the message's next lines carry none, or a
    # log collector's)
    said = next((h.time for h in after if h.time is not None), None)
    if said is not None and said > first and all(h.signature != "watchdog_timeout" for h in after):
        return tuple(other)
    return None


def _departed(hits: Sequence[Hit], universe: set[int]) -> tuple[int, ...] | None:
    """The rank, one of eight at most, that srun's teardown does not list when it lists every other rank as ended by
    its signal (`asr-n031: tasks 1-7: Terminated`, `asr-n032: tasks 8-15: Terminated`): srun reports no task that
    exited 0, so that one had left before, and the others waited in a collective for it (rank 0 ended its training
    loop early, round 101g). Only where srun's tasks are the ranks: its lists must cover all the others."""
    ended: set[int] = set()
    for h in hits:
        if h.signature == "srun_task_exit":
            if h.fields.get("what") not in ("Terminated", "Killed"):
                return None  # a task that failed of its own: not a wait's teardown
            ended.update(ranks_of(h.fields.get("tasks", "")))
    gone = universe - ended
    if len(ended) >= 3 and ended <= universe and 1 <= len(gone) <= max(1, len(universe) // 8):
        return tuple(sorted(gone))
    return None


def hang_suspects(hits: Sequence[Hit], universe: set[int]) -> tuple[tuple[int, ...], str]:
    """The ranks a hang waits on, judged from its victims' lines, and how they were found.

    1. Behind: a rank whose last enqueued collective is before the one the others timed out on
       (`Timeout at NCCL work: N, last enqueued NCCL work: M`, or a dump's `Last enqueued NCCL work: M`)
       never issued it; so too a rank whose watchdog timed out a few calls of the same operation before the
       others', or a few that counted more calls than all the others (`_out_of_step`).
    2. Silent: when most of the job's ranks report a timeout (or sit in a collective in their stack
       dumps), the ranks that report nothing are the suspects (at most a third of the ranks).
    3. Mismatch: every reporter but one timed out in the same work (sequence number and operation), that one in
       another operation: its code took another path (rounds 28 and 30).
    4. Elsewhere: stack dumps, one per rank, of which some wait inside a collective and at most as many outside
       any: those outside (round 30).
    5. Alone: one rank of at least four reports the timeout, the others, whose lines the logs hold, report
       nothing, and the launcher saw only that rank end: only it entered the collective (a rank-0-only path's
       barrier, round 26), so it is where the job's ranks went out of step.
    Otherwise nobody: every rank reports, so the logs do not say who is late. Before all: the ranks
    Horovod's stall inspector lists as missing (`[missing ranks: 3, 6]`); when it lists every rank but one, that
    one alone submitted the op (a rank-0-only branch's extra broadcast, round 27) and is named. First of all:
    the one rank that every report of TORCH_DISTRIBUTED_DEBUG=DETAIL's check names (`Rank 0 is running
    collective: ..., but Rank 13 is running ...`, each naming its own rank and the odd one; round 32).
    """
    desynced = _desynced(hits)
    if desynced is not None:
        return desynced, "desync"
    listed = [{int(r) for r in h.fields[key].split(", ")} for h in hits for key in ("missing", "missing_op")
              if h.fields.get(key)]  # fmt: skip
    missing = set().union(*listed)
    world = universe | missing
    # every report lists the same ranks, all but one: that one alone submitted the ops
    if listed and len(world) >= 3 and all(m == listed[0] for m in listed) and len(world - missing) == 1:
        return tuple(world - missing), "alone"
    if missing:  # Horovod's stall inspector lists the ranks that never submitted the tensors
        return tuple(sorted(missing)), "missing"
    victims = [h for h in hits if h.signature in VICTIM_SIGNATURES and h.rank is not None]
    counted = [h for h in victims if h.signature == "watchdog_progress" and h.fields.get("seq", "").isdigit()
               and h.fields.get("enqueued", "").lstrip("-").isdigit()]  # fmt: skip
    dumped = [h for h in victims  # a dump's progress: no work
              if h.signature == "watchdog_dump_progress" and h.fields.get("enqueued", "").lstrip("-").isdigit()]
    progress = [(h.rank, int(h.fields["seq"]) if h in counted else -1, int(h.fields["enqueued"]))
                for h in (*counted, *dumped)]  # fmt: skip
    pgs = [_process_group(h.text) for h in (*counted, *dumped)]
    # Sequence numbers count per process group: a rank is behind only the others of its own group (a DP
    # group's 37,868th collective is not behind an expert group's 150,292nd, round 29).
    groups: dict[str | None, list[tuple[int | None, int, int]]] = defaultdict(list)
    for (rank, seq, enqueued), pg in zip(progress, pgs, strict=True):
        groups[pg].append((rank, seq, enqueued))
    behind: set[int | None] = set()
    for members in groups.values():
        waited = max(seq for _r, seq, _e in members)
        behind |= {r for r, _s, enq in members if enq < waited}
    reporters = {r for r, _s, _e in progress}
    ahead = reporters - behind
    waiting = {r: seq for r, seq, enqueued in progress if seq >= 0 and seq == enqueued}  # timed out in its own call
    if behind and ahead and len(ahead) * 3 <= len(behind) and None not in ahead and set(behind) <= set(waiting) \
            and min(waiting.get(r, -1) for r in ahead) - max(waiting[r] for r in behind) >= _gap_needed(ahead, victims):
        # most reporters "behind" one that waits two calls or more further on, each in a call of its own (rank 0
        # alone in a broadcast eight calls past the others' all-reduce, round 91a): that one went its own way, and
        # the others wait on it; not ranks that never issued the call the rest wait in (round 88a)
        return tuple(sorted(ahead)), "ahead"
    if behind and behind != reporters:
        return tuple(sorted(r for r in behind if r is not None)), "behind"
    lagging, how = _out_of_step(victims)
    if lagging:
        return lagging, how
    # Every rank timed out in the same collective call (one sequence number), one of them in another operation
    # than all the others: its code took another path there (rank 0 alone in a checkpoint's REDUCE while the
    # rest gathered FSDP shards, round 28); the others wait on it.
    odd = _odd_operation(victims)
    if odd is not None:
        return odd, "mismatch"
    # Stack dumps of some ranks (py-spy, one file per rank): those whose main thread waits outside any collective
    # while the others' wait inside one are where the job went out of step (rank 0 in its data loader's queue
    # while rank 13 sits in all_reduce, round 30).
    outside = _dumped_outside_collectives(hits)
    if outside is not None:
        return outside, "elsewhere"
    # A rank whose communicator was aborted under it (`NCCL communicator was aborted on rank 0`), with no
    # timeout of its own, was not waiting when the others timed out: its traceback's collective frame is where
    # the abort found it, later (a rank-0-only evaluation that outlasted the timeout, round 28).
    aborted = {h.rank for h in hits if h.signature == "python_exception" and _ABORTED.search(h.fields.get("msg", ""))}
    # nor is a line saying its communicator was aborted a wait of its own (round 34: rank 0 busy saving)
    reporting = {h.rank for h in victims if not _ABORTED.search(h.text)
                 and (h.signature != "stack_in_collective" or h.rank not in aborted)}  # fmt: skip
    reporting |= ready_ranks(hits)
    silent = universe - reporting
    # (of two ranks, one timed out and no line but a start-up banner names the other, not even its end: round 91b's
    # rank-0-only evaluation; not a rank srun saw exit, round 20b)
    two = len(universe) == 2 and len(reporting) == 1 and not any(h.rank in silent and h.role is not Role.CONTEXT
                                                                 for h in hits)
    if (len(reporting) >= 2 or two) and silent and len(silent) <= max(1, len(universe) // 3):
        return tuple(sorted(silent)), "silent"
    late = _two_ranks_late(victims, universe)
    if late is not None:
        return late, "late"
    # Alone: a rank's own watchdog (not Horovod's stall warning: rank 0 reports it for all), and the launcher
    # saw that rank end and no other (the others had left: they were not torn down with it)
    own = {h.rank for h in victims if h.signature != "horovod_stall"}
    heard = {h.rank for h in hits if h.rank is not None} - reporting  # lines of their own, not only a world size
    ends = [h for h in hits if h.signature in ("srun_task_exit", "elastic_child_failed", "ds_launcher_exit")]
    if len(reporting) == 1 and own == reporting and len(universe) >= 4 and len(heard) >= len(universe) // 2 \
            and ends and {h.rank for h in ends} == reporting:
        return tuple(reporting), "alone"
    departed = _departed(hits, universe)
    if departed is not None:
        return departed, "departed"
    return (), "none"
