"""The worker's one daemon thread: owns the agent socket, sends in order, answers the agent's requests.

It never raises into training: every failure drops the connection (debug log) and reconnects with
backoff. While disconnected it still drains the event queue into a small mirror (open sections, last
iteration), and replays that mirror after `w.hello` on every new connection, so a restarted agent
learns the rank's state without the training doing anything.
"""

from __future__ import annotations

import json
import logging
import os
import random
import select
import signal
import socket
import struct
import threading
import time
from typing import Any

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.core.messages import Kind

__all__ = ["Sender", "SEND_TIMEOUT", "BACKOFF_MIN", "BACKOFF_MAX", "MAX_BATCH", "MAX_BACKLOG"]

log = logging.getLogger(__name__)

SEND_TIMEOUT = 2.0  # an agent that takes no bytes for this long is treated as gone
BACKOFF_MIN = 0.05
BACKOFF_MAX = 2.0
_STABLE = 1.0  # a connection that lived this long resets the backoff
IDLE_AFTER = 1.0  # seconds without heartbeats or events before the thread sleeps until woken
_RECV = 65536
MAX_BATCH = 2000  # events sent per turn of the loop
MAX_BACKLOG = 20000  # past this many queued events, fold them (see Sender._take)



def peer_uid_of(sock: socket.socket) -> int:
    """The uid of the process at the other end of a connected Unix socket (SO_PEERCRED: pid, uid, gid)."""
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]

class Sender(threading.Thread):
    """Daemon thread for one `Client`; see the module docstring."""

    def __init__(self, client: Any) -> None:
        super().__init__(name=f"nvrx-worker-rank{client.rank}", daemon=True)
        self.c = client
        self._codec: Any = None
        self._reader: Any = None
        self._sock: socket.socket | None = None
        self._connected_at = 0.0
        self._retry_at = 0.0
        self._backoff = BACKOFF_MIN
        self._sent_beats = 0
        self._tick_at: float | None = None  # next tick while active; None: idle, woken by the training side
        self._active_at = float("-inf")  # last time there was something to send
        self._bye_taken = False
        self._dump_answered = False  # this dump request answered with w.dumped
        self._sections: dict[str, m.SectionMark] = {}  # mirror: open sections, by name
        self._iteration: m.Iteration | None = None  # mirror: last w.iter
        self._finish = False
        self._done = threading.Event()  # set when the thread has stopped (after w.bye when connected)
        self._warned: set[str] = set()

    # ------------------------------------------------------------ control

    def finish(self, wait: float) -> None:
        """Flush what is queued (w.bye last) and stop; wait at most `wait` seconds."""
        self._finish = True
        self.c.wake()
        self._done.wait(wait)

    def run(self) -> None:
        try:
            # SIGUSR1's stack dump then runs on a training thread, never in the middle of this one.
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
            import nvrx_hpc.core.wire  # noqa: F401 - import once, up front, off the training thread
        except Exception as exc:
            log.debug("[worker rank %s] sender set-up: %r", self.c.rank, exc)
        try:
            while not self._done.is_set():
                try:
                    self._cycle()
                except Exception as exc:  # never let the thread die: drop the connection and retry
                    log.debug("[worker rank %s] sender error: %r", self.c.rank, exc, exc_info=True)
                    self._disconnect(f"error: {exc!r}")
                    time.sleep(BACKOFF_MIN)
        finally:
            self._done.set()
            self._close_socket()

    # ------------------------------------------------------------ one turn of the loop

    def _cycle(self) -> None:
        """One turn: on a tick, send the heartbeat count if it moved and the queued events; then wait.

        While the rank is active the thread ticks every `hb_interval` and the training side never wakes
        it; after IDLE_AFTER seconds without news it arms the wake-up flags and sleeps until woken, so
        the first heartbeat after a pause goes out at once.
        """
        c = self.c
        now = time.monotonic()
        if self._sock is None and now >= self._retry_at:
            self._connect(now)
        out = bytearray()
        if self._tick_at is None or now >= self._tick_at or self._finish:
            news = False
            beats = c.beats
            if self._sock is not None and beats != self._sent_beats:
                out += self._encode(self._heartbeat(beats))
                self._sent_beats, news = beats, True
            batch = self._take()
            if batch:
                news = True
                self._bye_taken = self._bye_taken or any(msg.KIND is Kind.W_BYE for msg in batch)
                if self._sock is not None:
                    out += b"".join(self._encode(msg) for msg in batch)
            if news:
                self._active_at = now
            self._schedule(now)
        if out and self._sock is not None:
            self._send(bytes(out))
        if self._bye_taken or (self._finish and self._sock is None):
            self._done.set()
            return
        self._wait(now)

    def _schedule(self, now: float) -> None:
        c = self.c
        if now - self._active_at < IDLE_AFTER or c.events:
            self._tick_at = now if c.events else now + c.hb_interval
            c.hb_armed = c.ev_armed = False
            return
        self._tick_at = None
        if self._sock is None:  # the retry timer wakes us; heartbeats must not
            c.hb_armed = c.ev_armed = False
            return
        c.hb_armed = c.ev_armed = True  # arm first, then look once more: a beat after this look wakes us
        if c.beats != self._sent_beats or c.events:
            self._tick_at = now

    def _wait(self, now: float) -> None:
        retry = self._retry_at if self._sock is None else None
        deadlines = [t for t in (self._tick_at, retry) if t is not None]
        timeout = max(0.0, min(deadlines) - now) if deadlines else None
        self.c.link_due = min(deadlines) if deadlines else float("inf")  # a wake() pulls it in
        watch = [self.c.wake_fd] if self._sock is None else [self.c.wake_fd, self._sock]
        readable, _, _ = select.select(watch, [], [], timeout)
        if self.c.wake_fd in readable:
            try:
                while os.read(self.c.wake_fd, 4096):
                    pass
            except BlockingIOError:
                pass
        if self._sock is not None and self._sock in readable:
            self._receive()

    # ------------------------------------------------------------ connection

    def _connect(self, now: float) -> None:
        if self._codec is None:
            self._codec = self._load_codec()
            if self._codec is None:
                self._schedule_retry(now)
                return
        from nvrx_hpc.core.wire import FrameReader

        path = self.c.env.socket
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(SEND_TIMEOUT)
        try:
            sock.connect(path)
            peer_uid = peer_uid_of(sock)
        except OSError as exc:
            sock.close()
            log.debug("[worker rank %s] cannot connect to the agent at %s: %s", self.c.rank, path, exc)
            self._schedule_retry(now)
            return
        if peer_uid not in (os.getuid(), 0):  # someone else listens there: tell it nothing
            sock.close()
            self._warn_once("peer", "[worker rank %s] refusing the agent socket %s: it belongs to uid %d, not to "
                            "this job's user", self.c.rank, path, peer_uid)  # fmt: skip
            self._schedule_retry(now)
            return
        self._sock, self._reader, self._connected_at = sock, FrameReader(self._codec), now
        self._sent_beats, self._tick_at = 0, None  # tick in this same turn: a pending beat goes out now
        log.debug("[worker rank %s] connected to the agent at %s", self.c.rank, path)
        self._send(b"".join(self._encode(m) for m in self._greeting()))

    def _greeting(self) -> list[m.Frame]:
        """w.hello, then the mirrored state: timeouts, open sections, last iteration."""
        c, env = self.c, self.c.env
        msgs: list[m.Frame] = [m.WorkerHello(rank=c.rank, local_rank=env.local_rank, pid=os.getpid(),
                                             restart=env.restart, t=time.time())]
        if c.timeouts:
            msgs.append(m.WorkerTimeouts(rank=c.rank, timeouts=c.timeouts))
        msgs.extend(self._sections.values())
        if self._iteration is not None:
            msgs.append(self._iteration)
        return msgs

    def _load_codec(self) -> Any:
        from nvrx_hpc.core.wire import Codec, load_token

        path = self.c.env.token_file
        if path is None:
            self._warn_once("token", "[worker rank %s] NVRX_TOKEN_FILE is not set; no agent link", self.c.rank)
            return None
        try:
            return Codec(load_token(path))
        except ProtocolError as exc:
            self._warn_once("token", "[worker rank %s] %s; will retry", self.c.rank, exc)
            return None

    def _schedule_retry(self, now: float) -> None:
        self._retry_at = now + self._backoff * random.uniform(0.8, 1.2)
        self._backoff = min(BACKOFF_MAX, self._backoff * 2)

    def _disconnect(self, why: str) -> None:
        if self._sock is None:
            return
        now = time.monotonic()
        log.debug("[worker rank %s] agent connection dropped: %s", self.c.rank, why)
        if now - self._connected_at >= _STABLE:
            self._backoff = BACKOFF_MIN
        self._close_socket()
        self._schedule_retry(now)

    def _close_socket(self) -> None:
        sock, self._sock, self._reader = self._sock, None, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass

    def _send(self, data: bytes) -> None:
        try:
            self._sock.sendall(data)
        except OSError as exc:  # includes socket.timeout: an agent that stopped reading
            self._disconnect(f"send failed: {exc!r}")

    # ------------------------------------------------------------ messages

    def _encode(self, msg: m.Frame) -> bytes:
        try:
            return self._codec.encode(msg.to_wire())
        except ProtocolError as exc:
            log.debug("[worker rank %s] dropped a %s message: %s", self.c.rank, msg.KIND, exc)
            return b""

    def _heartbeat(self, beats: int) -> m.Heartbeat:
        t = time.time() - (time.monotonic() - self.c.last_beat)
        return m.Heartbeat(rank=self.c.rank, beats=beats, t=t)

    def _take(self) -> list[m.Frame]:
        """The next queued events, in order, mirrored. Past MAX_BACKLOG (a training that opens sections
        far faster than they can be sent), the backlog is folded into its net effect instead."""
        events = self.c.events
        n = len(events)
        if n <= MAX_BACKLOG:
            batch = [events.popleft() for _ in range(min(n, MAX_BATCH))]
            for msg in batch:
                self._mirror(msg)
            return batch
        before, before_iter = dict(self._sections), self._iteration
        closes: dict[str, m.SectionMark] = {}
        last: dict[Kind, m.Frame] = {}  # last w.timeouts and w.bye
        for _ in range(n):
            msg = events.popleft()
            self._mirror(msg)
            if isinstance(msg, m.SectionMark) and not msg.open:
                closes[msg.name] = msg
            elif msg.KIND in (Kind.W_TIMEOUTS, Kind.W_BYE):
                last[msg.KIND] = msg
        batch = [last[Kind.W_TIMEOUTS]] if Kind.W_TIMEOUTS in last else []
        batch += [closes[name] for name, msg in before.items() if self._sections.get(name) is not msg]
        batch += [msg for name, msg in self._sections.items() if before.get(name) is not msg]
        if self._iteration is not before_iter:
            batch.append(self._iteration)
        batch += [last[Kind.W_BYE]] if Kind.W_BYE in last else []
        self._warn_once("backlog", "[worker rank %s] %d queued events folded into %d (the agent link is too slow "
                        "for this rate of sections/iterations)", self.c.rank, n, len(batch))
        return batch

    def _mirror(self, msg: m.Frame) -> None:
        if isinstance(msg, m.SectionMark):
            if msg.open:
                self._sections[msg.name] = msg
            else:
                self._sections.pop(msg.name, None)
        elif isinstance(msg, m.Iteration):
            self._iteration = msg

    def _receive(self) -> None:
        try:
            data = self._sock.recv(_RECV)
        except OSError as exc:
            self._disconnect(f"receive failed: {exc!r}")
            return
        if not data:
            self._disconnect("the agent closed the connection")
            return
        try:
            msgs = self._reader.feed(data)
        except ProtocolError as exc:
            self._warn_once("frame", "[worker rank %s] frame from the agent rejected: %s", self.c.rank, exc.message)
            self._disconnect(f"bad frame: {exc.message}")
            return
        for raw in msgs:
            try:
                msg = m.parse(raw)
            except ProtocolError as exc:
                log.debug("[worker rank %s] ignored an agent message: %s", self.c.rank, exc.message)
                continue
            handler = self._HANDLERS.get(msg.KIND)
            if handler is None:
                log.debug("[worker rank %s] ignored an agent message of type %s", self.c.rank, msg.KIND)
            else:
                handler(self, msg)

    def _on_timeouts(self, msg: m.AgentTimeouts) -> None:
        try:
            self.c.timeouts = json.loads(json.dumps(msg.timeouts))
        except (TypeError, ValueError) as exc:
            log.debug("[worker rank %s] ignored a malformed a.timeouts: %r", self.c.rank, exc)

    def _on_stop(self, msg: m.AgentStop) -> None:
        c = self.c
        c.stop_reason = msg.reason
        c.stop = True
        log.info("[worker rank %s] the launcher asks to checkpoint and stop: %s", c.rank, c.stop_reason)

    def _on_dump(self, msg: m.AgentDump) -> None:
        self._dump_answered = False
        self._dump(msg.reason)

    def _on_restart(self, msg: m.AgentRestart) -> None:
        """In-process restart: hand it to the wrapper (nvrx_hpc.inprocess) that registered for it, if any."""
        callback = self.c.on_restart
        if callback is None:
            log.debug("[worker rank %s] a.restart for round %s, but no in-process wrapper runs here", self.c.rank,
                      msg.round)
            return
        try:
            callback(msg)
        except Exception as exc:  # the wrapper's bug must not kill the link
            log.warning("[worker rank %s] in-process restart callback failed: %r", self.c.rank, exc)

    _HANDLERS = {Kind.A_TIMEOUTS: _on_timeouts, Kind.A_STOP: _on_stop, Kind.A_DUMP: _on_dump,
                 Kind.A_RESTART: _on_restart}

    def _dump(self, reason: Any) -> None:
        from nvrx_hpc.worker.dump import dump_flight_recorder

        c = self.c
        try:
            where = c.stacks.dump(reason)
            log.info("[worker rank %s] stacks dumped to %s (%s)", c.rank, where or "stderr", reason)
        except Exception as exc:
            log.warning("[worker rank %s] stack dump failed: %r", c.rank, exc)
        fr = c.env.fr_path()
        try:
            if fr is not None and dump_flight_recorder(fr, on_first=self._answer_dump):
                log.info("[worker rank %s] flight recorder dumped to %s", c.rank, fr)
        except Exception as exc:
            log.warning("[worker rank %s] flight-recorder dump failed: %r", c.rank, exc)
        finally:
            self._answer_dump()

    def _answer_dump(self) -> None:
        """Tell the agent the dump it asked for is on disk: it holds the rank's stop until then (or its window
        ends). Sent once the first flight-recorder file lands, not after the slow full pass."""
        if self._sock is not None and not self._dump_answered:
            self._dump_answered = True
            self._send(self._encode(m.WorkerDumped(rank=self.c.rank)))

    def _warn_once(self, key: str, fmt: str, *args: Any) -> None:
        level = logging.DEBUG if key in self._warned else logging.WARNING
        self._warned.add(key)
        log.log(level, fmt, *args)
