"""The launcher's side of the agent links: a TCP server taking authenticated frames from node agents.

Every frame carries an HMAC with the job's token. The hello is also bound to its connection: the hub
opens with `la.challenge` (a fresh random nonce) and accepts only an `ag.hello` that echoes it, so a
recorded hello replayed on a new connection is refused. Before that hello a connection is allowed
`PREAUTH_BYTES` and `PREAUTH_S`, and at most `PREAUTH_PER_SOURCE` of them wait at once per source
address (`PREAUTH_TOTAL` overall); the rest are closed at once.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.core.wire import Codec, message, read_message, write_message

__all__ = ["AgentHub", "AgentLink", "HubEvent"]

log = logging.getLogger(__name__)

MAX_AGENT_CONNECTIONS = 4096
PREAUTH_BYTES = 16 << 10  # the largest frame before the hello: a hello is a few hundred bytes
PREAUTH_S = 5.0  # time to answer the challenge
PREAUTH_PER_SOURCE = 32  # connections of one address waiting for their hello (a host runs one agent per job)
PREAUTH_TOTAL = 256


@dataclass
class AgentLink:
    node: str
    pid: int
    writer: asyncio.StreamWriter
    connected_at: float = field(default_factory=time.time)
    ranks: dict[str, dict] = field(default_factory=dict)
    timeouts: dict = field(default_factory=dict)
    last_seen: float = field(default_factory=time.time)


@dataclass(frozen=True)
class HubEvent:
    """Something an agent said (kind `ag.*`), or `hub.agent_lost` when its connection dropped."""

    kind: str
    node: str
    data: dict[str, Any]
    time: float


class AgentHub:
    """Accepts one connection per node agent; hands every rank event to `events` in arrival order."""

    def __init__(self, token: bytes, host: str = "0.0.0.0", job: str | None = None) -> None:
        self.codec = Codec(token)
        self._preauth_codec = Codec(token, max_frame=PREAUTH_BYTES)
        self._preauth: dict[str, int] = {}
        self.host = host
        self.job = job
        self.port = 0
        self.agents: dict[str, AgentLink] = {}
        self.events: asyncio.Queue[HubEvent] = asyncio.Queue()
        self.rejected = 0
        self._connections = 0
        self._server: asyncio.AbstractServer | None = None
        self._closing = False

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, self.host, 0, limit=1 << 20)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        self._closing = True
        for link in list(self.agents.values()):
            link.writer.close()
        if self._server is not None:
            self._server.close()

    def send(self, node: str, kind: str, **fields: Any) -> bool:
        link = self.agents.get(node)
        if link is None:
            return False
        try:
            link.writer.write(self.codec.encode(message(kind, job=self.job, **fields)))
            return True
        except (OSError, RuntimeError):
            return False

    def broadcast(self, kind: str, nodes: list[str] | None = None, **fields: Any) -> None:
        for node in nodes if nodes is not None else list(self.agents):
            self.send(node, kind, **fields)

    async def wait_for_agents(self, nodes: list[str], timeout: float) -> list[str]:
        """Wait until every node's agent said hello; returns the nodes still missing at the deadline."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            missing = [n for n in nodes if n not in self.agents]
            if not missing:
                return []
            await asyncio.sleep(0.05)
        return [n for n in nodes if n not in self.agents]

    def _admit(self, source: str) -> bool:
        """Room for one more connection still waiting for its hello (per source and in all)?"""
        waiting = self._preauth.get(source, 0)
        if waiting >= PREAUTH_PER_SOURCE or sum(self._preauth.values()) >= PREAUTH_TOTAL:
            return False
        self._preauth[source] = waiting + 1
        return True

    def _admitted(self, source: str) -> None:
        left = self._preauth.get(source, 1) - 1
        if left > 0:
            self._preauth[source] = left
        else:
            self._preauth.pop(source, None)

    async def _hello(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                     peer: Any) -> tuple[AgentLink, dict[str, Any]] | None:
        """Challenge, then the first frame: an ag.hello echoing the nonce, within PREAUTH_S and PREAUTH_BYTES."""
        nonce = secrets.token_hex(16)
        try:
            await write_message(writer, self.codec, message("la.challenge", job=self.job, nonce=nonce), PREAUTH_S)
            msg = await read_message(reader, self._preauth_codec, timeout=PREAUTH_S)
        except ProtocolError as exc:
            self.rejected += 1
            log.warning("dropped a connection from %s before its hello: %s", peer, exc.message)
            return None
        except ConnectionError:
            return None
        if msg is None:
            return None
        node = str(msg.get("node", ""))
        if msg.get("type") != "ag.hello" or not node:
            self.rejected += 1
            log.warning("dropped %s: first frame was %r, not ag.hello", peer, msg.get("type"))
            return None
        if msg.get("nonce") != nonce:  # a hello recorded on another connection
            self.rejected += 1
            log.warning("dropped %s: its ag.hello for %s does not answer this connection's challenge", peer, node)
            return None
        try:
            pid = int(msg.get("pid", 0))
        except (TypeError, ValueError):
            pid = 0
        return AgentLink(node=node, pid=pid, writer=writer), msg

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        source = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if self._connections >= MAX_AGENT_CONNECTIONS or not self._admit(source):
            self.rejected += 1
            writer.close()
            return
        self._connections += 1
        link: AgentLink | None = None
        try:
            try:
                hello = await self._hello(reader, writer, peer)
            finally:
                self._admitted(source)
            if hello is None:
                return
            link, first = hello
            old = self.agents.get(link.node)
            if old is not None:
                old.writer.close()
            self.agents[link.node] = link
            await self._handle(link, first)
            while True:
                try:
                    msg = await read_message(reader, self.codec, timeout=None)
                except ProtocolError as exc:
                    self.rejected += 1
                    log.warning("dropped a connection from %s: %s", peer, exc.message)
                    return
                except ConnectionError:
                    return
                if msg is None:
                    return
                await self._handle(link, msg)
        finally:
            self._connections -= 1
            writer.close()
            if link is not None and self.agents.get(link.node) is link:
                del self.agents[link.node]
                if not self._closing:
                    await self.events.put(HubEvent("hub.agent_lost", link.node, {}, time.time()))

    async def _handle(self, link: AgentLink, msg: dict[str, Any]) -> None:
        if str(msg.get("node", "")) != link.node:
            self.rejected += 1
            log.warning("agent of %s sent a frame for %s; ignored", link.node, msg.get("node"))
            return
        link.last_seen = time.time()
        if msg["type"] == "ag.status":
            link.ranks = dict(msg.get("ranks") or {})
            link.timeouts = dict(msg.get("timeouts") or {})
            return
        await self.events.put(HubEvent(msg["type"], link.node, msg, time.time()))
