"""In-process restart without Slurm: the plan at each meeting, and 20 restarts in a row of real gloo ranks
(local processes and a real TCPStore) that leave no memory, threads or descriptors behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.inprocess.rendezvous import Plan, make_plan
from nvrx_hpc.inprocess.settings import InprocessSettings

WORKER = Path(__file__).with_name("inprocess_leak_worker.py")


def test_survivors_keep_their_rank_and_a_spare_takes_the_lost_one():
    previous = {0: 0, 1: 1, 3: 2, 4: 3}  # slots 2 and 5 are spares
    plan = make_plan(1, previous, here=[0, 1, 2, 4, 5], world=4, lost=[3])
    assert plan.ranks == {0: 0, 1: 1, 2: 2, 4: 3} and plan.replaced == {2: 2} and plan.escalate is None
    assert plan.lost == (3,)
    assert Plan.from_json(plan.to_json()) == plan


def test_a_spare_on_the_lost_ranks_node_goes_first():
    previous = {0: 0, 1: 1, 3: 2, 4: 3}  # 3 tasks per node: slots 2 and 5 are the spares of nodes 0 and 1
    plan = make_plan(1, previous, here=[0, 1, 2, 3, 5], world=4, lost=[4], width=3)
    assert plan.replaced == {3: 5} and plan.ranks[5] == 3


def test_a_rank_without_a_spare_escalates():
    plan = make_plan(2, {0: 0, 1: 1}, here=[1], world=2)
    assert plan.escalate and "[0]" in plan.escalate


def test_first_plan_puts_the_spares_after_each_nodes_training_ranks():
    s = InprocessSettings(store_host="h", store_port=1, slot=0, world_size=4, per_node=2, spares_per_node=1,
                          namespace="ns")
    assert s.first_plan() == {0: 0, 1: 1, 3: 2, 4: 3}
    assert list(s.all_slots()) == [0, 1, 2, 3, 4, 5]


def test_a_spare_node_holds_only_spares_and_a_lost_nodes_ranks_go_to_healthy_nodes():
    env = {"NVRX_IP_STORE": "h:1", "SLURM_PROCID": "4", "NVRX_IP_WORLD": "4", "NVRX_IP_TASKS_PER_NODE": "2",
           "NVRX_IP_SPARES_PER_NODE": "1", "NVRX_IP_SPARE_NODES": "1"}
    s = InprocessSettings.from_env(env)  # Slurm's order: n1, the spare node, n2
    assert s.spare_nodes == (1,) and list(s.all_slots()) == list(range(9))
    assert s.first_plan() == {0: 0, 1: 1, 6: 2, 7: 3}
    # the training node in the middle is lost (slots 6-8): its ranks go to spares alive, never to its own
    plan = make_plan(1, s.first_plan(), here=[0, 1, 2, 3, 4, 5], world=4, lost=[6, 7, 8], width=3)
    assert not plan.escalate and set(plan.replaced) == {2, 3} and all(slot < 6 for slot in plan.ranks)


def test_settings_refuse_a_task_not_started_for_inprocess():
    with pytest.raises(ConfigError, match="NVRX_IP_STORE"):
        InprocessSettings.from_env({"SLURM_PROCID": "0"})
    with pytest.raises(ConfigError, match="not a number"):
        InprocessSettings.from_env({"NVRX_IP_STORE": "h:1", "NVRX_IP_WORLD": "four"})


def _start(tmp_path, world: int, faulty: int, *extra: str) -> tuple[list, Path]:
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    out = tmp_path / "samples.jsonl"
    procs = []
    for slot in range(world):
        env = {**os.environ, "NVRX_IP_STORE": f"127.0.0.1:{store.port}", "SLURM_PROCID": str(slot),
               "NVRX_IP_WORLD": str(world), "NVRX_IP_TASKS_PER_NODE": str(world), "NVRX_IP_SOFT_TIMEOUT_S": "5",
               "NVRX_IP_PG_TIMEOUT_S": "30", "NVRX_IP_MAX_RESTARTS": "30"}
        for name in ("NVRX_AGENT_SOCKET", "NVRX_RUN_DIR", "SLURM_NODEID", "SLURM_LOCALID"):
            env.pop(name, None)
        procs.append(subprocess.Popen([sys.executable, str(WORKER), str(faulty), str(out), *extra], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    procs.append(store)  # kept alive until the tasks are done
    return procs, out


def test_twenty_restarts_leave_no_leak_real_gloo_ranks(tmp_path):
    world, faulty = 3, 21
    procs, out = _start(tmp_path, world, faulty)
    tasks = procs[:-1]
    results = [p.communicate(timeout=240) for p in tasks]
    assert [p.returncode for p in tasks] == [0] * world, [r[1][-2000:] for r in results]
    assert all(f"result {float(world)}" in r[0] for r in results)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    for slot in range(world):
        mine = {r["round"]: r for r in rows if r["slot"] == slot}
        assert sorted(mine) == list(range(faulty + 1))
        # the level of the first restarts (a descriptor may open lazily during them), and the twentieth after
        first = {key: max(mine[r][key] for r in (1, 2, 3)) for key in ("rss", "threads", "fds")}
        last = mine[faulty]
        assert last["rss"] <= first["rss"] * 1.02, (slot, first["rss"], last["rss"])
        assert last["threads"] <= first["threads"], (slot, first["threads"], last["threads"])
        assert last["fds"] <= first["fds"], (slot, first["fds"], last["fds"])


def test_the_same_error_three_rounds_in_a_row_escalates_real_gloo_ranks(tmp_path):
    procs, _ = _start(tmp_path, 2, 100, "same")
    tasks = procs[:-1]
    results = [p.communicate(timeout=180) for p in tasks]
    assert [p.returncode for p in tasks] == [95, 95], [r[1][-1500:] for r in results]
    assert "the same error ended 3 rounds in a row" in results[0][1]
