"""status.json at scale: each node's ranks are encoded once per report, and the document stays the one
`nvrx-hpc status` reads."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

from nvrx_hpc.launcher import status as status_mod
from nvrx_hpc.launcher.settings import agent_status_s
from nvrx_hpc.launcher.status import StatusWriter, read_status


@dataclass
class Link:
    pid: int
    ranks: dict
    last_seen: float = field(default_factory=time.time)


def test_the_document_holds_every_rank_with_its_node_and_the_launchers_own_fields(tmp_path):
    agents = {"n1": Link(11, {"0": {"rank": 0, "iteration": 4}, "1": {"rank": 1, "iteration": 4}}),
              "n2": Link(12, {"2": {"rank": 2, "iteration": 3}})}  # fmt: skip
    StatusWriter(tmp_path).write(agents, {"job": "7", "pool": {"active": ["n1", "n2"]}}, final=True)
    doc = read_status(tmp_path)
    assert doc["ranks"]["2"] == {"rank": 2, "iteration": 3, "node": "n2"} and doc["ranks"]["0"]["node"] == "n1"
    assert doc["agents"]["n1"]["pid"] == 11 and doc["final"] is True and doc["job"] == "7" and "updated" in doc


def test_a_node_is_encoded_again_only_when_its_agent_sent_a_new_report(tmp_path, monkeypatch):
    calls: list = []
    real = status_mod._dumps
    monkeypatch.setattr(status_mod, "_dumps", lambda v: calls.append(v) or real(v))
    agents = {f"n{i}": Link(i, {str(i): {"rank": i}}) for i in range(50)}
    writer = StatusWriter(tmp_path)
    writer.write(agents, {}, final=False)
    ranks_encoded = lambda: sum(1 for c in calls if isinstance(c, dict) and "rank" in c)  # noqa: E731
    assert ranks_encoded() == 50
    calls.clear()
    agents["n3"].ranks = {"3": {"rank": 3, "iteration": 9}}  # a new report replaces the dict
    del agents["n4"]
    writer.write(agents, {}, final=False)
    assert ranks_encoded() == 1
    doc = json.loads((tmp_path / "status.json").read_text())
    assert doc["ranks"]["3"]["iteration"] == 9 and "4" not in doc["ranks"] and len(doc["ranks"]) == 49


def test_agents_report_less_often_beyond_512_nodes():
    assert agent_status_s(4) == 1.0 and agent_status_s(512) == 1.0 and agent_status_s(2048) == 4.0
