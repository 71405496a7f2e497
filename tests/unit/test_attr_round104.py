"""Rules drawn from round 104 after its first contact was scored: a lone rank one call ahead of all the others, in
another operation than theirs, went its own way, and the others wait on it; PyTorch 1.x's watchdog lines, which
count no calls, are compared by operation and shape."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category

_TIMEOUT = ("{label}: [rank{r}]:[E1213 04:10:33.298935572 ProcessGroupNCCL.cpp:616] [Rank {r}] Watchdog caught "
            "collective operation timeout: WorkNCCL(SeqNum={seq}, OpType={op}, NumelIn=1, NumelOut=1, "
            "Timeout(ms)=600000) ran for 600041 milliseconds before timing out.")
_PROGRESS = ("{label}: [rank{r}]:[E1213 04:10:33.299192435 ProcessGroupNCCL.cpp:1680] [PG ID 0 PG GUID 0(default_pg) "
             "Rank {r}] Exception (either an error or timeout) detected by watchdog at work: {seq}, last enqueued NCCL "
             "work: {seq}, last completed NCCL work: {done}.")


def _log(ahead_op: str) -> list[str]:
    out = []
    for r in range(16):
        seq, op = (28, ahead_op) if r == 0 else (27, "BROADCAST")
        out += [_TIMEOUT.format(label=r // 8, r=r, seq=seq, op=op),
                _PROGRESS.format(label=r // 8, r=r, seq=seq, done=seq - 1)]
    return out


def test_a_lone_rank_one_call_ahead_in_another_operation_went_its_own_way(tmp_path):
    v = _verdict(tmp_path, {"slurm-2291847.out": _log("ALLREDUCE")})
    assert v.category is Category.DISTRIBUTED_HANG and list(v.culprit.ranks) == [0]
    same = _verdict(tmp_path / "same", {"slurm-2291847.out": _log("BROADCAST")})  # the same operation: finished first
    assert list(same.culprit.ranks) != [0]


_OLD_TIMEOUT = ("[E ProcessGroupNCCL.cpp:566] [Rank {r}] Watchdog caught collective operation timeout: WorkNCCL("
                "OpType={op}, TensorShape=[{shape}], Timeout(ms)=1800000) ran for 1800412 milliseconds before timing "
                "out.")


def test_pytorch_1x_lines_without_call_counts_still_tell_the_rank_in_another_operation(tmp_path):
    """PyTorch 1.x's watchdog gives no sequence number, only the operation and the tensor's shape: rank 0 gathers a
    metric while the fifteen others wait in its broadcast (round 104b)."""
    def log(odd_op: str, odd_shape: str) -> list[str]:
        return [_OLD_TIMEOUT.format(r=r, op=odd_op if r == 0 else "BROADCAST", shape=odd_shape if r == 0 else "5436")
                for r in (5, 0, 13, 2, 9, 1, 14, 7, 3, 11, 8, 4, 15, 10, 6, 12)]
    v = _verdict(tmp_path, {"slurm-8812304.out": log("ALLGATHER", "1")})
    assert v.category is Category.DISTRIBUTED_HANG and list(v.culprit.ranks) == [0]
    alike = _verdict(tmp_path / "alike", {"slurm-8812304.out": log("BROADCAST", "5436")})
    assert list(alike.culprit.ranks) == []
