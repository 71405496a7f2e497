"""The launcher's side of the agent links: a TCP server taking authenticated frames from node agents.

Every frame carries an HMAC with the job's token. The hello is also bound to its connection: the hub
opens with `la.challenge` (a fresh random nonce) and accepts only an `ag.hello` that echoes it, so a
recorded hello replayed on a new connection is refused. Before that hello a connection is allowed
`PREAUTH_BYTES` and `PREAUTH_S`, and at most `PREAUTH_PER_SOURCE` of them wait at once per source
address (`PREAUTH_TOTAL` overall); the rest are closed at once.

A frame is checked, parsed and handled in the callback that read it from the socket (an asyncio
protocol, no task or future per frame), and a rank event goes from there straight to `on_event`, the
step watch's decision (docs/scale.md). At most `FRAMES_PER_READ` frames are handled per callback; a
connection with more waiting stops reading until the event loop has run once.
"""

from __future__ import annotations

import asyncio
import gc
import json
import logging
import secrets
import time
from dataclasses import dataclass
from typing import Any

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.core.messages import Kind
from nvrx_hpc.core.wire import HEADER_SIZE, Codec

__all__ = ["AgentHub", "AgentLink", "HubEvent", "encode_ranks", "freeze_long_lived"]

log = logging.getLogger(__name__)

MAX_AGENT_CONNECTIONS = 4096
PREAUTH_BYTES = 16 << 10  # the largest frame before the hello: a hello is a few hundred bytes
PREAUTH_S = 5.0  # time to answer the challenge
PREAUTH_PER_SOURCE = 32  # connections of one address waiting for their hello (a host runs one agent per job)
PREAUTH_TOTAL = 256
FRAMES_PER_READ = 64  # frames handled per callback before other connections get their turn


def encode_ranks(node: str, ranks: dict) -> str:
    """A node's rank summaries as status.json shows them ('"rank":{..., "node": node}', comma-joined, without
    the braces): one C-encoder call, made once per status report."""
    members = {str(rank): {**info, "node": node} for rank, info in ranks.items() if type(info) is dict}
    return json.dumps(members, separators=(",", ":"), default=str)[1:-1]


def freeze_long_lived() -> None:
    """Call once the agents are connected. What exists then (the modules, the agents' connections) lives as
    long as the launcher: moved out of the garbage collector's sight (gc.freeze), it is not walked by every
    full pass, which then takes a few milliseconds at 16k ranks instead of tens (docs/scale.md). The
    garbage among it is collected first."""
    gc.collect()
    gc.freeze()


class AgentLink:
    """One node agent's connection, and what its last status said.

    The ranks of the last status are kept as their status.json text (`ranks_json`), encoded when the report
    arrives: the launcher holds no Python objects per rank between reports, which at 16k ranks would be
    ~100k objects for the garbage collector to walk (pauses of 50-200 ms). `ranks` decodes them on demand.
    """

    __slots__ = ("node", "pid", "writer", "connected_at", "timeouts", "last_seen", "ranks_json", "standby")

    def __init__(self, node: str, pid: int, writer: Any, timeouts: dict | None = None) -> None:
        self.node = node
        self.pid = pid
        self.writer = writer  # has write() and close(): the connection's transport
        self.connected_at = self.last_seen = time.time()
        self.timeouts: dict = timeouts or {}
        self.ranks_json = ""
        self.standby: dict = {}  # attempt (str) -> standby tasks waiting for it here

    @property
    def ranks(self) -> dict[str, dict]:
        """rank (a string) -> its last summary, with its node."""
        return json.loads("{" + self.ranks_json + "}")

    @ranks.setter
    def ranks(self, ranks: dict) -> None:
        self.ranks_json = encode_ranks(self.node, ranks)


@dataclass(frozen=True)
class HubEvent:
    """Something an agent said (an `ag.*` record), or an AgentLost the hub made when its link dropped."""

    node: str
    msg: m.Frame
    time: float  # when it arrived here

    @property
    def kind(self) -> Kind:
        return self.msg.KIND


class _Connection(asyncio.Protocol):
    """One TCP connection: hands what it reads to the hub at once."""

    def __init__(self, hub: AgentHub) -> None:
        self.hub = hub
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.source = "?"
        self.buf = bytearray()
        self.codec = hub._preauth_codec
        self.nonce = ""
        self.link: AgentLink | None = None
        self.timer: asyncio.TimerHandle | None = None
        self.counted = False  # in hub._connections
        self.waiting = False  # admitted, hello not yet said
        self.closed = False
        self.paused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.hub._accepted(self)

    def data_received(self, data: bytes) -> None:
        self.hub._received(self, data)

    def eof_received(self) -> bool:
        return False  # the agent is gone: close our end too

    def connection_lost(self, exc: Exception | None) -> None:
        self.hub._lost(self)

    def close(self) -> None:
        self.closed = True
        self.buf = bytearray()
        if self.transport is not None:
            self.transport.close()


class AgentHub:
    """Accepts one connection per node agent; hands every rank event to `on_event`, or else to `events`, in
    arrival order."""

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
        # Called with each HubEvent in the callback that read it (the step watch, while it watches); when
        # None, events wait in `events`. It must not raise.
        self.on_event: Any = None
        self._connections = 0
        self._server: asyncio.AbstractServer | None = None
        self._closing = False

    async def start(self) -> int:
        loop = asyncio.get_running_loop()
        # backlog: every node's agent connects within a second of the step's start (capped by somaxconn)
        self._server = await loop.create_server(lambda: _Connection(self), self.host, 0, backlog=4096)
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

    # ------------------------------------------------------------------ connections

    def _admit(self, source: str) -> bool:
        """Room for one more connection still waiting for its hello (per source and in all)?"""
        waiting = self._preauth.get(source, 0)
        if waiting >= PREAUTH_PER_SOURCE or sum(self._preauth.values()) >= PREAUTH_TOTAL:
            return False
        self._preauth[source] = waiting + 1
        return True

    def _admitted(self, conn: _Connection) -> None:
        """`conn` no longer waits for its hello (it said it, or it is gone)."""
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None
        if not conn.waiting:
            return
        conn.waiting = False
        left = self._preauth.get(conn.source, 1) - 1
        if left > 0:
            self._preauth[conn.source] = left
        else:
            self._preauth.pop(conn.source, None)

    def _accepted(self, conn: _Connection) -> None:
        """A new connection: challenge it, or close it at once when too many wait for their hello."""
        conn.peer = peer = conn.transport.get_extra_info("peername")
        conn.source = str(peer[0]) if isinstance(peer, tuple) and peer else "?"
        if self._closing or self._connections >= MAX_AGENT_CONNECTIONS or not self._admit(conn.source):
            self.rejected += 1
            conn.close()
            return
        self._connections += 1
        conn.counted = conn.waiting = True
        conn.nonce = secrets.token_hex(16)
        conn.transport.write(self.codec.encode(m.Challenge(job=self.job, nonce=conn.nonce).to_wire()))
        conn.timer = asyncio.get_running_loop().call_later(PREAUTH_S, self._too_slow, conn)

    def _too_slow(self, conn: _Connection) -> None:
        conn.timer = None
        if conn.link is None and not conn.closed:
            self._drop(conn, f"no hello within {PREAUTH_S:g} s", before_hello=True)

    def _drop(self, conn: _Connection, why: str, before_hello: bool = False) -> None:
        self.rejected += 1
        where = " before its hello" if before_hello else ""
        log.warning("dropped a connection from %s%s: %s", conn.peer, where, why)
        conn.close()

    def _received(self, conn: _Connection, data: bytes) -> None:
        if conn.closed:
            return
        conn.buf += data
        self._frames(conn)

    def _frames(self, conn: _Connection) -> None:
        """Handle the whole frames in `conn`'s buffer, at most FRAMES_PER_READ of them now."""
        buf, pos, handled, more = conn.buf, 0, 0, False
        try:
            while not conn.closed and len(buf) - pos >= HEADER_SIZE:
                length = int.from_bytes(buf[pos : pos + HEADER_SIZE], "big")
                conn.codec.check_length(length)  # before any of its bytes are kept
                end = pos + HEADER_SIZE + length
                if len(buf) < end:
                    break
                if handled == FRAMES_PER_READ:  # the other connections have their turn first
                    more = True
                    break
                body = bytes(buf[pos + HEADER_SIZE : end])
                pos = end
                handled += 1
                self._frame(conn, m.parse(conn.codec.decode_body(body)))
        except ProtocolError as exc:
            self._drop(conn, exc.message, before_hello=conn.link is None)
            return
        if conn.closed:
            return
        del buf[:pos]
        if more:
            if not conn.paused:
                conn.paused = True
                conn.transport.pause_reading()
            asyncio.get_running_loop().call_soon(self._frames, conn)
        elif conn.paused:
            conn.paused = False
            conn.transport.resume_reading()

    def _frame(self, conn: _Connection, msg: m.Frame) -> None:
        link = conn.link
        if link is not None:
            self._handle(link, msg)
            return
        # The first frame: an ag.hello echoing this connection's nonce.
        if not isinstance(msg, m.AgentHello) or not msg.node:
            self._drop(conn, f"first frame was {msg.KIND}, not an ag.hello with a node")
            return
        if msg.nonce != conn.nonce:  # a hello recorded on another connection
            self._drop(conn, f"its ag.hello for {msg.node} does not answer this connection's challenge")
            return
        self._admitted(conn)
        conn.codec = self.codec
        conn.link = link = AgentLink(node=msg.node, pid=msg.pid, writer=conn.transport)
        old = self.agents.get(link.node)
        if old is not None:
            old.writer.close()
        self.agents[link.node] = link
        self._handle(link, msg)

    def _lost(self, conn: _Connection) -> None:
        conn.closed = True
        self._admitted(conn)
        if conn.counted:
            conn.counted = False
            self._connections -= 1
        link = conn.link
        if link is not None and self.agents.get(link.node) is link:
            del self.agents[link.node]
            if not self._closing:
                now = time.time()
                self._event(HubEvent(link.node, m.AgentLost(node=link.node, time=now), now))

    # ------------------------------------------------------------------ messages

    def _handle(self, link: AgentLink, msg: m.Frame) -> None:
        if not msg.KIND.value.startswith("ag.") or getattr(msg, "node", None) != link.node:
            self.rejected += 1
            log.warning("agent of %s sent a %s frame for %s; ignored", link.node, msg.KIND, getattr(msg, "node", "?"))
            return
        link.last_seen = time.time()
        if isinstance(msg, m.AgentStatus):  # every status_s from every agent: not for the step watch
            link.ranks = msg.ranks
            link.timeouts = msg.timeouts
            link.standby = msg.standby
            if msg.timings and self.on_timings is not None:
                self.on_timings(link.node, msg)
            return
        self._event(HubEvent(link.node, msg, link.last_seen))

    def _event(self, event: HubEvent) -> None:
        sink = self.on_event
        if sink is None:
            self.events.put_nowait(event)
        else:
            sink(event)
