"""The launcher's side of the agent links: a TCP server taking authenticated frames from node agents."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.core.wire import Codec, message, read_message

__all__ = ["AgentHub", "AgentLink", "HubEvent"]

log = logging.getLogger(__name__)

MAX_AGENT_CONNECTIONS = 4096


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

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._connections >= MAX_AGENT_CONNECTIONS:
            self.rejected += 1
            writer.close()
            return
        self._connections += 1
        peer = writer.get_extra_info("peername")
        link: AgentLink | None = None
        try:
            while True:
                try:
                    msg = await read_message(reader, self.codec, timeout=None if link else 10.0)
                except ProtocolError as exc:
                    self.rejected += 1
                    log.warning("dropped a connection from %s: %s", peer, exc.message)
                    return
                except ConnectionError:
                    return
                if msg is None:
                    return
                node = str(msg.get("node", ""))
                if link is None:
                    if msg.get("type") != "ag.hello" or not node:
                        self.rejected += 1
                        log.warning("dropped %s: first frame was %r, not ag.hello", peer, msg.get("type"))
                        return
                    link = AgentLink(node=node, pid=int(msg.get("pid", 0)), writer=writer)
                    old = self.agents.get(node)
                    if old is not None:
                        old.writer.close()
                    self.agents[node] = link
                elif node != link.node:
                    self.rejected += 1
                    log.warning("agent of %s sent a frame for %s; ignored", link.node, node)
                    continue
                link.last_seen = time.time()
                if msg["type"] == "ag.status":
                    link.ranks = dict(msg.get("ranks") or {})
                    link.timeouts = dict(msg.get("timeouts") or {})
                    continue
                await self.events.put(HubEvent(msg["type"], link.node, msg, time.time()))
        finally:
            self._connections -= 1
            writer.close()
            if link is not None and self.agents.get(link.node) is link:
                del self.agents[link.node]
                if not self._closing:
                    await self.events.put(HubEvent("hub.agent_lost", link.node, {}, time.time()))
