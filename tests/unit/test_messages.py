"""The message records: every kind has one, each round-trips through a real frame, and a map with a
wrong or missing field is refused with the kind and field named."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.core.wire import Codec, new_token

CODEC = Codec(new_token())
DOCS = Path(__file__).resolve().parents[2] / "docs" / "wire-protocol.md"

SAMPLES = [
    m.WorkerHello(rank=3, pid=41, local_rank=1, restart=2, t=5.0),
    m.Heartbeat(rank=3, beats=9, t=5.5),
    m.SectionMark(rank=3, name="step", open=True, t=6.0),
    m.Iteration(rank=3, n=12, t=6.1),
    m.WorkerBye(rank=3),
    m.WorkerTimeouts(rank=3, timeouts={"heartbeat": 20.0}),
    m.WorkerDumped(rank=3),
    m.AgentTimeouts(timeouts={"heartbeat": 20.0, "sections": {"step": 3.0}}),
    m.AgentStop(reason="time limit"),
    m.AgentDump(reason=None),
    m.Challenge(job="7", nonce="ab" * 16),
    m.StepStart(job="7", restart=2, status_s=4.0),
    m.LauncherTimeouts(job="7", timeouts={"initial": 30}),
    m.LauncherStop(job="7", grace_s=2, reason="step failed"),
    m.RequestStop(job="7", reason="time limit"),
    m.LauncherDump(job="7"),
    m.Shutdown(job="7"),
    m.AgentHello(job="7", node="n1", pid=4, socket="/tmp/s", nonce="cd"),
    m.RankEvent(job="7", node="n1", event=m.RankEventKind.EXITED, rank=5, exit_code=None, signal=9,
                sections=("step", "allreduce"), iteration=7),
    m.Calibration(job="7", node="n1", timeouts={"heartbeat": 4.0}),
    m.AgentStatus(job="7", node="n1", ranks={"5": {"iteration": 3}}),
    m.AgentStopped(job="7", node="n1", ranks=(1, 2), reason="launcher"),
    m.HealthFailed(job="7", node="n1", check="gpu", verdict="fatal", detail="Xid 79"),
    m.HealthUnavailable(job="7", node="n1", reason="no NVML"),
    m.AgentBye(job="7", node="n1"),
    m.AgentStatus(job="7", node="n1", ranks={}, timings={"5": {"step": [10, 0.52, 0.05]}}, iterations={"5": 10}),
    m.StragglerFlags(job="7", ranks={"5": {"score": 0.7, "flagged": True, "kind": "compute"}}),
    m.WorkerFault(rank=3, round=2, reason="RuntimeError: boom", lost=(5,)),
    m.AgentRestart(round=2, lost=(5,), reason="rank 3 raised"),
    m.InprocessRestart(job="7", round=2, lost=(5,), reason="rank 3 raised"),
    m.WorkerStandby(restart=2, pid=4242, local_rank=1),
    m.AgentGo(restart=2, ranks_on=("n1", "n3"), env={"MASTER_PORT": "29500"}),
    m.StandbyGo(job="7", restart=2, ranks_on=("n1", "n3"), env={"MASTER_PORT": "29500"}),
    m.RankEvent(job="7", node="n1", event=m.RankEventKind.RAISED, rank=3, round=2, lost=(5,), reason="boom"),
]


def test_every_kind_on_the_wire_has_a_record_and_a_sample():
    wire_kinds = {k for k in m.Kind if k is not m.Kind.HUB_AGENT_LOST}
    assert set(m.RECORDS) == wire_kinds
    assert {type(s).KIND for s in SAMPLES} == wire_kinds


@pytest.mark.parametrize("record", SAMPLES, ids=lambda r: r.KIND.value)
def test_each_record_round_trips_through_a_frame(record):
    assert m.parse(CODEC.decode(CODEC.encode(record.to_wire()))) == record


def test_records_are_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        SAMPLES[1].beats = 0  # type: ignore[misc]


@pytest.mark.parametrize(("raw", "names"), [
    ({"type": "w.hb", "rank": "3", "beats": 1, "t": 0.0}, ["w.hb", "'rank'", "an integer"]),
    ({"type": "w.hb", "rank": True, "beats": 1, "t": 0.0}, ["'rank'", "an integer"]),  # bool is no integer
    ({"type": "w.sec", "rank": 1, "name": "s", "open": 1, "t": 0.0}, ["'open'", "true or false"]),
    ({"type": "w.hb", "rank": 1}, ["w.hb", "without beats, t"]),
    ({"type": "ag.rank", "node": "n1", "rank": 1, "event": "exploded"}, ["'event'", "one of registered"]),
    ({"type": "ag.rank", "node": "n1", "rank": 1, "event": "hung", "sections": ["a", 2]}, ["'sections'"]),
    ({"type": "la.stop", "grace_s": "soon"}, ["'grace_s'", "a number or null"]),
    ({"type": "hub.agent_lost", "node": "n1"}, ["unknown message kind"]),  # made locally, never accepted
    ({"type": "w.unheard"}, ["unknown message kind 'w.unheard'"]),
    ({"type": 7}, ["unknown message kind 7"]),
])
def test_a_bad_map_is_refused_naming_the_kind_and_field(raw, names):
    with pytest.raises(ProtocolError) as caught:
        m.parse(raw)
    for name in names:
        assert name in caught.value.message


def test_unknown_keys_are_ignored_and_defaults_fill_in():
    msg = m.parse({"type": "la.step", "v": 1, "job": "7", "time": 1.0, "from_the_future": [1, 2]})
    assert msg == m.StepStart(job="7", time=1.0, restart=0)


def test_the_protocol_page_names_every_kind():
    page = DOCS.read_text()
    documented = set(re.findall(r"`((?:w|a|la|ag|hub)\.[a-z_]+)`", page))
    assert {k.value for k in m.Kind} <= documented
