"""The catalog's distributed-hang part: collective timeouts, watchdogs, Horovod stalls and the lines a hang's
victims print (split from signatures.py; it follows the framework crashes there, and the order is kept)."""

from __future__ import annotations

from nvrx_hpc.attribution.api import Category, Role
from nvrx_hpc.attribution.signature_record import Signature

__all__ = ["HANG"]

_D = Category.DISTRIBUTED_HANG
_ROOT, _WEAK, _CASC, _CTX = Role.ROOT, Role.WEAK, Role.CASCADE, Role.CONTEXT

HANG: tuple[Signature, ...] = (
    Signature(  # torch's flight-recorder analyser found no dump of some ranks (round 98e): a fact about the dumps the
        # user ran it on, not the job's own exception; the ranks' own output says why they wrote none
        "fr_trace_missing_dumps", _D, _CTX, r"Missing dump files from ranks \{(?P<ranks>\d+(?:, \d+)*)\}",
        ("Missing dump files",), None, "the flight-recorder analyser found no dump of ranks {ranks}",
        ("AssertionError: Missing dump files from ranks {5}",),
    ),
    # ---- distributed hang -------------------------------------------------------------------------
    Signature(  # TORCH_DISTRIBUTED_DEBUG=DETAIL's check: the ranks' code entered different collectives (round 32)
        "collective_desync", _D, _ROOT,
        # Each side's rank and fingerprint, kept before the line's text is cut to its first 400 characters.
        r"Detected mismatch between collectives on ranks"
        r"(?:\. Rank (?P<arank>\d+) is running collective: "
        r"CollectiveFingerPrint\((?P<afp>[^()]*?TensorShape=\[[^\]]*\])"
        r"(?:[^\n]*?, but Rank (?P<brank>\d+) is running collective: CollectiveFingerPrint\("
        r"(?P<bfp>[^()]*?TensorShape=\[[^\]]*\]))?)?",
        ("mismatch between collectives",), False, "the ranks entered different collectives",
        ("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
         "CollectiveFingerPrint(SequenceNumber=12, OpType=ALLREDUCE, TensorShape=[]), but Rank 3 is running ...",),
    ),
    Signature(  # one rank alone at the barrier of a group made after the default one (key 2 on): its code took a path
        # of its own into `new_group` that the others never took (round 101a); the default group's barrier (key 1),
        # reached by some, says instead that the others never started
        "new_group_alone", _D, _ROOT,
        r"Timed out initializing process group in store based barrier on rank:? (?P<rank>\d+), for key: "
        r"store_based_barrier_key:(?!1\b)\d+ \(world_size=\d+, worker_count=1\b",
        ("store based barrier",), False, "one rank alone made a process group the others never made",
        ("RuntimeError: Timed out initializing process group in store based barrier on rank: 0, for key: "
         "store_based_barrier_key:2 (world_size=16, worker_count=1, timeout=0:30:00)",),
    ),
    Signature(  # TORCH_NCCL_DESYNC_DEBUG's report, printed by each rank that timed out: the rank it names finished
        # the collective before and never joined the one the others wait on (round 95b); the late rank, named
        "desync_report_late_rank", _D, _ROOT,
        r"^\s*(?:- )?\[(?P<rank>\d+)\] finished collective #(?P<seq>\d+), but didn't join collective #\d+",
        ("but didn't join collective",), True, "rank {rank} never joined the collective after #{seq}",
        ("             [7] finished collective #269, but didn't join collective #270 (count from 1)",),
    ),
    Signature(
        "watchdog_timeout", _D, _WEAK,
        # A console that wraps long lines (milabench's) puts the WorkNCCL(...) on the next line.
        # Its own `[Rank N]` names the rank where a launcher's label (srun -l over torchrun) is all the prefix says.
        # TORCH_NCCL_BLOCKING_WAIT's `[Rank 6] Work WorkNCCL(SeqNum=43379, ...) timed out in blocking wait` (round 49)
        r"(?:\[Rank (?P<rank>\d+)\] )?"
        r"(?:Watchdog caught collective operation timeout:\s*(?:$|(?=Work))|"
        r"Work (?=Work\w*\([^\n]*?\) timed out in blocking wait))"
        # PyTorch 1.x's work has no sequence number and gives the tensor's shape (`WorkNCCL(OpType=BROADCAST,
        # TensorShape=[5436], ...)`, round 104b)
        r"(?:Work\w*\((?:SeqNum=(?P<seq>\d+), )?OpType=(?P<op>\w+)"
        r"(?:, (?:NumelIn=(?P<numel>\d+)|TensorShape=\[(?P<shape>[\d, ]*)\]))?)?",
        ("Watchdog caught", "timed out in blocking wait"), True, "collective {op} (seq {seq}) timed out",
        ("[rank4]:[E1016 03:31:38.928 ProcessGroupNCCL.cpp:607] [Rank 4] Watchdog caught collective operation "
         "timeout: WorkNCCL(SeqNum=9141, OpType=_ALLGATHER_BASE, NumelIn=19008, NumelOut=152064, "
         "Timeout(ms)=600000) ran for 600071 milliseconds before timing out.",
         "[rank14]:[E909 09:55:29.307 ProcessGroupNCCL.cpp:607] [Rank 14] Watchdog caught collective operation "
         "timeout: ",
         "[rank6]: torch.distributed.DistBackendError: [Rank 6] Work WorkNCCL(SeqNum=43379, OpType=_ALLGATHER_BASE, "
         "NumelIn=8069120, Timeout(ms)=600000) timed out in blocking wait.",
         "[E ProcessGroupNCCL.cpp:566] [Rank 5] Watchdog caught collective operation timeout: "
         "WorkNCCL(OpType=BROADCAST, TensorShape=[5436], Timeout(ms)=1800000) ran for 1800606 milliseconds "
         "before timing out."),
    ),
    Signature(
        "collective_timeout", _D, _WEAK,
        r"(?:Timed out waiting [^\n]*for (?:the )?(?:collective|barrier|all_?reduce|recv|send)|"
        r"timed out in monitoredBarrier|(?:collective|barrier) operation timed out|ProcessGroupGloo[^\n]*[Tt]imed out|"
        r"Application timeout caused pair closure|"  # gloo's own words for a collective's timeout (round 69b)
        r"\b(?:broadcast|all_?reduce|all_?gather|barrier|reduce_scatter)\b[^\n]{0,80}did not complete within \d+ ?ms)",
        ("Timed out", "timed out", "did not complete within", "Application timeout"), True, "a collective timed out",
        ("RuntimeError: ProcessGroupGloo::allreduce: Timed out after 30000 ms",),
    ),
    Signature(  # Horovod's stall inspector: under `Missing ranks:`, each rank that never submitted the tensors
        "horovod_missing_rank", _D, _ROOT,
        r"^(?:(?P<culprit>\d+): )?\[(?:horovod_)?(?:allreduce|allgather|broadcast|alltoall|reducescatter|"
        r"grouped_allreduce)\.",
        ("allreduce.", "allgather.", "broadcast.", "alltoall.", "reducescatter."), True,
        "rank never submitted the tensors the others wait on (Horovod stall)",
        ("[1,0]<stderr>:6: [allreduce.emb_tables.user_id.weight, allreduce.dense.weight ...]",),
    ),
    Signature(  # gloo's monitored barrier names the rank that never reached it (round 63b)
        "monitored_barrier_missing", _D, _ROOT, r"\bRank (?P<culprit>\d+) failed to pass monitoredBarrier",
        # the others passed it: that rank's code went elsewhere (as a rank in another collective does), not restartable
        ("failed to pass monitoredBarrier",), False, "rank never reached the monitored barrier the others wait in",
        ("[E ProcessGroupGloo.cpp:138] Rank 1 failed to pass monitoredBarrier in 30000 ms",),
    ),
    Signature(  # a rank past gloo's monitored barrier that lost rank 0 on the way back: rank 0 knows who failed
        # to arrive, and its logs are the place to look (weak: rank 0's own report of the missing rank wins)
        "monitored_barrier_peer", _D, _WEAK,
        r"successfully reached monitoredBarrier, but received errors while waiting for send/recv from rank "
        r"(?P<culprit>\d+)",
        ("successfully reached monitoredBarrier",), True, "ranks passed the monitored barrier, rank 0 did not answer",
        ("RuntimeError: Rank 13 successfully reached monitoredBarrier, but received errors while waiting for send/recv "
         "from rank 0. Please check rank 0 logs for faulty rank.",),
    ),
    Signature(
        "horovod_stall", _D, _WEAK,
        # older Horovod lists the ranks that did submit: `[ready ranks: 29, 9, 19, ...]` (round 22), on the
        # warning's line or on a `Stalled ops:` line of its own (round 24b)
        r"(?:Horovod has been stalled for more than \d+ seconds|(?:submitted to be reduced, gathered or broadcasted "
        r"by subset of ranks|Stalled ops: )(?:[^\n]*?\[(?:ready ranks: (?P<ready>\d{1,6}(?:, \d{1,6})*)|missing ranks: "
        r"(?P<missing_op>\d{1,6}(?:, \d{1,6})*))\])?|"  # or the ranks that did not, after `Stalled ops:` (round 27)
        r"\[missing ranks: (?P<missing>\d{1,6}(?:, \d{1,6})*)\])",  # or on a line of their own (round 26)
        ("Horovod has been stalled", "by subset of ranks", "Stalled ops: ", "[missing ranks: "), True,
        "Horovod stalled waiting for ranks",
        ("[2024-03-11 20:17:18.727803: E horovod/common/stall_inspector.cc:130] Horovod has been stalled for more "
         "than 900 seconds. Will shutdown.",),
    ),
    Signature(
        "watchdog_progress", _D, _CTX,
        # torch 2.5 on: `failure detected by watchdog at work sequence id: N PG status: last enqueued work: M, ...`
        r"(?:Timeout at NCCL work|detected by watchdog at work(?: sequence id)?): (?P<seq>\d+)(?:,| PG status:) "
        r"last enqueued (?:NCCL )?work: (?P<enqueued>-?\d+), last completed (?:NCCL )?work: (?P<completed>-?\d+)",
        ("NCCL work", "PG status"), True, "watchdog progress: work {seq}, enqueued {enqueued}, completed {completed}",
        ("[PG 3 Rank 4] Timeout at NCCL work: 9141, last enqueued NCCL work: 9141, last completed NCCL work: 9140.",
         "[PG ID 0 PG GUID 0(default_pg) Rank 2] failure detected by watchdog at work sequence id: 120049 PG status: "
         "last enqueued work: 120049, last completed work: 120048"),
    ),
    Signature(
        # A rank told to dump by another's timeout prints its own progress: a lower last-enqueued
        # number than the work the others wait on means it never issued that collective.
        "watchdog_dump_progress", _D, _CTX,
        # Its own dump, when its watchdog got stuck, prints the same sentence alone (round 21).
        r"(?:Received a dump signal due to a collective timeout from rank \d+.{0,120}?|^|[\]:.] )Last enqueued NCCL "
        r"work: (?P<enqueued>-?\d+), last completed NCCL work: (?P<completed>-?\d+)",
        ("Last enqueued NCCL work",), True, "dump signal: enqueued {enqueued}, completed {completed}",
        ("[PG ID 0 PG GUID 0(default_pg) Rank 26] Received a dump signal due to a collective timeout from rank 3 "
         "and we will try our best to dump the debug info. Last enqueued NCCL work: 18802, last completed NCCL "
         "work: 18802.",),
    ),
    Signature(
        "heartbeat_stuck", _D, _CASC, r"(?:Heartbeat monitor timed out|watchdog got stuck)",
        ("Heartbeat monitor", "watchdog got stuck"), True, "NCCL heartbeat monitor fired",
        ("[rank1]:[F1016 03:40:01] Heartbeat monitor timed out! Process will be terminated after dumping debug info.",),
    ),
)
