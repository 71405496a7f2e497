"""Hostile flight-recorder dumps: every one fails inside AttributionError, quickly and in little memory."""

from __future__ import annotations

import json
import pickle
import resource
import time

import pytest

from nvrx_hpc.attribution.fr_load import load_dump
from nvrx_hpc.core.errors import AttributionError


def _bomb() -> bytes:
    """A few hundred bytes that stand for a tree of 2**40 values: one list referenced twice at each level."""
    node: list = []
    for _ in range(40):
        node = [node, node]
    return pickle.dumps({"version": "2.4", "entries": [{"input_sizes": node}], "pg_config": {}}, protocol=4)


def test_a_shared_structure_pickle_is_refused_at_once(tmp_path):
    data = _bomb()
    assert len(data) < 400
    path = tmp_path / "rank-0.pkl"
    path.write_bytes(data)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.monotonic()
    with pytest.raises(AttributionError, match="refused as hostile"):
        load_dump(path)
    assert time.monotonic() - started < 2
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 50_000  # KiB


@pytest.mark.parametrize("content", [
    json.dumps({"version": "2.4", "pg_config": [1, 2]}).encode(),  # a list where a map belongs
    json.dumps({"version": "2.4", "pg_status": "x"}).encode(),
    json.dumps({"version": "2.4", "entries": [{"process_group": 5}]}).encode(),
    json.dumps({"version": "2.4", "pg_config": {"0": {"ranks": "[" * 5000 + "]" * 5000}}}).encode(),
    b"{" + b'"a":[' * 100000,
    b"[" * 100000,
    pickle.dumps({"version": "2.4", "entries": [{"frames": [{"name": [1]}], "collective_seq_id": [2]}]}),
    pickle.dumps({"version": "2.4", "entries": "nope"}),
    pickle.dumps({"version": "2.4", "pg_status": {"0": {"last_enqueued_collective": 10 ** 400}}}),
    b"\x80\x04" + b"(" * 100000,
])  # fmt: skip
def test_a_malformed_dump_fails_inside_attribution_error(tmp_path, content):
    path = tmp_path / "rank-1.pkl"
    path.write_bytes(content)
    try:
        load_dump(path)
    except AttributionError:
        pass  # refused with the module's own error; a tolerant parse of what is there is fine too


def test_report_md_quotes_log_text_inertly():
    from nvrx_hpc.attribution.render import to_markdown

    hostile = "</td><img src=x onerror=alert(1)> `| evil` & <!-- x"
    report = {"category": "application", "root_cause": hostile, "culprit": {"nodes": [], "ranks": [], "gpus": []},
              "restartable": False, "confidence": 0.5, "timeline": [], "errors": [{"source": hostile, "error": "x"}],
              "evidence": [{"source": "a", "text": hostile, "line": 1, "role": "root"}]}  # fmt: skip
    md = to_markdown(report)
    assert "<" not in md.replace("<!--", "") and "<!--" not in md and "`" not in md
    assert md.count("&lt;img src=x onerror=alert(1)&gt;") == 3 and "\\| evil" in md
