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

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.core.messages import Kind
from nvrx_hpc.core.wire import Codec, read_message, write_message

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
    """Something an agent said (an `ag.*` record), or an AgentLost the hub made when its link dropped."""

    node: str
    msg: m.Frame
    time: float  # when it arrived here

    @property
    def kind(self) -> Kind:
        return self.msg.KIND


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
        self.on_timings: Any = None  # called with (node, AgentStatus) when it carries timings: the straggler watch
        self._connections = 0
        self._server: asyncio.AbstractServer | None = None
        self._closing = False

    async def start(self) -> int:
        # backlog: every node's agent connects within a second of the step's start (capped by somaxconn)
        self._server = await asyncio.start_server(self._serve, self.host, 0, limit=1 << 20, backlog=4096)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    async def close(self) -> None:
        self._closing = True
        for link in list(self.agents.values()):
            link.writer.close()
        if self._server is not None:
            self._server.close()

    def send(self, node: str, record: type[m.Frame], **fields: Any) -> bool:
        """Send one node's agent an `la.*` record, stamped with this job."""
        try:
            frame = self.codec.encode(record(job=self.job, **fields).to_wire())
        except ProtocolError as exc:
            log.error("cannot send %s: %s", record.KIND, exc.message)
            return False
        return self._write(node, frame)

    def broadcast(self, record: type[m.Frame], nodes: list[str] | None = None, **fields: Any) -> None:
        """The same record to many agents: encoded once (thousands of nodes, one frame)."""
        try:
            frame = self.codec.encode(record(job=self.job, **fields).to_wire())
        except ProtocolError as exc:
            log.error("cannot send %s: %s", record.KIND, exc.message)
            return
        for node in nodes if nodes is not None else list(self.agents):
            self._write(node, frame)

    def _write(self, node: str, frame: bytes) -> bool:
        link = self.agents.get(node)
        if link is None:
            return False
        try:
            link.writer.write(frame)
            return True
        except (OSError, RuntimeError):
            return False

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
                     peer: Any) -> tuple[AgentLink, m.AgentHello] | None:
        """Challenge, then the first frame: an ag.hello echoing the nonce, within PREAUTH_S and PREAUTH_BYTES."""
        nonce = secrets.token_hex(16)
        try:
            await write_message(writer, self.codec, m.Challenge(job=self.job, nonce=nonce).to_wire(), PREAUTH_S)
            raw = await read_message(reader, self._preauth_codec, timeout=PREAUTH_S)
            msg = None if raw is None else m.parse(raw)
        except ProtocolError as exc:
            self.rejected += 1
            log.warning("dropped a connection from %s before its hello: %s", peer, exc.message)
            return None
        except ConnectionError:
            return None
        if msg is None:
            return None
        if not isinstance(msg, m.AgentHello) or not msg.node:
            self.rejected += 1
            log.warning("dropped %s: first frame was %s, not an ag.hello with a node", peer, msg.KIND)
            return None
        if msg.nonce != nonce:  # a hello recorded on another connection
            self.rejected += 1
            log.warning("dropped %s: its ag.hello for %s does not answer this connection's challenge", peer, msg.node)
            return None
        return AgentLink(node=msg.node, pid=msg.pid, writer=writer), msg

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
                    raw = await read_message(reader, self.codec, timeout=None)
                    msg = None if raw is None else m.parse(raw)
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
                    now = time.time()
                    await self.events.put(HubEvent(link.node, m.AgentLost(node=link.node, time=now), now))

    async def _handle(self, link: AgentLink, msg: m.Frame) -> None:
        if not msg.KIND.value.startswith("ag.") or getattr(msg, "node", None) != link.node:
            self.rejected += 1
            log.warning("agent of %s sent a %s frame for %s; ignored", link.node, msg.KIND, getattr(msg, "node", "?"))
            return
        link.last_seen = time.time()
        if isinstance(msg, m.AgentStatus):  # every status_s from every agent: not for the step watch
            link.ranks = dict(msg.ranks)
            link.timeouts = dict(msg.timeouts)
            if msg.timings and self.on_timings is not None:
                self.on_timings(link.node, msg)
            return
        await self.events.put(HubEvent(link.node, msg, time.time()))
