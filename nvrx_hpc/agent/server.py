"""The agent's Unix socket: SPANK JSON lines and worker frames arrive on the same path.

The first byte tells them apart: the plugin's lines start with `{`, a wire frame starts with the
high byte of its 4-byte length, which is 0 for any frame under 16 MiB.

An agent started by the Prolog (site mode) has no job token until the launcher attaches it: a JSON line
`{"type": "nvrx.attach", ...}` from a process of the agent's own user (or root), answered with one JSON
line. Until then worker frames are refused.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import stat
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.core.messages import Frame, parse
from nvrx_hpc.core.safedir import private_dir
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

    def send(self, msg: Frame) -> None:
        try:
            self.writer.write(self.codec.encode(msg.to_wire()))
        except (OSError, RuntimeError, ProtocolError) as exc:
            log.debug("cannot send %s to rank pid %s: %s", msg.KIND, self.peer_pid, exc)


def _peer_creds(writer: asyncio.StreamWriter) -> tuple[int, int] | None:
    """(pid, uid) of the process at the other end, from the kernel."""
    sock = writer.get_extra_info("socket")
    try:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, _gid = struct.unpack("3i", creds)
        return pid, uid
    except (OSError, AttributeError):
        return None


def _peer_pid(writer: asyncio.StreamWriter) -> int | None:
    creds = _peer_creds(writer)
    return None if creds is None else creds[0]


AttachHandler = Callable[[dict[str, Any]], dict[str, Any]]


class RankSocketServer:
    """Accepts connections on `path` (mode 0600) and hands each message to the agent's callbacks."""

    def __init__(
        self,
        path: Path,
        codec: Codec | None,
        on_spank: Callable[[Any], None],
        on_worker: Callable[[Frame, WorkerLink], Awaitable[None] | None],
        on_worker_gone: Callable[[WorkerLink], None],
        on_attach: AttachHandler | None = None,
    ) -> None:
        self.path = Path(path)
        self.codec = codec  # None until a site agent is attached
        self._on_attach = on_attach
        self._on_spank = on_spank
        self._on_worker = on_worker
        self._on_worker_gone = on_worker_gone
        self._server: asyncio.AbstractServer | None = None
        self._connections = 0
        self.rejected = 0

    async def start(self) -> None:
        parent = self.path.parent
        try:
            st = os.lstat(parent)
            # The site's or the Prolog's directory: root's, and nobody else can rename what we put there.
            site_dir = stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and (
                bool(st.st_mode & stat.S_ISVTX) or not st.st_mode & 0o022)  # fmt: skip
        except FileNotFoundError:
            site_dir = False
        if not site_dir:
            private_dir(parent, ProtocolError)  # user mode's /tmp/nvrx-<uid>-<job>: ours and 0700, or refused
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
                await self._serve_spank(first, reader, writer)
            else:
                await self._serve_worker(first, reader, writer)
        except (asyncio.TimeoutError, ConnectionError):
            pass
        finally:
            self._connections -= 1
            writer.close()

    async def _serve_spank(self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = first + await asyncio.wait_for(reader.read(MAX_LINE_BYTES + 1), timeout=5)
        for line in data.splitlines():
            if not line.strip():
                continue
            if b'"nvrx.attach"' in line:
                await self._serve_attach(line, writer)
                return
            try:
                self._on_spank(parse_spank_line(line))
            except ProtocolError as exc:
                self.rejected += 1
                log.warning("rejected a SPANK message: %s", exc.message)

    async def _serve_attach(self, line: bytes, writer: asyncio.StreamWriter) -> None:
        creds = _peer_creds(writer)
        if self._on_attach is None:
            reply = {"ok": False, "error": "this agent was started with its launcher already set"}
        elif creds is None or creds[1] not in (0, os.getuid()):
            self.rejected += 1
            reply = {"ok": False, "error": f"attach refused: peer uid {creds and creds[1]} is not the job's user"}
            log.warning("refused an attach request from uid %s", creds and creds[1])
        else:
            try:
                request = json.loads(line)
                reply = self._on_attach(request if isinstance(request, dict) else {})
            except (ValueError, ProtocolError) as exc:
                reply = {"ok": False, "error": f"bad attach request: {getattr(exc, 'message', exc)}"}
        writer.write(json.dumps(reply).encode() + b"\n")
        await asyncio.wait_for(writer.drain(), timeout=5)

    async def _serve_worker(self, first: bytes, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.codec is None:  # a site agent not attached yet has no token to check frames with
            self.rejected += 1
            log.warning("refused a rank connection: the agent is not attached to a launcher yet")
            return
        link = WorkerLink(writer, self.codec, _peer_pid(writer))
        frames = FrameReader(self.codec)
        data = first
        try:
            while data:
                try:
                    messages = [parse(raw) for raw in frames.feed(data)]
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
