"""The signature catalog and the log scanner: every signature finds its own examples, every engine
finds the same hits, ranks/nodes/GPUs/times are pulled out of the line shapes jobs really print."""

from __future__ import annotations

import os
import sys
from datetime import datetime
from pathlib import Path

import pytest

from nvrx_hpc.attribution.api import Category, Role
from nvrx_hpc.attribution.lines import LineContext, classify_line, parse_time, split_prefix
from nvrx_hpc.attribution.scanner import Scanner, available_engines, prefilter_anchors
from nvrx_hpc.attribution.signature_index import signatures_for
from nvrx_hpc.attribution.signatures import CATALOG, catalog_by_id
from nvrx_hpc.core.errors import AttributionError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from _gen.synthetic_logs import FAILURE_LINES, write_log  # noqa: E402  (test data lives beside the benchmarks)


def ctx(source: str = "log", **kw) -> LineContext:
    return LineContext(source, **kw)


@pytest.mark.parametrize("sig", CATALOG, ids=lambda s: s.id)
def test_each_signature_classifies_its_examples_and_has_an_anchor_in_them(sig):
    assert sig.examples, f"{sig.id} has no example line"
    for line in sig.examples:
        hit = classify_line(line, 1, ctx())
        assert hit is not None and hit.signature == sig.id, (line, hit)
        assert any(a in line for a in sig.anchors), f"no anchor of {sig.id} in {line!r}"


def test_catalog_covers_every_category_and_leaves_unknown_to_the_verdict():
    covered = {sig.category for sig in CATALOG}
    # `unknown` is what the verdict says when only teardown (or nothing) is found; no line says it. A bare SIGBUS,
    # once the one such signature (round 17), is the host's since round 47 (a /dev/shm that ran out, most often)
    assert covered == set(Category) - {Category.UNKNOWN}
    assert len({s.id for s in CATALOG}) == len(CATALOG)


def test_prefilter_keeps_an_anchor_for_every_signature():
    kept = prefilter_anchors()
    for sig in CATALOG:
        for anchor in sig.anchors:
            assert any(k in anchor for k in kept), anchor


def _first_match(line: str, signatures) -> str | None:
    return next((sig.id for sig in signatures if sig.compiled().search(line)), None)


def test_the_anchor_index_picks_the_signature_the_whole_catalog_would():
    # every example line, and the lines with an anchor in a sample of the corpus: trying only the signatures
    # whose anchors a line holds must give the first match of the whole catalog, in its order
    corpus = Path(__file__).resolve().parents[1] / "fixtures" / "attribution_corpus"
    lines = [line for sig in CATALOG for line in sig.examples]
    anchors = prefilter_anchors()
    for path in sorted(p for p in corpus.rglob("*") if p.is_file() and ".label." not in p.name)[::15]:
        text = path.read_text(errors="replace").splitlines()
        lines.extend(line for line in text if any(a in line for a in anchors))
    assert len(lines) > 2000
    for line in lines:
        assert _first_match(line, signatures_for(line, CATALOG)) == _first_match(line, CATALOG), line


def test_a_catalog_s_anchors_and_finder_are_made_once_per_process():
    first, again = Scanner(engine="python"), Scanner(engine="python")
    assert first._finder is again._finder and first.anchors is again.anchors
    other = Scanner(catalog=CATALOG[:5], engine="python")
    assert other._finder is not first._finder and len(other.anchors) < len(first.anchors)


@pytest.mark.parametrize(
    ("line", "rank", "node", "gpu", "signature"),
    [
        ("12: [rank12]: ValueError: bad batch", 12, None, None, "python_exception"),
        ("[rank3]:[E1016 03:31:38.928 ProcessGroupNCCL.cpp:607] [Rank 3] Watchdog caught collective operation "
         "timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600071 ms", 3, None, None,
         "watchdog_timeout"),
        ("n7:812:930 [2] NCCL WARN NET/IB : Got completion from peer 10.0.0.7<40213> with status=12 opcode=0", None,
         "n7", "2", "nccl_ib_completion"),
        ("AssertionError: Rank 13: found NaN in local grad norm. Device: 5, node: node-15-11", 13, "node-15-11", "5",
         "nan_loss"),
        ("srun: error: n3: task 6: Exited with exit code 1", 6, "n3", None, "srun_task_exit"),
        ("srun: error: Node failure on n4", None, "n4", None, "node_failure"),
        ("[ 12.5] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.", None, None, "0000:3b:00",
         "xid_hardware"),
        ("NVRM: Xid (PCI:0000:3b:00): 13, Graphics Exception", None, None, "0000:3b:00", "xid_application"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2 GiB. GPU 3 has a total capacity", None,
         None, "3", "cuda_oom"),
    ],
)
def test_localisation(line, rank, node, gpu, signature):
    hit = classify_line(line, 7, ctx())
    assert (hit.signature, hit.rank, hit.node, hit.gpu, hit.line) == (signature, rank, node, gpu, 7)


def test_cascade_exceptions_and_healthy_lines():
    hit = classify_line("3: torch.distributed.DistBackendError: something broke", 1, ctx())
    assert hit.signature == "python_exception" and hit.role is Role.CASCADE
    assert classify_line(" iteration 5 | lm loss: 2.1E+00 | number of nan iterations: 0 |", 1, ctx()) is None
    assert classify_line("n1:1:1 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB", 1, ctx()) is None
    assert classify_line("Killed", 1, ctx()) is None  # a bare Killed is not evidence of the OOM killer


def test_prefixes_and_times():
    assert split_prefix("17: [rank17]: hello") == (17, "hello")
    assert split_prefix("plain") == (None, "plain")
    assert parse_time("x 2024-04-20T09:09:37.5 y") == datetime(2024, 4, 20, 9, 9, 37).timestamp() + 0.5
    assert parse_time("[E1016 03:31:38.928 Foo]", 2024) == pytest.approx(
        datetime(2024, 10, 16, 3, 31, 38).timestamp() + 0.928
    )
    assert parse_time("2024-13-45 99:99:99") is None
    assert parse_time("no time here") is None


def test_file_context_gives_rank_when_the_line_has_none(tmp_path):
    log = tmp_path / "rank-9.log"
    log.write_text("hello\nRuntimeError: CUDA error: an illegal memory access was encountered\n")
    hits = Scanner(engine="python").scan_file(log, ctx("rank-9.log", rank=9, node="n2"))
    assert [(h.signature, h.rank, h.node, h.line) for h in hits] == [("cuda_illegal_access", 9, "n2", 2)]


@pytest.fixture(scope="module")
def big_log(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("scan") / "job.log"
    write_log(path, 3, seed=3, error_rate=0.002)
    return path


@pytest.mark.parametrize("chunk_size", [None, 1_100_003], ids=["default-chunks", "odd-chunks"])
@pytest.mark.parametrize("engine", available_engines())
def test_every_engine_finds_the_same_hits_as_python(engine, chunk_size, big_log):
    # small chunks count lines with bytes.count; chunks over 1 MB with NumPy, in worker threads
    want = Scanner(engine="python", chunk_size=256 * 1024).scan_file(big_log, ctx())
    got = Scanner(engine=engine, **({"chunk_size": chunk_size} if chunk_size else {})).scan_file(big_log, ctx())
    assert len(want) > 10
    assert [(h.line, h.signature, h.rank) for h in got] == [(h.line, h.signature, h.rank) for h in want]
    families = {classify_line(line.format(r=1, n=1, it=1), 1, ctx()).signature for line in FAILURE_LINES}
    assert families <= {h.signature for h in want}


def test_the_prefilter_passes_few_healthy_lines(big_log):
    # An anchor that every logger's line carries (`.py:`, round 34) makes each of them a candidate that all
    # signatures are tried on: the 1 GB scan fell from about 1,400 to 6 MB/s with one.
    data = big_log.read_bytes()
    scanner = Scanner(engine="python")
    candidates, lines = scanner._candidates(data, len(data))
    hits = scanner.scan_file(big_log, ctx())
    assert len(candidates) <= 2 * len(hits) + lines // 1000, (len(candidates), len(hits), lines)


@pytest.mark.parametrize("chunk_size", [100_000, 1_100_003])
def test_line_numbers_agree_with_a_plain_count(big_log, chunk_size):
    hits = Scanner(engine="python", chunk_size=chunk_size).scan_file(big_log, ctx())
    lines = big_log.read_text().splitlines()
    for h in hits:
        assert lines[h.line - 1].strip()[:100] == h.text[:100]


@pytest.mark.parametrize(
    ("data", "positions"),
    [
        (b"", []),
        (b"no newline at all", [3]),
        (b"a\nbb\n\nccc\nd", [0, 2, 3, 6, 8, 12]),
        (b"\n\n\nx", [3]),
        (b"one\ntwo\nthree\n", [5, 6, 4, 9]),  # unsorted, two in one line
    ],
)
def test_numpy_and_bytes_line_location_agree(monkeypatch, data, positions):
    from nvrx_hpc.attribution import line_index

    monkeypatch.setattr(line_index, "NUMPY_MIN_BYTES", 1 << 60)
    by_bytes = line_index.locate_lines(data, len(data), positions)
    lines = data.split(b"\n")
    for before, start, end in by_bytes[0]:
        assert data[start:end] == lines[before]
    assert by_bytes[1] == data.count(b"\n")
    if line_index._numpy() is not None:
        monkeypatch.setattr(line_index, "NUMPY_MIN_BYTES", 0)
        assert line_index.locate_lines(data, len(data), positions) == by_bytes


def test_unreadable_inputs_are_clear_errors(tmp_path):
    scanner = Scanner(engine="python")
    with pytest.raises(AttributionError, match="missing"):
        scanner.scan_file(tmp_path / "absent.log", ctx("absent.log"))
    with pytest.raises(AttributionError, match="not a regular file"):
        scanner.scan_file(tmp_path, ctx("dir"))
    garbage = tmp_path / "garbage.log"
    garbage.write_bytes(os.urandom(200_000) + b"\nSegmentation fault\n")
    assert [h.signature for h in scanner.scan_file(garbage, ctx())][-1] == "segfault"
    if os.geteuid() != 0:
        locked = tmp_path / "locked.log"
        locked.write_text("x")
        locked.chmod(0)
        with pytest.raises(AttributionError, match="cannot read"):
            scanner.scan_file(locked, ctx())


def test_unknown_or_missing_engine_is_refused():
    with pytest.raises(AttributionError, match="unknown scan engine"):
        Scanner(engine="turbo")
    assert catalog_by_id()["xid_hardware"].category is Category.GPU_HARDWARE
