"""AsyncCheckpointer without MPI: one rank (retention, drain, errors), and ranks as threads (node loss)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from ckpt_threads import ThreadWorld

from nvrx_hpc.ckpt import AsyncCheckpointer, CheckpointSettings
from nvrx_hpc.ckpt.manifest import scan_dir
from nvrx_hpc.core.errors import CheckpointError


def state(step: int, rank: int = 0) -> dict:
    g = torch.Generator().manual_seed(step * 10 + rank)
    return {"w": torch.randn(64, 33, generator=g), "h": torch.randn(7, generator=g).bfloat16(), "step": step}


def same(a: dict, b: dict) -> bool:
    return torch.equal(a["w"], b["w"]) and torch.equal(a["h"], b["h"]) and a["step"] == b["step"]


def test_one_rank_saves_keeps_two_drains_every_second_and_loads(tmp_path):
    bb, shared = tmp_path / "bb" / "{domain}", tmp_path / "shared"
    with AsyncCheckpointer(bb, shared, scheme="none", comm="local", failure_domain="n1", keep=2,
                           drain_every=2) as ck:
        for step in range(1, 6):
            handle = ck.save(state(step), step)
            stats = handle.wait()
            assert stats.committed and stats.nbytes > 64 * 33 * 4 and stats.snapshot_s < 5
        assert ck.latest() == 5
        into = state(0)
        assert ck.load(into) == 5 and same(into, state(5))
        assert ck.last_restore is not None and ck.last_restore.sources == {"local": 1}
    assert sorted(scan_dir(tmp_path / "bb" / "n1")) == [4, 5]
    drained = scan_dir(shared)
    assert sorted(drained) == [2, 4] and all(v.manifest is not None for v in drained.values())


def test_a_background_failure_is_raised_once_by_the_next_save(tmp_path):
    ck = AsyncCheckpointer(tmp_path / "bb", scheme="none", comm="local")
    ck.save(state(1), 1).wait()
    (tmp_path / "bb" / "v000000000002").write_text("in the way")  # the version directory cannot be made
    ck.save(state(2), 2)
    with pytest.raises(CheckpointError, match=r"checkpoint of step 2 was not committed: rank 0 \(") as err:
        ck.save(state(3), 3)
    assert err.value.step == 2 and "previous committed version is kept" in err.value.hint
    ck.save(state(3), 3).wait()  # raised once; training goes on
    into = state(0)
    assert ck.load(into) == 3 and same(into, state(3))
    ck.close()


def test_partner_on_one_node_is_refused_before_anything_runs(tmp_path):
    with pytest.raises(CheckpointError, match="needs every rank's partner in another failure domain"):
        AsyncCheckpointer(tmp_path, scheme="partner", comm="local")


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"bb_dir": "relative/dir"}, "bb_dir = 'relative/dir' is invalid"),
    ({"bb_dir": "/x", "keep": 0}, "keep = 0 is invalid"),
    ({"bb_dir": "/x", "scheme": "raid6"}, "scheme = 'raid6' is invalid"),
    ({"bb_dir": "/x", "failure_domain": "a/b"}, "failure_domain = 'a/b' is invalid"),
])
def test_bad_settings_name_the_field(kwargs, words):
    with pytest.raises(CheckpointError, match=words):
        CheckpointSettings.from_config(**kwargs)


def test_bb_dir_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv("NVRX_BB_DIR", raising=False)
    with pytest.raises(CheckpointError, match="no burst-buffer directory"):
        CheckpointSettings.from_config()
    monkeypatch.setenv("NVRX_BB_DIR", "/dev/shm/nvrx/42")
    monkeypatch.setenv("SLURMD_NODENAME", "n7")
    monkeypatch.delenv("NVRX_FAILURE_DOMAIN", raising=False)
    s = CheckpointSettings.from_config()
    assert s.bb_path() == "/dev/shm/nvrx/42" and s.failure_domain == "n7"


@pytest.mark.parametrize("scheme", ["partner", "xor"])
def test_threads_as_ranks_restore_after_losing_a_node(tmp_path, scheme):
    bb = str(tmp_path / "{domain}")
    before, after = ["a", "a", "b", "b"], ["c", "c", "b", "b"]

    def save(t):
        with AsyncCheckpointer(bb, scheme=scheme, set_size=2, comm=t, failure_domain=before[t.rank]) as ck:
            ck.save(state(1, t.rank), 1).wait()
            ck.save(state(2, t.rank), 2).wait()

    ThreadWorld(4).run(save)
    shutil.rmtree(tmp_path / "a")

    def load(t):
        with AsyncCheckpointer(bb, scheme=scheme, set_size=2, comm=t, failure_domain=after[t.rank]) as ck:
            into = state(0, t.rank)
            step = ck.load(into)
            ck.wait()  # the re-protection on the new mapping
            return step, same(into, state(2, t.rank)), ck.last_restore

    results = ThreadWorld(4).run(load)
    assert [(s, ok) for s, ok, _ in results] == [(2, True)] * 4
    assert results[0][2].reprotect
    assert results[0][2].sources == ({"local": 2, "peer": 2} if scheme == "partner" else {"local": 2, "xor": 2})
    assert sorted(p.name for p in Path(tmp_path / "c" / "v000000000002").iterdir())[-1] == "shard-r00001.h5"


def test_decisions_are_events_and_old_drained_versions_are_trimmed(tmp_path):
    from nvrx_hpc.core.events import EventLog, read_events

    log = EventLog(tmp_path / "run" / "events.jsonl", source="ckpt")
    shared = tmp_path / "shared"
    with AsyncCheckpointer(tmp_path / "bb", shared, scheme="none", comm="local", drain_every=1, drain_keep=2,
                           events=log) as ck:
        for step in range(1, 5):
            ck.save(state(step), step).wait()
        (tmp_path / "bb" / "v000000000005").write_text("in the way")
        ck.save(state(5), 5)
        with pytest.raises(CheckpointError):
            ck.wait()
        ck.load(state(0))
    kinds = [e["kind"] for e in read_events(tmp_path / "run" / "events.jsonl")]
    assert kinds.count("ckpt.committed") == 4 and "ckpt.save_failed" in kinds and kinds[-1] in {
        "ckpt.restored", "ckpt.drained"}
    assert "ckpt.drained" in kinds and "ckpt.restored" in kinds
    assert sorted(scan_dir(shared)) == [3, 4]


def test_a_failure_seen_by_load_is_still_raised_by_the_next_save(tmp_path):
    ck = AsyncCheckpointer(tmp_path / "bb", scheme="none", comm="local")
    ck.save(state(1), 1).wait()
    (tmp_path / "bb" / "v000000000002").write_text("in the way")
    ck.save(state(2), 2)
    assert ck.load(state(0)) == 1
    with pytest.raises(CheckpointError, match="step 2 was not committed"):
        ck.wait()
    ck.wait()  # raised once
    ck.close()


def test_ckpt_keys_of_the_config_are_the_defaults_and_keywords_win(monkeypatch):
    monkeypatch.setenv("NVRX_CONFIG", "/dev/null")  # no site file: only the environment below
    monkeypatch.setenv("NVRX_CKPT__KEEP", "5")
    monkeypatch.setenv("NVRX_CKPT__SCHEME", "xor")
    s = CheckpointSettings.from_config(bb_dir="/x")
    assert (s.keep, s.scheme) == (5, "xor") and s.scheme.value == "xor"  # the enum the save path reads
    assert CheckpointSettings.from_config(bb_dir="/x", keep=3).keep == 3
