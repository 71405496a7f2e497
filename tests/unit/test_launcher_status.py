"""status.json at scale: each node's ranks are encoded once per report, and the document stays the one
`nvrx-hpc status` reads."""

from __future__ import annotations

import json

from nvrx_hpc.launcher import hub as hub_mod
from nvrx_hpc.launcher.hub import AgentLink
from nvrx_hpc.launcher.settings import agent_status_s
from nvrx_hpc.launcher.status import StatusWriter, read_status


def _link(node: str, pid: int, ranks: dict) -> AgentLink:
    link = AgentLink(node, pid, writer=None)
    link.ranks = ranks  # as the hub does with each ag.status
    return link


def test_the_document_holds_every_rank_with_its_node_and_the_launchers_own_fields(tmp_path):
    agents = {"n1": _link("n1", 11, {"0": {"rank": 0, "iteration": 4}, "1": {"rank": 1, "iteration": 4}}),
              "n2": _link("n2", 12, {"2": {"rank": 2, "iteration": 3}}), "n3": _link("n3", 13, {})}  # fmt: skip
    StatusWriter(tmp_path).write(agents, {"job": "7", "pool": {"active": ["n1", "n2"]}}, final=True)
    doc = read_status(tmp_path)
    assert doc["ranks"]["2"] == {"rank": 2, "iteration": 3, "node": "n2"} and doc["ranks"]["0"]["node"] == "n1"
    assert doc["agents"]["n1"]["pid"] == 11 and doc["final"] is True and doc["job"] == "7" and "updated" in doc
    assert agents["n1"].ranks["1"] == {"rank": 1, "iteration": 4, "node": "n1"}  # the link decodes on demand


def test_a_report_is_encoded_once_when_it_arrives_and_a_rewrite_encodes_no_rank(tmp_path, monkeypatch):
    calls: list = []
    real = hub_mod.json.dumps
    monkeypatch.setattr(hub_mod.json, "dumps", lambda v, **kw: calls.append(v) or real(v, **kw))
    agents = {f"n{i}": _link(f"n{i}", i, {str(i): {"rank": i}}) for i in range(50)}
    assert len(calls) == 50
    writer = StatusWriter(tmp_path)
    calls.clear()
    writer.write(agents, {}, final=False)
    agents["n3"].ranks = {"3": {"rank": 3, "iteration": 9}}  # a new report
    del agents["n4"]
    writer.write(agents, {}, final=False)
    assert sum(1 for c in calls if isinstance(c, dict) and any(isinstance(v, dict) and "rank" in v
                                                                for v in c.values())) == 1  # fmt: skip
    doc = json.loads((tmp_path / "status.json").read_text())
    assert doc["ranks"]["3"]["iteration"] == 9 and "4" not in doc["ranks"] and len(doc["ranks"]) == 49


def test_a_summary_that_is_not_a_map_is_left_out():
    assert _link("n1", 1, {"0": 5, "1": {"rank": 1}}).ranks == {"1": {"rank": 1, "node": "n1"}}


def test_agents_report_less_often_beyond_512_nodes():
    assert agent_status_s(4) == 1.0 and agent_status_s(512) == 1.0 and agent_status_s(2048) == 4.0
