"""Straggler scoring without a cluster: windows of section timings as the agents report them (rank ->
section -> [count, total_s, min_s]), a slowed rank, a slow link, noisy clean runs, and the settings a
user changes while the job runs."""

from __future__ import annotations

import json
import os
import random

import pytest

from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.launcher.settings import COMM_SECTIONS
from nvrx_hpc.launcher.straggler_watch import StragglerWatch
from nvrx_hpc.straggler import StragglerDetector, StragglerSettings, read_control, write_control

SETTINGS = StragglerSettings(comm_sections=COMM_SECTIONS)
STEPS = 50  # steps per window: 5 s of 0.1 s steps


def _window(ranks: int, *, slow: dict[int, float] | None = None, slow_link: dict[int, float] | None = None,
            noise: float = 0.0, rng: random.Random | None = None) -> dict[str, dict]:
    """One window of a data-parallel job: a step section then an all-reduce that waits for the slowest rank."""
    rng = rng or random.Random(0)
    step = {r: 0.05 * (slow or {}).get(r, 1.0) * (1 + rng.uniform(-noise, noise)) for r in range(ranks)}
    slowest = max(step.values())
    out = {}
    for r in range(ranks):
        comm = (slowest - step[r]) + 0.01 * (slow_link or {}).get(r, 1.0)  # waiting for the last rank, then the wire
        out[str(r)] = {"step": [STEPS, STEPS * step[r], step[r]], "allreduce": [STEPS, STEPS * comm, comm],
                       "checkpoint": [1, 3.0, 3.0]}  # fmt: skip
    return out


def _feed(detector: StragglerDetector, window: dict[str, dict], per_node: int = 2) -> list:
    by_node: dict[str, dict] = {}
    for rank, sections in window.items():
        by_node.setdefault(f"n{int(rank) // per_node + 1}", {})[rank] = sections
    for node, ranks in by_node.items():
        detector.add(node, ranks)
    return detector.close_window()


def test_a_rank_slowed_1_3x_in_its_compute_is_flagged_within_two_windows_as_compute():
    detector = StragglerDetector(SETTINGS)
    rng = random.Random(1)
    flagged_at = None
    for window in range(1, 4):
        scores = _feed(detector, _window(8, slow={5: 1.3}, noise=0.05, rng=rng))
        flags = [s for s in scores if s.flagged]
        if flags and flagged_at is None:
            flagged_at = window
            assert [(s.rank, s.node, s.kind) for s in flags] == [(5, "n3", "compute")]
    assert flagged_at is not None and flagged_at <= 3  # most of the last 3 windows: two below the threshold
    others = [s for s in scores if s.rank != 5]
    assert all(not s.flagged and s.kind == "" for s in others)  # those waiting in the all-reduce are victims


def test_a_rank_behind_a_slow_link_is_flagged_as_communication():
    detector = StragglerDetector(SETTINGS)
    for _ in range(3):
        scores = _feed(detector, _window(8, slow_link={2: 3.0}))
    assert [(s.rank, s.kind) for s in scores if s.flagged] == [(2, "communication")]


def test_clean_noisy_windows_raise_no_flag():
    detector = StragglerDetector(SETTINGS)
    rng = random.Random(7)
    flagged = [s for _ in range(250) for s in _feed(detector, _window(8, noise=0.1, rng=rng)) if s.flagged]
    assert flagged == [] and detector.windows_closed == 250


def test_a_rank_that_recovers_is_unflagged_and_its_own_best_is_kept():
    detector = StragglerDetector(SETTINGS)
    for _ in range(2):
        _feed(detector, _window(4, slow={1: 1.5}))
    assert [s.rank for s in _feed(detector, _window(4, slow={1: 1.5})) if s.flagged] == [1]
    after = [_feed(detector, _window(4)) for _ in range(2)][-1]
    assert not any(s.flagged for s in after)
    slow_again = _feed(detector, _window(4, slow={1: 1.5}))
    assert slow_again[1].self_score == pytest.approx(1 / 1.5, rel=1e-6)  # against its best window


def test_a_rank_slow_in_a_section_that_is_a_sliver_of_the_step_is_not_flagged():
    """1 ms of timed compute in a 100 ms step (the rest untimed): 1.5x slower costs the job under 5 %."""
    detector = StragglerDetector(SETTINGS)
    for _ in range(4):
        window = {str(r): {"step": [STEPS, STEPS * 0.001 * (1.5 if r == 2 else 1.0), 0.001]} for r in range(4)}
        detector.add("n1", window, {str(r): STEPS for r in range(4)})  # 50 iterations in 5 s: 100 ms a step
        scores = detector.close_window()
    assert not any(s.flagged for s in scores) and scores[2].score == 1.0


def test_one_rank_alone_is_never_scored():
    assert _feed(StragglerDetector(SETTINGS), _window(1)) == []


class _Events:
    def __init__(self) -> None:
        self.emitted: list[tuple[str, dict]] = []

    def emit(self, kind: str, **data) -> None:
        self.emitted.append((kind, data))

    def kinds(self) -> list[str]:
        return [k for k, _ in self.emitted]


class _Hub:
    def __init__(self) -> None:
        self.sent: list = []

    def send(self, node, record, **fields) -> None:
        self.sent.append((record.KIND, fields, node))


class _Status:  # an ag.status as the straggler watch reads it
    def __init__(self, timings: dict) -> None:
        self.timings = timings
        self.iterations: dict = {}


def _watch(tmp_path, **settings) -> tuple[StragglerWatch, _Events, _Hub]:
    events, hub = _Events(), _Hub()
    watch = StragglerWatch(StragglerSettings(comm_sections=COMM_SECTIONS, **settings), tmp_path, events, hub)
    return watch, events, hub


def _tick(watch: StragglerWatch, **window) -> list:
    for rank, sections in _window(4, **window).items():
        watch.on_timings(f"n{int(rank) // 2 + 1}", _Status({rank: sections}))
    return watch.tick()


def test_the_watch_publishes_a_flag_once_and_its_clearing(tmp_path):
    watch, events, hub = _watch(tmp_path)
    for _ in range(3):
        _tick(watch, slow={3: 1.5})
    assert events.kinds().count("launcher.straggler") == 1
    kind, data = next(e for e in events.emitted if e[0] == "launcher.straggler")
    assert (data["rank"], data["node"], data["classified_as"]) == (3, "n2", "compute")
    assert watch.status()["flagged"]["3"]["flagged"]
    assert hub.sent[-1][2] == "n2" and hub.sent[-1][1]["ranks"]["3"]["flagged"]  # n2's agent: its own ranks
    assert set(hub.sent[-1][1]["ranks"]) == {"2", "3"}
    assert watch.nodes_to_exclude() == []  # the policy is off by default
    for _ in range(3):
        _tick(watch)
    assert "launcher.straggler.cleared" in events.kinds() and watch.status()["flagged"] == {}


def test_settings_changed_while_running_apply_from_the_next_window(tmp_path):
    watch, events, _ = _watch(tmp_path)
    for _ in range(3):
        _tick(watch, slow={3: 1.2})  # score 0.83: above the default threshold 0.8
    assert watch.flags == {}
    write_control(tmp_path, threshold=0.9, exclude_at_restart=True)
    _tick(watch, slow={3: 1.2})
    assert list(watch.flags) == [3] and watch.nodes_to_exclude() == ["n2"]
    assert "launcher.straggler.settings" in events.kinds()
    write_control(tmp_path, enabled=False)
    assert _tick(watch, slow={3: 1.2}) == [] and watch.flags == {}
    assert watch.status()["enabled"] is False


def test_a_bad_control_file_is_refused_once_and_the_settings_stay(tmp_path):
    watch, events, _ = _watch(tmp_path)
    (tmp_path / "straggler.json").write_text(json.dumps({"threshold": 7}))
    _tick(watch)
    _tick(watch)
    assert events.kinds().count("launcher.straggler.control_rejected") == 1
    assert watch.settings.threshold == SETTINGS.threshold


@pytest.mark.parametrize("content", ['{"threshold": 0}', '{"threshold": true}', '{"enabled": "yes"}',
                                     '{"window_s": 1}', "[1]", "not json"])
def test_control_values_are_checked(tmp_path, content):
    (tmp_path / "straggler.json").write_text(content)
    with pytest.raises(ConfigError):
        read_control(tmp_path)


def test_the_control_file_is_never_read_through_a_symlink(tmp_path):
    (tmp_path / "elsewhere.json").write_text('{"threshold": 0.5}')
    os.symlink(tmp_path / "elsewhere.json", tmp_path / "straggler.json")
    with pytest.raises(ConfigError):
        read_control(tmp_path)


def test_write_control_merges_and_keeps_what_it_was_not_given(tmp_path):
    assert write_control(tmp_path, threshold=0.7) == {"threshold": 0.7}
    assert write_control(tmp_path, enabled=False, threshold=None) == {"threshold": 0.7, "enabled": False}
    with pytest.raises(ConfigError):
        write_control(tmp_path, threshold=1.5)
    assert read_control(tmp_path) == {"threshold": 0.7, "enabled": False}


def test_the_launchers_scores_reach_the_agents_prometheus_metrics(tmp_path):
    import asyncio

    from nvrx_hpc.agent.daemon import Agent, AgentSettings
    from nvrx_hpc.core import messages as m
    from nvrx_hpc.health.metrics import HealthMetrics

    agent = Agent(AgentSettings(node="n2", job="7", socket_path=tmp_path / "a.sock", launcher_host="127.0.0.1",
                                launcher_port=1, token=b"t" * 32))  # fmt: skip
    agent.metrics = HealthMetrics("n2")
    flags = m.StragglerFlags(ranks={"3": {"score": 0.77, "flagged": True, "kind": "compute"},
                                    "2": {"score": 1.0, "flagged": False, "kind": ""}})  # fmt: skip
    asyncio.run(agent._on_launcher(flags))
    sample = agent.metrics.registry.get_sample_value
    assert sample("nvrx_straggler_score", {"node": "n2", "rank": "3"}) == 0.77
    assert sample("nvrx_straggler_flagged", {"node": "n2", "rank": "3"}) == 1.0
    assert sample("nvrx_straggler_flagged", {"node": "n2", "rank": "2"}) == 0.0


def test_scoring_in_parts_gives_what_scoring_at_once_gives():
    whole, in_parts = StragglerDetector(SETTINGS), StragglerDetector(SETTINGS)
    rng = random.Random(3)
    for _ in range(3):
        window = _window(40, slow={7: 1.4}, noise=0.05, rng=rng)
        at_once = _feed(whole, window)
        for rank, sections in window.items():
            in_parts.add(f"n{int(rank) // 2 + 1}", {rank: sections})
        parts = list(in_parts.close_window_in_parts(part=16))
        assert len(parts) > 3  # the launcher's event loop runs between these
        assert [score for part in parts for score in part] == at_once
    assert [s.rank for s in at_once if s.flagged] == [7]
