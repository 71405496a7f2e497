"""The agent's Unix socket: SPANK JSON lines and worker frames arrive on the same path.

The first byte tells them apart: the plugin's lines start with `{`, a wire frame starts with the
high byte of its 4-byte length, which is 0 for any frame under 16 MiB.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.core.wire import Codec, FrameReader
from nvrx_hpc.slurm.spank_messages import MAX_LINE_BYTES, parse_spank_line

__all__ = ["RankSocketServer", "WorkerLink"]

log = logging.getLogger(__name__)

MAX_CONNECTIONS = 512  # a flood of connections is refused, not queued without bound


class WorkerLink:
    """One connected rank: the agent sends requests (a.dump, a.stop, a.timeouts) back on it."""

    def __init__(self, writer: asyncio.StreamWriter, codec: Codec, peer_pid: int | None) -> None:
        self.writer = writer
        self.codec = codec
        self.peer_pid = peer_pid

    def send(self, msg: dict[str, Any]) -> None:
        try:
            self.writer.write(self.codec.encode(msg))
        except (OSError, RuntimeError) as exc:
            log.debug("cannot send %s to rank pid %s: %s", msg.get("type"), self.peer_pid, exc)


def _peer_pid(writer: asyncio.StreamWriter) -> int | None:
    sock = writer.get_extra_info("socket")
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        return struct.unpack("3i", creds)[0]
    except (OSError, AttributeError):
        return None


class RankSocketServer:
    """Accepts connections on `path` (mode 0600) and hands each message to the agent's callbacks."""

    def __init__(
        self,
        path: Path,
        codec: Codec,
        on_spank: Callable[[Any], None],
        on_worker: Callable[[dict, WorkerLink], Awaitable[None] | None],
        on_worker_gone: Callable[[WorkerLink], None],
    ) -> None:
        self.path = Path(path)
        self.codec = codec
        self._on_spank = on_spank
        self._on_worker = on_worker
        self._on_worker_gone = on_worker_gone
        self._server: asyncio.AbstractServer | None = None
        self._connections = 0
        self.rejected = 0

    async def start(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self.path.is_socket():
            self.path.unlink()
        old_umask = os.umask(0o177)  # the socket is born 0600: no window where others could connect
        try:
            self._server = await asyncio.start_unix_server(self._serve, path=str(self.path), limit=1 << 20)
        finally:
            os.umask(old_umask)
        os.chmod(self.path, 0o600)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        try:
            self.path.unlink()
        except OSError:
            pass

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._connections >= MAX_CONNECTIONS:
            self.rejected += 1
            writer.close()
            return
        self._connections += 1
        try:
            first = await asyncio.wait_for(reader.read(1), timeout=10)
            if not first:
                return
            if first == b"{":
                await self._serve_spank(first, reader)
            else:
                await self._serve_worker(first, reader, writer)
        except (asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            self._connections -= 1
            writer.close()

    async def _serve_spank(self, first: bytes, reader: asyncio.StreamReader) -> None:
        data = first + await asyncio.wait_for(reader.read(MAX_LINE_BYTES + 1), timeout=5)
        for line in data.splitlines():
            if not line.strip():
                continue
            try:
                self._on_spank(parse_spank_line(line))
            except ProtocolError as exc:
                self.rejected += 1
                log.warning("rejected a SPANK message: %s", exc.message)

    async def _serve_worker(self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        link = WorkerLink(writer, self.codec, _peer_pid(writer))
        frames = FrameReader(self.codec)
        data = first
        try:
            while data:
                try:
                    messages = frames.feed(data)
                except ProtocolError as exc:
                    self.rejected += 1
                    log.warning("closed a rank connection (pid %s): %s", link.peer_pid, exc.message)
                    return
                for msg in messages:
                    result = self._on_worker(msg, link)
                    if asyncio.iscoroutine(result):
                        await result
                data = await reader.read(65536)
        finally:
            self._on_worker_gone(link)
