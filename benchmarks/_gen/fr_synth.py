"""Synthetic flight-recorder dumps in the NCCL layout PyTorch writes (pg_config keyed by group name),
for tests, the benchmark and the demo. A small simulation decides what each rank recorded: every
rank walks the same schedule, an op completes once every member has issued it, and a faulty rank
stops before its op number `stop`. Nothing here reads a dump."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Layout", "simulate", "write_dumps", "to_json_variant"]


@dataclass(frozen=True)
class Layout:
    """`world` ranks in tensor-parallel groups of `tp` plus the default group; `steps` training steps,
    each one all_reduce per TP group then one all_reduce over everyone."""

    world: int = 8
    tp: int = 1
    steps: int = 5
    numel: int = 1024

    def groups(self) -> dict[str, tuple[str, tuple[int, ...]]]:
        out = {"0": ("default_pg", tuple(range(self.world)))}
        if self.tp > 1:
            for g in range(self.world // self.tp):
                out[str(g + 1)] = ("TENSOR_MODEL_PARALLEL_GROUP", tuple(range(g * self.tp, (g + 1) * self.tp)))
        return out

    def schedule(self, rank: int) -> list[str]:
        """The group names this rank issues collectives on, in order."""
        per_step = ([str(rank // self.tp + 1)] if self.tp > 1 else []) + ["0"]
        return per_step * self.steps


def simulate(
    layout: Layout,
    stop: dict[int, int] | None = None,
    *,
    version: str = "2.10",
    wrong_size: dict[int, int] | None = None,
    t0_ns: int = 1_700_000_000_000_000_000,
) -> dict[int, dict[str, Any]]:
    """The dump (a plain dict) of every rank. `stop[r] = k`: rank r never issues its k-th op (0-based).
    `wrong_size[r] = k`: rank r's k-th op has twice the elements (a size mismatch)."""
    stop, wrong_size = stop or {}, wrong_size or {}
    groups = layout.groups()
    plan = {r: layout.schedule(r) for r in range(layout.world)}
    pos = dict.fromkeys(plan, 0)  # index of the next op to issue
    issued: dict[int, list[dict[str, Any]]] = {r: [] for r in plan}
    seq = {(r, g): 0 for r in plan for g in groups}
    waiting: dict[int, tuple[str, int]] = {}  # rank -> (group, seq) it issued and waits on
    clock = t0_ns
    progress = True
    while progress:
        progress = False
        for r in plan:
            if r in waiting or pos[r] >= len(plan[r]) or stop.get(r) == pos[r]:
                continue
            g = plan[r][pos[r]]
            seq[(r, g)] += 1
            clock += 1000
            numel = layout.numel * (2 if wrong_size.get(r) == pos[r] else 1)
            issued[r].append(_entry(len(issued[r]), g, groups[g][0], seq[(r, g)], numel, clock, version))
            waiting[r] = (g, seq[(r, g)])
            pos[r] += 1
            progress = True
        for g, (_, members) in groups.items():
            for s in {v[1] for v in waiting.values() if v[0] == g}:
                if all(waiting.get(m) == (g, s) for m in members):
                    for m in members:
                        issued[m][-1]["state"] = "completed"
                        issued[m][-1]["time_discovered_completed_ns"] = clock + 500
                        issued[m][-1]["retired"] = True
                        del waiting[m]
                    progress = True
    return {r: _dump(r, issued[r], groups, version) for r in plan}


def _entry(record_id: int, g: str, desc: str, seq: int, numel: int, t: int, version: str) -> dict[str, Any]:
    entry = {
        "record_id": record_id, "pg_id": int(g), "process_group": (g, desc), "collective_seq_id": seq,
        "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce", "time_created_ns": t,
        "input_sizes": [[numel]], "input_dtypes": ["Float"], "output_sizes": [[numel]], "output_dtypes": ["Float"],
        "state": "scheduled", "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
        "retired": False, "timeout_ms": 600000, "is_p2p": False,
        "frames": [{"name": "train_step", "filename": "train.py", "line": 42}],
    }  # fmt: skip
    if _minor(version) >= 9:
        entry.update(thread_name="python", thread_id="1")
    return entry


def _minor(version: str) -> int:
    return int(version.split(".")[1])


def _dump(rank: int, entries: list[dict], groups: dict, version: str) -> dict[str, Any]:
    status = {}
    config = {}
    for g, (desc, members) in groups.items():
        if rank not in members:
            continue
        config[g] = {"name": g, "desc": desc, "ranks": str(list(members))}
        mine = [e for e in entries if e["process_group"][0] == g]
        done = [e["collective_seq_id"] for e in mine if e["state"] == "completed"]
        status[g] = {
            "last_enqueued_collective": max((e["collective_seq_id"] for e in mine), default=-1),
            "last_started_collective": -1,
            "last_completed_collective": max(done, default=-1),
        }
    dump: dict[str, Any] = {"version": version, "pg_config": config, "pg_status": status, "entries": entries}
    if 7 <= _minor(version) <= 9:
        dump["nccl_version"] = "2.27.3"
    elif _minor(version) >= 10:
        dump["comm_lib_version"] = "2.27.3"
    return dump


def to_json_variant(dump: dict[str, Any]) -> dict[str, Any]:
    """What the JSON writer produces for the same data: string pg_status, 0 for unset times, no frames,
    lists for tuples, no `entries` key when there are none."""
    out = {k: v for k, v in dump.items() if k != "entries"}
    out["pg_status"] = {g: {k: str(v) for k, v in st.items()} for g, st in dump["pg_status"].items()}
    entries = []
    for e in dump["entries"]:
        e = {k: v for k, v in e.items() if k != "frames"}
        e["process_group"] = list(e["process_group"])
        for key in ("time_discovered_started_ns", "time_discovered_completed_ns"):
            e[key] = e[key] or 0
        entries.append(e)
    if entries:
        out["entries"] = entries
    return out


def write_dumps(
    dumps: dict[int, dict[str, Any]], directory: Path, *, prefix: str = "rank-", fmt: str = "pickle"
) -> None:
    """Write one file per rank: `<prefix><rank>` (pickle, as torch does) or `<prefix><rank>.json`."""
    directory.mkdir(parents=True, exist_ok=True)
    for rank, dump in dumps.items():
        if fmt == "json":
            (directory / f"{prefix}{rank}.json").write_text(json.dumps(to_json_variant(dump)))
        else:
            (directory / f"{prefix}{rank}").write_bytes(pickle.dumps(dump, protocol=4))
