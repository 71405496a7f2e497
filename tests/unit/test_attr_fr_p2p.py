"""Point-to-point balance in flight-recorder dumps (NCCL's `send a->b` / `recv b<-a` profiling names,
group-local ranks): a pending op whose peer never posted the matching one names that peer.

Written in the NCCL dump layout (gloo's flight recorder records no p2p ops, so no real dump has them here).
"""

from __future__ import annotations

import pickle
from pathlib import Path

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category
from nvrx_hpc.attribution.fr_analysis import analyze_files
from nvrx_hpc.attribution.render import to_markdown

T0 = 1_700_000_000_000_000_000


def _entry(i: int, group: tuple[str, str], name: str, *, done: bool, p2p: bool, seq: int = 0, numel: int = 64) -> dict:
    return {
        "record_id": i, "pg_id": int(group[0]), "process_group": group, "collective_seq_id": seq,
        "p2p_seq_id": 0 if not p2p else i, "op_id": i, "profiling_name": f"nccl:{name}", "time_created_ns": T0 + i,
        "input_sizes": [[numel]], "input_dtypes": ["Float"], "output_sizes": [[numel]], "output_dtypes": ["Float"],
        "state": "completed" if done else "scheduled", "time_discovered_started_ns": None,
        "time_discovered_completed_ns": T0 + i + 5 if done else None, "retired": done, "timeout_ms": 600000,
        "is_p2p": p2p, "frames": [{"name": "pipeline_step", "filename": "train.py", "line": 7}],
    }  # fmt: skip


def _write(tmp_path: Path, groups: dict[str, tuple[str, tuple[int, ...]]], ops: dict[int, list[tuple]]) -> list[Path]:
    """ops[rank]: (group, name, done) in the order the rank issued them; one all_reduce #1 first everywhere."""
    paths = []
    for rank, mine in ops.items():
        entries = [_entry(0, ("0", "default_pg"), "all_reduce", done=True, p2p=False, seq=1)]
        for g, name, done in mine:
            entries.append(_entry(len(entries), (g, groups[g][0]), name, done=done, p2p=True))
        config = {g: {"name": g, "desc": desc, "ranks": str(list(ranks))} for g, (desc, ranks) in groups.items()
                  if rank in ranks}
        status = {g: {"last_enqueued_collective": 1 if g == "0" else -1, "last_started_collective": -1,
                      "last_completed_collective": 1 if g == "0" else -1} for g in config}  # fmt: skip
        dump = {"version": "2.10", "comm_lib_version": "2.27.3", "pg_config": config, "pg_status": status,
                "entries": entries}
        path = tmp_path / f"rank-{rank}"
        path.write_bytes(pickle.dumps(dump, protocol=4))
        paths.append(path)
    return paths


WORLD = {"0": ("default_pg", (0, 1, 2, 3))}


def test_a_rank_that_never_posts_its_recv_is_named_not_the_sender(tmp_path):
    # a pipeline 0 -> 1 -> 2 -> 3: rank 2 hangs before posting its recv from rank 1
    ops = {0: [("0", "send 0->1", True)],
           1: [("0", "recv 1<-0", True), ("0", "send 1->2", False)],
           2: [],
           3: [("0", "recv 3<-2", False)]}  # fmt: skip
    report = analyze_files(_write(tmp_path, WORLD, ops))
    assert report.culprits == (2,)
    (finding,) = report.findings
    waits = {(p["waiting"], p["missing"], p["missing_op"]) for p in finding.p2p}
    assert waits == {(1, 2, "recv"), (3, 2, "send")}
    assert "rank 1 waits on a send to rank 2, which never posted the matching recv" in finding.text()


def test_ops_pending_on_both_sides_are_in_flight_not_unmatched(tmp_path):
    ops = {0: [("0", "send 0->1", False)], 1: [("0", "recv 1<-0", False)], 2: [], 3: []}
    report = analyze_files(_write(tmp_path, WORLD, ops))
    assert report.findings == () and report.culprits == ()


def test_group_local_ranks_map_to_global_ones(tmp_path):
    # a pipeline group of global ranks 4 and 6: local 0 is 4, local 1 is 6; rank 4 never sends
    groups = {"0": ("default_pg", tuple(range(8))), "5": ("PIPELINE_MODEL_PARALLEL_GROUP", (4, 6))}
    ops = {r: [] for r in range(8)}
    ops[6] = [("5", "recv 1<-0", False)]
    report = analyze_files(_write(tmp_path, groups, ops))
    assert report.culprits == (4,)
    (finding,) = report.findings
    assert finding.pg == "5" and finding.p2p[0]["waiting"] == 6 and finding.p2p[0]["missing_op"] == "send"


def test_the_verdict_and_the_report_carry_the_p2p_culprit(tmp_path):
    run = tmp_path / "run"
    (run / "fr").mkdir(parents=True)
    ops = {0: [("0", "send 0->1", False)], 1: [], 2: [], 3: []}
    _write(run / "fr", WORLD, ops)
    report = analyze_run(run, engine="python")
    verdict = report.verdict
    assert verdict.category is Category.DISTRIBUTED_HANG and verdict.culprit.ranks == (1,)
    assert "rank 1, which never posted the matching recv" in verdict.root_cause
    assert "never posted the matching recv" in to_markdown(report.to_dict())
