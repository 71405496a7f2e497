"""The worker client against a real Unix socket server: message order and content, coalescing, requests."""

from __future__ import annotations

import os
import shutil
import time

import pytest
from _worker_stub import StubAgent, short_dir, token_file

from nvrx_hpc.core.wire import load_token
from nvrx_hpc.worker.client import Client
from nvrx_hpc.worker.env import WorkerEnv


@pytest.fixture
def setup():
    directory = short_dir()
    tok_path, token = token_file(directory)
    sock = os.path.join(directory, "agent.sock")
    agent = StubAgent(sock, token)
    env = WorkerEnv(socket=sock, token_file=tok_path, run_dir=directory, rank=3, local_rank=1, restart=2)
    clients = []

    def start(**kwargs):
        client = Client(env, **kwargs).start(register_signal=False)
        clients.append(client)
        return client

    yield agent, env, start
    for client in clients:
        client.close(wait=0.5)
    agent.stop()
    shutil.rmtree(directory, ignore_errors=True)


def test_hello_heartbeat_section_iteration_in_order(setup):
    agent, _env, start = setup
    before = time.time()
    client = start()
    client.heartbeat()
    agent.wait(lambda: agent.of_type("w.hb"))
    with client.section("step"):
        client.set_iteration(5)
    agent.wait(lambda: len(agent.of_type("w.sec")) == 2)
    assert agent.types() == ["w.hello", "w.hb", "w.sec", "w.iter", "w.sec"]
    hello = agent.of_type("w.hello")[0]
    assert hello == {"type": "w.hello", "rank": 3, "local_rank": 1, "pid": os.getpid(), "restart": 2,
                     "t": hello["t"]}
    hb = agent.of_type("w.hb")[0]
    assert hb["rank"] == 3 and hb["beats"] == 1 and before <= hb["t"] <= time.time()
    opened, closed = agent.of_type("w.sec")
    assert (opened["name"], opened["open"], closed["name"], closed["open"]) == ("step", True, "step", False)
    assert opened["t"] <= closed["t"]
    assert agent.of_type("w.iter")[0]["n"] == 5
    client.close()
    agent.wait(lambda: agent.of_type("w.bye"))
    assert agent.of_type("w.bye") == [{"type": "w.bye", "rank": 3}]


def test_first_heartbeat_is_prompt_then_coalesced(setup):
    agent, _env, start = setup
    client = start(hb_interval=0.05)
    agent.wait(lambda: agent.of_type("w.hello"))
    time.sleep(0.05)  # the thread is idle, waiting
    t0 = time.monotonic()
    client.heartbeat()
    agent.wait(lambda: agent.of_type("w.hb"))
    assert time.monotonic() - t0 < 2.0  # promptly: not after an idle thread's next wake-up by timer
    calls, t0 = 0, time.monotonic()
    while time.monotonic() - t0 < 0.5:
        client.heartbeat()
        calls += 1
    total = calls + 1
    agent.wait(lambda: agent.of_type("w.hb")[-1]["beats"] == total)
    sent = agent.of_type("w.hb")
    # ~20 messages/s at most: 0.5 s of beats gives about 11, never one per call
    assert 2 <= len(sent) <= 20, len(sent)
    assert [m["beats"] for m in sent] == sorted(m["beats"] for m in sent)


def test_sections_nest_and_overlap(setup):
    agent, _env, start = setup
    client = start()
    client.start_section("a")
    client.start_section("b")
    client.end_section("a")
    client.end_section("b")
    with client.section("a"), client.section("a"):  # nested same name: one open, one close
        pass
    client.end_section("never-opened")  # ignored
    agent.wait(lambda: len(agent.of_type("w.sec")) == 6)
    time.sleep(0.05)
    got = [(m["name"], m["open"]) for m in agent.of_type("w.sec")]
    assert got == [("a", True), ("b", True), ("a", False), ("b", False), ("a", True), ("a", False)]
    with pytest.raises(TypeError, match="section name"):
        client.start_section("")


def test_dump_request_writes_the_stacks_file(setup):
    agent, env, start = setup
    start()
    agent.send({"type": "a.dump", "reason": "hang of rank 3"})
    path = env.stacks_path()
    assert path.endswith("stacks/rank-3.restart-2.txt")
    agent.wait(lambda: os.path.exists(path) and "test_dump_request" in open(path).read())
    text = open(path).read()
    assert "reason: hang of rank 3" in text and "nvrx-worker-rank3" not in text.splitlines()[0]
    assert "Thread 0x" in text or "Current thread" in text
    assert not os.path.exists(env.fr_path())  # torch.distributed not initialised here: no flight recorder
    agent.wait(lambda: agent.of_type("w.dumped"))  # the answer that lets the agent stop the rank at once
    assert agent.of_type("w.dumped")[0]["rank"] == 3


def test_stop_request_and_timeouts(setup):
    agent, _env, start = setup
    client = start()
    assert client.stop_requested() is False
    agent.send({"type": "a.timeouts", "timeouts": {"heartbeat": 12.5, "sections": {"step": 3.0}}})
    agent.send({"type": "a.stop", "reason": "time limit"})
    agent.wait(lambda: client.stop_requested())
    assert client.stop_reason == "time limit"
    state = client.state_dict()
    assert state == {"version": 1, "timeouts": {"heartbeat": 12.5, "sections": {"step": 3.0}}}
    client.load_state_dict({"version": 1, "timeouts": {"heartbeat": 20.0}})
    agent.wait(lambda: agent.of_type("w.timeouts"))
    assert agent.of_type("w.timeouts")[0] == {"type": "w.timeouts", "rank": 3, "timeouts": {"heartbeat": 20.0}}
    with pytest.raises(ValueError, match="version"):
        client.load_state_dict({"version": 99, "timeouts": {}})
    with pytest.raises(TypeError, match="state_dict"):
        client.load_state_dict([1, 2])


def test_agent_gone_training_continues_and_a_new_agent_gets_the_state(setup):
    agent, env, start = setup
    client = start()
    client.heartbeat()
    client.start_section("step")
    client.set_iteration(7)
    agent.wait(lambda: agent.of_type("w.iter"))
    agent.stop()
    for i in range(2000):  # the training keeps going while the agent is away
        client.heartbeat()
        if i % 500 == 0:
            client.set_iteration(8 + i // 500)
    deadline = time.monotonic() + 10  # the thread folds what was queued into the state it replays
    while client.events and time.monotonic() < deadline:
        time.sleep(0.01)
    new_agent = StubAgent(env.socket, load_token(env.token_file))
    try:
        new_agent.wait(lambda: new_agent.of_type("w.hb"), timeout=10)
        types = new_agent.types()
        assert types[:4] == ["w.hello", "w.sec", "w.iter", "w.hb"], types
        assert new_agent.of_type("w.sec")[0]["name"] == "step"
        assert new_agent.of_type("w.iter")[0]["n"] == 11  # the last iteration set while away
        assert new_agent.of_type("w.hb")[0]["beats"] == 2001
    finally:
        new_agent.stop()


def test_wrong_token_agent_cannot_break_or_command_the_worker(setup):
    _agent, env, _start = setup
    directory = short_dir()
    _, other = token_file(directory)
    liar = StubAgent(os.path.join(directory, "liar.sock"), other, close_on_error=False)
    bad_env = WorkerEnv(socket=liar.path, token_file=env.token_file, run_dir=directory, rank=0, local_rank=0,
                        restart=0)
    client = Client(bad_env).start(register_signal=False)
    try:
        liar.wait(lambda: liar.errors)  # it cannot decode our frames
        assert "bad MAC" in liar.errors[0]
        liar.send({"type": "a.stop", "reason": "forged"})  # we reject it and reconnect with backoff
        liar.wait(lambda: len(liar.conns) >= 2, timeout=5)
        for _ in range(1000):
            client.heartbeat()
        time.sleep(0.2)
        assert client.stop_requested() is False
        assert client._sender.is_alive()
    finally:
        client.close(wait=0.2)
        liar.stop()
        shutil.rmtree(directory, ignore_errors=True)


def test_agent_absent_at_start_then_appears(setup):
    agent, env, start = setup
    agent.stop()
    client = start()
    client.heartbeat()
    time.sleep(0.2)
    late = StubAgent(env.socket, load_token(env.token_file))
    try:
        late.wait(lambda: late.of_type("w.hb"), timeout=10)
        assert late.types()[0] == "w.hello"
        assert client.enabled()
    finally:
        late.stop()
