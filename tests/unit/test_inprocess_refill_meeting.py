"""The meeting with refill tasks (slots beyond the step's, started later by the launcher), on a real TCPStore:
who the leader waits for, and what the plan gives a refill slot."""

from __future__ import annotations

import json
import threading
import time

import pytest

from nvrx_hpc.inprocess.rendezvous import Rendezvous, make_plan, refill_key
from nvrx_hpc.inprocess.settings import InprocessSettings

NS = "nvrx-ip/1/0"
PREVIOUS = {0: 0, 1: 1, 3: 2, 4: 3}  # 2 nodes x (2 ranks + 1 spare): slots 2 and 5 are the spares
SLOTS = range(6)


@pytest.fixture()
def store():
    dist = pytest.importorskip("torch.distributed")
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    return lambda: dist.TCPStore("127.0.0.1", master.port, is_master=False)


def _meet(client, slot: int, round: int, results: dict, previous=PREVIOUS, soft_s: float = 3.0) -> threading.Thread:
    rdv = Rendezvous(client(), NS, slot, SLOTS, width=3)

    def go() -> None:
        results[slot] = (rdv.meet(round, previous, 4, soft_s, 20.0), time.monotonic())

    thread = threading.Thread(target=go)
    thread.start()
    return thread


def test_a_refill_slot_on_the_lost_ranks_node_goes_first():
    # slots 2 and 5 were used; refill slots 6 (node 1) and 7 (node 0) joined; rank 0 (slot 0, node 0) is lost
    previous = {2: 0, 1: 1, 3: 2, 5: 3}
    plan = make_plan(3, previous, here=[1, 3, 5, 6, 7], world=4, lost=[0], width=3, place={6: 1, 7: 0})
    assert plan.replaced == {0: 7} and not plan.escalate


def test_a_refill_task_gets_its_slot_from_the_base(tmp_path):
    env = {"NVRX_IP_STORE": "h:1", "SLURM_PROCID": "1", "NVRX_IP_WORLD": "4", "NVRX_IP_TASKS_PER_NODE": "2",
           "NVRX_IP_SPARES_PER_NODE": "1", "NVRX_IP_SLOT_BASE": "6", "SLURM_JOB_ID": "9", "NVRX_RESTART_COUNT": "2"}
    s = InprocessSettings.from_env(env)
    assert (s.slot, s.refill, s.namespace) == (7, True, "nvrx-ip/9/2") and list(s.all_slots()) == list(SLOTS)
    assert not InprocessSettings.from_env({**env, "NVRX_IP_SLOT_BASE": ""}).refill


def test_a_refill_task_still_starting_does_not_stall_the_meeting(store):
    admin = store()
    admin.set(refill_key(NS), json.dumps({6: 0}))  # started by the launcher, never joined
    Rendezvous(admin, NS, 0, SLOTS).mark_lost([4])
    results: dict = {}
    began = time.monotonic()
    threads = [_meet(store, slot, 1, results) for slot in (0, 1, 2, 3, 5)]
    for t in threads:
        t.join(30)
    plan = results[0][0]
    assert not plan.escalate and plan.replaced == {3: 5} and 6 not in plan.ranks
    assert max(at for _, at in results.values()) - began < 2.0, "the meeting waited for a task still starting"


def test_the_leader_waits_for_a_joined_refill_slot_and_it_may_take_a_rank(store):
    admin = store()
    admin.set(refill_key(NS), json.dumps({6: 1}))
    Rendezvous(store(), NS, 6, SLOTS, width=3).join()
    Rendezvous(admin, NS, 0, SLOTS).mark_lost([2, 4])  # the spare of node 0 died earlier; rank 3 is lost now
    results: dict = {}
    threads = [_meet(store, slot, 1, results) for slot in (0, 1, 3, 5)]
    time.sleep(0.5)
    assert not results, "the leader did not wait for the joined refill slot"
    threads.append(_meet(store, 6, 1, results))
    for t in threads:
        t.join(30)
    plan = results[0][0]
    assert plan.ranks == {0: 0, 1: 1, 3: 2, 5: 3} and not plan.escalate  # node 1's own spare first
    assert all(r[0] == plan for r in results.values())
    assert Rendezvous(admin, NS, 6, SLOTS).current() == (1, plan)


def test_when_the_plan_would_escalate_the_leader_waits_for_a_refill_task_to_come(store):
    admin = store()
    admin.set(refill_key(NS), json.dumps({6: 1}))
    Rendezvous(admin, NS, 0, SLOTS).mark_lost([2, 4, 5])  # both spares used; rank 3 lost now
    results: dict = {}
    threads = [_meet(store, slot, 1, results) for slot in (0, 1, 3)]
    time.sleep(1.0)
    assert not results, "the leader escalated while a refill task was still starting"
    late = Rendezvous(store(), NS, 6, SLOTS, width=3)
    late.join()
    assert late.meeting_started(1)  # how a refill spare that missed the agent's notice finds the meeting
    threads.append(_meet(store, 6, 1, results))
    for t in threads:
        t.join(30)
    plan = results[0][0]
    assert not plan.escalate and plan.replaced == {3: 6}, plan


def test_a_refill_task_that_ends_before_joining_lets_the_plan_escalate(store):
    admin = store()
    admin.set(refill_key(NS), json.dumps({6: 1}))
    Rendezvous(admin, NS, 0, SLOTS).mark_lost([2, 4, 5])
    results: dict = {}
    threads = [_meet(store, slot, 1, results) for slot in (0, 1, 3)]
    time.sleep(0.5)
    admin.set(f"{NS}/lost/6", "1")  # the launcher saw its refill step end
    for t in threads:
        t.join(30)
    assert results[0][0].escalate
