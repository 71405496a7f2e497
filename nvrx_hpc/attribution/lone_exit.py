"""The rank an application error with no rank of its own came from (round 8), the ranks of a node whose every
process raised it (round 26), and ends alike on every node.

A traceback printed without a rank prefix names nobody. When srun then reports one task that exited
with a code of its own while every other task it lists was ended by a signal (`Aborted`, `Killed`:
the teardown after the others timed out waiting), that one task raised the error.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from nvrx_hpc.attribution.api import Hit, Role
from nvrx_hpc.attribution.lines import ranks_of


def _own_code(h: Hit) -> bool:
    """An exit with a code of its own, not a signal (srun gives none for a signal, Composer a negative one)."""
    code = h.fields.get("code", "0")
    return code not in ("", "0") and not code.startswith("-")


def lone_exit_rank(hits: Sequence[Hit]) -> list[int]:
    """[rank] of the one srun task (or Composer rank, round 43) that exited with a nonzero code while the others
    were signalled; the ranks of as many such tasks as there are errors printed with no rank (round 95f: two ranks
    each raised their own traceback while reading a truncated checkpoint, then the others timed out); with no such
    exits, the first process mpirun saw exit with a nonzero status."""
    exits = [h for h in hits if h.signature in ("srun_task_exit", "composer_rank_exit")]
    coded = {h.rank for h in exits if _own_code(h) and h.rank is not None}
    signalled = [h for h in exits if not _own_code(h)]
    unranked = sum(1 for h in hits if h.signature == "python_exception" and h.role is Role.ROOT and h.rank is None)
    if 1 <= len(coded) <= max(1, unranked) and signalled and all(h.rank not in coded for h in signalled):
        return sorted(coded)
    first = {h.rank for h in hits if h.signature == "mpirun_first_exit" and h.rank is not None}
    return sorted(first) if not exits and unranked and len(first) == 1 else []  # mpirun's first (round 98a)


def lone_exit_tasks(hits: Sequence[Hit]) -> list[int]:
    """The tasks of the one `srun: error: <host>: tasks 16-23: Exited with exit code 1` line while srun's other
    lines say Terminated: a fault on that host before or as the job ran, which the others were ended for (round 51b:
    pyxis could not start the container on one node). Only a range of tasks: one task a node may be a launcher."""
    exits = [h for h in hits if h.signature == "srun_task_exit"]
    coded = [h for h in exits if _own_code(h) and h.node]
    if len(coded) != 1 or not any(not _own_code(h) for h in exits):
        return []
    tasks = ranks_of(coded[0].fields.get("tasks", ""))
    return sorted(tasks) if len(tasks) >= 2 else []


# A heap corrupted or a segfault on two nodes at once is the code's (NCCL's set-up on GB200 or dual-port NICs, round
# 37; Transformer Engine's kernel on both nodes, round 38): a hardware fault does not strike two hosts alike, so two
# suffice, not every node of the job.
ANY_TWO_NODES = ("heap_corruption", "segfault")
_LAUNCHER_EXITS = ("ds_launcher_exit", "elastic_child_failed", "srun_task_exit")


def exited_on_node(nodes: Sequence[str], hits: Sequence[Hit], unplaced: bool = False) -> list[int]:
    """[rank] of the one rank a launcher saw exit on the one node of a fault that names no rank (round 11:
    an ECC error's traceback on `gpu-c06`, and DeepSpeed's launcher there reporting `--local_rank=3`, rank
    11, exiting); [] when that node's launchers report none or several. With `unplaced`, a fault and exits that
    name no node are one node's too (round 31: a GPU's ECC error, and a single node's `torch.distributed.launch`
    quoting `--local_rank=5`)."""
    if len(set(nodes)) > 1 or (not nodes and not unplaced):
        return []
    node = nodes[0] if nodes else None
    ranks = {h.rank for h in hits if h.signature in _LAUNCHER_EXITS and h.node == node and h.rank is not None
             and "tee_local" not in h.fields and h.fields.get("code", "1") not in ("0", "")}  # fmt: skip
    return sorted(ranks) if len(ranks) == 1 else []


def every_node_alike(
    signature: str, hits: Sequence[Hit], rank_nodes: Mapping[int, str], job: Iterable[str], weak: bool = True
) -> bool:
    """The root's signature ended (with one exit code) on at least two nodes and on every node the logs and
    the job name: no node or rank stands out (srun's tasks may be launchers; round 26: NCCL's internal
    error at the first barrier on each of four nodes). `weak`: the root is a kind that may be met alike (a weak
    framework error, a network error); a corrupted heap or a segfault needs only two nodes, whatever its kind."""
    if not weak and signature not in ANY_TWO_NODES:
        return False
    ends = [h for h in hits if h.signature == signature and h.role is not Role.CONTEXT]
    if len({h.fields.get("code") for h in ends}) != 1:  # -9 here, -6 there: unlike
        return False
    ended = {h.node or rank_nodes.get(h.rank) for h in ends} - {None}  # type: ignore[arg-type]
    if signature in ANY_TWO_NODES:
        return len(ended) >= 2
    return len(ended) >= 2 and ended >= {h.node for h in hits if h.node} | set(job)


_MESSAGE = re.compile(r"\b(\w+(?:Error|Exception):.*)$")  # an exception's name and message, past any prefix


def raised_alike(texts: Iterable[str], ranks: Iterable[int], rank_nodes: Mapping[int, str], hits: Sequence[Hit],
                 job: Iterable[str], nodes: Iterable[str] = ()) -> bool:  # fmt: skip
    """One exception, with one message (its numbers aside: each rank prints its own), raised on ranks of two or
    more nodes and of every node the logs and the job name (round 50a: torchtitan's `Mesh 'tp' is not available`
    on the first rank of each node): the job's code or config, which no rank stands out in."""
    messages = {re.sub(r"\d+", "#", m.group(1).strip()) if (m := _MESSAGE.search(t)) else None for t in texts}
    on = {rank_nodes.get(r) for r in ranks} | set(nodes)  # the ranks' nodes, and those the lines name
    if len(messages) != 1 or None in messages or None in on or len(on) < 2:
        return False
    return on >= {h.node for h in hits if h.node} | set(job)


def every_rank_of_node(
    root: tuple[str, int | None], nodes: Sequence[str], hits: Sequence[Hit], rank_nodes: Mapping[int, str]
) -> list[int]:
    """All ranks of the one node where the root's error (the hit at `root`, a source and line), with no rank of
    its own, was printed at least once per rank the rank map places there (at least two) and nowhere else:
    each of its processes raised it, so all are the culprit (round 26: eight `FileNotFoundError`s under one
    host's pdsh prefix, an index file missing on its local disk). Other errors do not count. [] otherwise."""
    first = next((h for h in hits if (h.source, h.line) == root), None)
    if first is None or len(set(nodes)) != 1:
        return []
    same = (first.signature, first.fields.get("exc"), first.fields.get("msg", first.text))
    lines = [h for h in hits if (h.signature, h.fields.get("exc"), h.fields.get("msg", h.text)) == same]
    if any(h.rank is not None or h.node != nodes[0] for h in lines):
        return []
    ranks = sorted(r for r, n in rank_nodes.items() if n == nodes[0])
    return ranks if 2 <= len(ranks) <= len(lines) else []


def the_only_host(hits: Sequence[Hit], job: Iterable[str]) -> list[str]:
    """[host] when every line the logs place and every node the job lists name one and the same host (a one-node
    job, its host named by a prompt, a file's name or a nodelist: a fault with no place of its own happened
    there, round 40); [] otherwise."""
    hosts = {h.node for h in hits if h.node} | set(job)
    return sorted(hosts) if len(hosts) == 1 else []


_CRASHED = ("Segmentation fault", "Bus error", "Aborted")


def crashed_on_node(nodes: Sequence[str], hits: Sequence[Hit]) -> list[int]:
    """[rank] of the one task srun (or the kernel) saw crash (`srun: error: cn125: task 13: Segmentation fault`) on the
    one node of a host fault that names no rank (its memory's machine-check errors, round 77d): the process the fault
    hit; [] when srun saw none or several crash there."""
    if len(set(nodes)) != 1:
        return []
    crashed = [h for h in hits if h.node == nodes[0] and (h.signature == "segfault" or h.signature == "srun_task_exit"
                                                           and h.fields.get("what", "").startswith(_CRASHED))]
    tasks = {t for h in crashed for t in ranks_of(h.fields.get("tasks", ""))}
    tasks |= {h.rank for h in crashed if not h.fields.get("tasks") and h.rank is not None}
    return sorted(tasks) if len(tasks) == 1 else []
