"""The launcher's hub: a hello is bound to its connection (challenge-response), and connections that have
not said hello get little: few per source, few bytes, few seconds."""

from __future__ import annotations

import asyncio
import time

from nvrx_hpc.core.messages import AgentHello
from nvrx_hpc.core.wire import Codec, new_token, read_message
from nvrx_hpc.launcher import hub as hub_module
from nvrx_hpc.launcher.hub import PREAUTH_PER_SOURCE, PREAUTH_S, AgentHub

TOKEN = new_token()
CODEC = Codec(TOKEN)


async def _hello(port: int, node: str, nonce: str | None = None):
    """Connect, read the challenge, answer with an ag.hello (echoing `nonce` if given, else the real one)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    challenge = await read_message(reader, CODEC, timeout=5)
    assert challenge["type"] == "la.challenge" and len(challenge["nonce"]) == 32
    frame = CODEC.encode(AgentHello(node=node, pid=1, nonce=nonce or challenge["nonce"]).to_wire())
    writer.write(frame)
    await writer.drain()
    return reader, writer, frame


async def _closed(reader: asyncio.StreamReader, timeout: float) -> bool:
    try:
        while await asyncio.wait_for(reader.read(4096), timeout):
            pass
        return True
    except (asyncio.TimeoutError, ConnectionError):
        return False


def test_a_recorded_hello_replayed_on_a_new_connection_is_refused():
    async def scenario():
        hub = AgentHub(TOKEN, host="127.0.0.1", job="7")
        port = await hub.start()
        _r, writer, recorded = await _hello(port, "n1")
        assert await hub.wait_for_agents(["n1"], 5) == []
        writer.close()  # the agent goes away; an eavesdropper replays its hello
        deadline = time.monotonic() + 5
        while "n1" in hub.agents and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await read_message(reader, CODEC, timeout=5)
        writer.write(recorded)
        await writer.drain()
        assert await _closed(reader, 5)
        assert "n1" not in hub.agents and hub.rejected >= 1
        # A hello of another connection's nonce is worth nothing either.
        reader, writer, _ = await _hello(port, "n2", nonce="0" * 32)
        assert await _closed(reader, 5) and "n2" not in hub.agents
        await hub.close()

    asyncio.run(scenario())


def test_a_flood_of_silent_connections_is_capped_and_timed_out():
    async def scenario():
        hub = AgentHub(TOKEN, host="127.0.0.1", job="7")
        port = await hub.start()
        flood = [await asyncio.open_connection("127.0.0.1", port) for _ in range(PREAUTH_PER_SOURCE + 40)]
        await asyncio.sleep(0.5)
        assert hub._connections <= PREAUTH_PER_SOURCE  # the rest were closed at once
        shut = await asyncio.gather(*(_closed(r, PREAUTH_S + 10) for r, _w in flood))
        assert all(shut)  # every waiting one is dropped after PREAUTH_S
        _r, writer, _ = await _hello(port, "n1")  # and a real agent still gets in
        assert await hub.wait_for_agents(["n1"], 5) == []
        for _r2, w in flood:
            w.close()
        writer.close()
        await hub.close()

    asyncio.run(scenario())


def test_before_hello_a_big_frame_is_refused_without_reading_it():
    async def scenario():
        hub = AgentHub(TOKEN, host="127.0.0.1", job="7")
        port = await hub.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await read_message(reader, CODEC, timeout=5)
        writer.write((hub_module.PREAUTH_BYTES + 1).to_bytes(4, "big"))  # announces more than a hello needs
        await writer.drain()
        started = time.monotonic()
        assert await _closed(reader, 5) and time.monotonic() - started < 2
        assert hub.agents == {} and hub.rejected == 1
        await hub.close()

    asyncio.run(scenario())
