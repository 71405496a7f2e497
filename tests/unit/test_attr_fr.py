"""Flight-recorder loading and analysis: the restricted unpickler, per-file errors, one and two faulty
ranks, mismatches, the JSON variant and format versions 2.3-2.10, on the fixtures of tests/fixtures/fr/."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import pytest

from nvrx_hpc.attribution.fr_analysis import analyze_files
from nvrx_hpc.attribution.fr_load import load_dump, rank_from_name, restricted_loads
from nvrx_hpc.core.errors import AttributionError

FR = Path(__file__).resolve().parents[1] / "fixtures" / "fr"


def files(name: str) -> list[Path]:
    return sorted((FR / name).iterdir())


class _RunsShell:
    """What an attacker would pickle: unpickling calls os.system with a command that leaves a file."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_malicious_pickle_is_refused_and_runs_nothing(tmp_path):
    marker = tmp_path / "pwned"
    payload = pickle.dumps({"version": "2.10", "entries": [_RunsShell(marker)]})
    with pytest.raises(pickle.UnpicklingError, match="refused to load posix.system|refused to load os.system"):
        restricted_loads(payload)
    assert not marker.exists()
    dump = tmp_path / "rank-0"
    dump.write_bytes(payload)
    with pytest.raises(AttributionError, match="rank-0: refused"):
        load_dump(dump)
    report = analyze_files([dump, *files("one_faulty")[1:]])
    assert not marker.exists()
    assert [p.source for p in report.problems] == [str(dump)]
    assert report.ranks == tuple(range(1, 8))


def test_plain_data_passes_the_restricted_unpickler():
    data = {"a": [1, 2.5, None, True], "b": ("x", b"y"), "c": {"n": -1}, "d": bytearray(b"z")}
    assert restricted_loads(pickle.dumps(data, protocol=5)) == data


@pytest.mark.parametrize(("name", "culprits"), [("one_faulty", (5,)), ("two_faulty", (1, 6)),
                                                ("json_two_faulty", (1, 6)), ("real_gloo", (3,))])
def test_faulty_ranks_are_named(name, culprits):
    report = analyze_files(files(name))
    assert report.culprits == culprits
    assert not report.problems
    never = {r for f in report.findings for r in f.never_joined}
    assert set(culprits) <= never


def test_two_faulty_ranks_in_their_own_tp_groups():
    report = analyze_files(files("two_faulty"))
    by_pg = {f.pg: f for f in report.findings}
    assert by_pg["1"].never_joined == (1,) and by_pg["1"].blocked == (0,)
    assert by_pg["4"].never_joined == (6,) and by_pg["4"].blocked == (7,)
    assert by_pg["1"].op == "all_reduce" and by_pg["1"].dtypes == ["Float"]


def test_real_gloo_dump_quirks_are_handled():
    report = analyze_files(files("real_gloo"))
    (finding,) = report.findings
    assert (finding.pg, finding.desc, finding.members) == ("0", "default_pg", (0, 1, 2, 3))
    assert finding.seq == 4 and finding.never_joined == (3,) and finding.blocked == (0, 1, 2)
    assert finding.last_enqueued == {0: 4, 1: 4, 2: 4, 3: 3}
    assert "fr_exp.py" in report.frames[3]


def test_size_mismatch_names_the_odd_rank():
    report = analyze_files(files("mismatch"))
    (finding,) = [f for f in report.findings if f.mismatch]
    assert finding.mismatch["type"] == "size" and finding.mismatch["culprits"] == [2]
    assert report.culprits == (2,)


@pytest.mark.parametrize("version", ["2.3", "2.4", "2.7", "2.9"])
def test_format_versions(version):
    report = analyze_files(files(f"v{version}"))
    assert report.versions == (version,) and report.culprits == (3,) and not report.notes


def test_broken_dumps_are_per_file_errors_and_the_rest_goes_on():
    report = analyze_files([*files("broken"), *files("one_faulty")[1:]])
    errors = {Path(p.source).name: p.error for p in report.problems}
    assert set(errors) == {"rank-0", "rank-1", "rank-2.json"}
    assert "truncated" in errors["rank-0"] and "invalid JSON" in errors["rank-2.json"]
    assert report.ranks == tuple(range(1, 8))


def test_not_a_dump_and_unsupported_versions(tmp_path):
    (tmp_path / "rank-0.json").write_text(json.dumps({"hello": 1}))
    (tmp_path / "rank-1.json").write_text(json.dumps({"version": "3.0", "entries": []}))
    (tmp_path / "rank-2").write_text("plain text")
    (tmp_path / "norank.json").write_text(json.dumps({"version": "2.10"}))
    messages = [p.error for p in analyze_files(tmp_path.iterdir()).problems]
    assert any("not a flight-recorder dump" in m for m in messages)
    assert any("'3.0' is not supported" in m for m in messages)
    assert any("neither a pickled nor a JSON" in m for m in messages)
    assert any("cannot tell the rank" in m for m in messages)


def test_rank_from_name():
    assert [rank_from_name(n) for n in ("rank-3.pkl", "_dump_12", "nccl_trace_rank_5", "x.json")] == [3, 12, 5, None]
    assert rank_from_name("rank-2.restart-0.pkl") == 2  # the worker's names: the rank, not the restart
