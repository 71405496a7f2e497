"""A real agent and a real launcher hub on this host's sockets: registration, hang kill, hostile input."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from nvrx_hpc.agent.daemon import Agent, AgentSettings
from nvrx_hpc.core import messages as m
from nvrx_hpc.core.wire import Codec, new_token, token_to_text
from nvrx_hpc.launcher.hub import AgentHub

TOKEN = new_token()


async def _start(tmp_path, **overrides):
    hub = AgentHub(TOKEN, host="127.0.0.1", job="7")
    port = await hub.start()
    settings = AgentSettings(
        node="n1", job="7", socket_path=tmp_path / "a.sock", launcher_host="127.0.0.1", launcher_port=port,
        token=TOKEN, **overrides,
    )
    agent = Agent(settings)
    task = asyncio.get_running_loop().create_task(agent.run())
    assert not await hub.wait_for_agents(["n1"], timeout=5)
    return hub, agent, task


async def _next(hub: AgentHub, kind: str, timeout: float = 5.0, **match):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        event = await asyncio.wait_for(hub.events.get(), timeout=deadline - time.monotonic())
        if event.kind == kind and all(getattr(event.msg, k, None) == v for k, v in match.items()):
            return event
    raise AssertionError(f"no {kind} {match}")


def _worker(path, frames: list[bytes]) -> socket.socket:
    client = socket.socket(socket.AF_UNIX)
    client.connect(str(path))
    for frame in frames:
        client.sendall(frame)
    return client


def test_worker_registration_heartbeats_and_status(tmp_path):
    async def scenario():
        hub, agent, task = await _start(tmp_path)
        codec = Codec(TOKEN)
        client = _worker(tmp_path / "a.sock", [
            codec.encode(m.WorkerHello(rank=5, local_rank=1, pid=os.getpid(), restart=0).to_wire()),
            codec.encode(m.Heartbeat(rank=5, beats=3, t=time.time()).to_wire()),
            codec.encode(m.Iteration(rank=5, n=12).to_wire()),
            codec.encode(m.SectionMark(rank=5, name="step", open=True, t=time.time()).to_wire()),
        ])
        event = await _next(hub, "ag.rank", event="registered", rank=5)
        assert event.msg.pid == os.getpid()  # the peer's credentials, not what the frame claims
        deadline = time.monotonic() + 10  # the agent reports its ranks every status_s (1 s)
        while time.monotonic() < deadline and hub.agents["n1"].ranks.get("5", {}).get("iteration") != 12:
            await asyncio.sleep(0.05)
        ranks = hub.agents["n1"].ranks
        assert ranks["5"]["iteration"] == 12 and ranks["5"]["sections"] == ["step"] and ranks["5"]["beats"] == 3
        client.close()
        hub.broadcast(m.Shutdown)
        await asyncio.wait_for(task, 5)
        await hub.close()

    asyncio.run(scenario())


def test_a_hung_rank_is_reported_then_stopped(tmp_path):
    """A real child process that heartbeats once and then stops (SIGSTOP): found, reported, killed."""

    async def scenario():
        hub, agent, task = await _start(tmp_path, poll_s=0.05, dump_wait_s=0.2, term_grace_s=0.5)
        hub.broadcast(m.LauncherTimeouts, timeouts={"initial": 30, "heartbeat": 0.5, "calibrate": False})
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            # The agent registers whatever pid the SPANK plugin reports: the child here.
            agent._on_spank(_register(child.pid))
            agent.registry.get(9).beat(1, time.time())
            os.kill(child.pid, signal.SIGSTOP)
            event = await _next(hub, "ag.rank", event="hung", rank=9)
            assert "no heartbeat" in event.msg.reason
            exited = await _next(hub, "ag.rank", event="exited", rank=9)
            assert exited.msg.source == "pid-watch"
            assert child.wait(timeout=5) in (-signal.SIGTERM, -signal.SIGKILL)
        finally:
            child.kill()
        hub.broadcast(m.Shutdown)
        await asyncio.wait_for(task, 5)
        await hub.close()

    asyncio.run(scenario())


# A rank on the worker link whose dump takes 0.6 s: it answers a.dump with w.dumped once its file is written.
_SLOW_DUMPER = """
import faulthandler, os, signal, socket, sys, time
from nvrx_hpc.core import messages as m
from nvrx_hpc.core.wire import Codec, FrameReader, token_from_text
faulthandler.register(signal.SIGUSR1)  # as the worker API does: the agent sends SIGUSR1 with a.dump
codec = Codec(token_from_text(sys.argv[2]))
sock = socket.socket(socket.AF_UNIX)
sock.connect(sys.argv[1])
sock.sendall(codec.encode(m.WorkerHello(rank=4, local_rank=0, pid=os.getpid(), restart=0).to_wire()))
sock.sendall(codec.encode(m.Heartbeat(rank=4, beats=1, t=time.time()).to_wire()))
reader = FrameReader(codec)
while True:  # hung: no more heartbeats, but the link thread still answers
    for msg in reader.feed(sock.recv(65536)):
        if msg["type"] == "a.dump":
            time.sleep(0.6)
            open(sys.argv[3], "w").write("stacks")
            sock.sendall(codec.encode(m.WorkerDumped(rank=4).to_wire()))
"""


def test_a_stop_right_after_a_hang_waits_for_the_hung_ranks_dump(tmp_path):
    """The launcher's stop comes while the hung rank still writes its dump: the agent terminates it only
    once the rank has answered, not at once (the dump would be cut) and not after the whole window."""

    async def scenario():
        hub, agent, task = await _start(tmp_path, poll_s=0.05, dump_wait_s=8.0, term_grace_s=0.5)
        hub.broadcast(m.LauncherTimeouts, timeouts={"initial": 30, "heartbeat": 0.5, "calibrate": False})
        marker = tmp_path / "dumped"
        child = subprocess.Popen([sys.executable, "-c", _SLOW_DUMPER, str(tmp_path / "a.sock"),
                                  token_to_text(TOKEN), str(marker)])
        try:
            await _next(hub, "ag.rank", event="registered", rank=4)
            await _next(hub, "ag.rank", event="hung", rank=4)
            stop_at = time.monotonic()
            hub.broadcast(m.LauncherStop, grace_s=0.5, reason="hang of rank 4")
            await _next(hub, "ag.stopped", timeout=10)
            took = time.monotonic() - stop_at
            assert marker.exists()  # the dump was finished before SIGTERM
            assert child.wait(timeout=5) == -signal.SIGTERM
            assert 0.3 < took < 4.0, took  # held for the answer, not for the 8 s window
        finally:
            child.kill()
        hub.broadcast(m.Shutdown)
        await asyncio.wait_for(task, 5)
        await hub.close()

    asyncio.run(scenario())


def _spank(kind: str, pid: int, rank: int = 9, step: int = 0, **fields):
    from nvrx_hpc.slurm.spank_messages import parse_spank_line

    return parse_spank_line(json.dumps({
        "v": 1, "type": kind, "job": 7, "step": step, "rank": rank, "local_rank": 0, "pid": pid, "node": "n1",
        "restart_count": 0, "time": time.time(), **fields,
    }).encode())


def _register(pid: int):
    return _spank("register", pid)


def test_a_task_of_another_step_does_not_take_an_exited_ranks_place(tmp_path):
    """Rank 0 of the training step exits; the launcher's health probe (a one-task step that got the plugin
    from the job) then registers its task 0 here. The stop that follows must not kill the probe; after the
    next step start, that step's tasks register as usual."""

    async def scenario():
        hub, agent, task = await _start(tmp_path, poll_s=0.05, term_grace_s=0.5)
        rank0 = subprocess.Popen([sys.executable, "-c", "pass"])
        rank0.wait()
        probe = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        try:
            agent._on_spank(_spank("register", rank0.pid, rank=0, step=3))
            agent._on_spank(_spank("task_exit", rank0.pid, rank=0, step=3, status=768, exit_code=3))
            agent._on_spank(_spank("register", probe.pid, rank=0, step=4))
            assert agent.registry.get(0).pid == rank0.pid
            hub.broadcast(m.LauncherStop, grace_s=0.5, reason="test")
            await _next(hub, "ag.stopped")
            assert probe.poll() is None, "the stop killed the probe"
            hub.broadcast(m.StepStart, restart=1)
            await asyncio.sleep(0.2)
            agent._on_spank(_spank("register", probe.pid, rank=0, step=5))
            assert agent.registry.get(0).pid == probe.pid
        finally:
            probe.kill()
        hub.broadcast(m.Shutdown)
        await asyncio.wait_for(task, 5)
        await hub.close()

    asyncio.run(scenario())


@pytest.mark.parametrize("side", ["agent socket", "launcher port"])
def test_hostile_input_is_rejected_and_both_keep_working(tmp_path, side):
    async def scenario():
        hub, agent, task = await _start(tmp_path)
        wrong = Codec(new_token())
        good = Codec(TOKEN)

        async def hostile(payload: bytes) -> None:
            if side == "agent socket":
                reader, writer = await asyncio.open_unix_connection(str(tmp_path / "a.sock"))
            else:
                reader, writer = await asyncio.open_connection("127.0.0.1", hub.port)
            writer.write(payload)
            await writer.drain()
            await asyncio.sleep(0.05)
            writer.close()

        rejected_before = agent.server.rejected if side == "agent socket" else hub.rejected
        await hostile(wrong.encode(m.WorkerHello(rank=1, pid=1).to_wire()))  # wrong token
        await hostile(wrong.encode(m.AgentHello(node="n9", pid=1).to_wire()))
        await hostile(b"\x00\x00\x00\x10" + b"\xff" * 16)  # malformed frame
        await hostile(b"\x7f\xff\xff\xff")  # announces 2 GiB
        await hostile(good.encode({"type": "w.hb", "rank": "5", "beats": [], "t": 0.0}))  # right MAC, wrong fields
        await hostile(good.encode({"type": "la.nonsense"}))  # right MAC, no such kind
        flood = good.encode(m.Heartbeat(rank=77, beats=1, t=0.0).to_wire()) * 2000  # unknown rank: ignored
        await hostile(flood)
        await asyncio.gather(*(hostile(b"garbage") for _ in range(50)))
        await asyncio.sleep(0.3)
        rejected = (agent.server.rejected if side == "agent socket" else hub.rejected) - rejected_before
        assert rejected >= 5
        # Still working: a real registration goes through and reaches the launcher.
        hello = m.WorkerHello(rank=2, local_rank=0, pid=os.getpid())
        client = _worker(tmp_path / "a.sock", [good.encode(hello.to_wire())])
        await _next(hub, "ag.rank", event="registered", rank=2)
        assert "n1" in hub.agents and not task.done()
        client.close()
        hub.broadcast(m.Shutdown)
        await asyncio.wait_for(task, 5)
        await hub.close()

    asyncio.run(scenario())


def test_closed_sections_reach_the_launcher_in_the_status_with_the_iterations(tmp_path):
    """What the straggler watch is fed: per rank and section, how many closed and how long they took."""

    async def scenario():
        hub, agent, task = await _start(tmp_path)
        got: list = []
        hub.on_timings = lambda node, msg: got.append((node, msg))
        codec = Codec(TOKEN)
        t = time.time()
        frames = [m.WorkerHello(rank=4, local_rank=0, pid=os.getpid()).to_wire()]
        for i in range(3):  # three steps of 0.2 s each, by the rank's own clock
            frames += [m.SectionMark(rank=4, name="step", open=True, t=t + i).to_wire(),
                       m.SectionMark(rank=4, name="step", open=False, t=t + i + 0.2).to_wire(),
                       m.Iteration(rank=4, n=i + 1, t=t + i + 0.2).to_wire()]
        client = _worker(tmp_path / "a.sock", [codec.encode(f) for f in frames])
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        client.close()
        hub.broadcast(m.Shutdown)
        await asyncio.wait_for(task, 5)
        await hub.close()
        return got

    got = asyncio.run(scenario())
    node, msg = got[0]
    count, total, shortest = msg.timings["4"]["step"]
    assert node == "n1" and count == 3 and abs(total - 0.6) < 1e-6 and abs(shortest - 0.2) < 1e-6
    assert msg.iterations == {"4": 3}
