"""Listens where the SPANK plugin sends its messages and hands each parsed message to a callback.

A node agent embeds this; `nvrx-hpc spank listen` uses it on its own for debugging and the demo.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.core.templates import expand_percent
from nvrx_hpc.slurm.spank_messages import MAX_LINE_BYTES, Register, StepEnd, TaskExit, parse_spank_line

__all__ = ["SpankListener", "expand_socket_template"]

log = logging.getLogger(__name__)

Message = Register | TaskExit | StepEnd


def expand_socket_template(template: str, node: str, job: str = "") -> Path:
    """The plugin's path template: %n node name, %j job id, %% a percent sign."""
    return Path(expand_percent(template, job_id=job, node=node))


class SpankListener:
    """One Unix stream socket per node; every accepted connection carries JSON lines.

    `on_message(node, message)` runs on the connection's thread; `on_error(node, error)` gets lines
    that fail to parse (they are logged and dropped, never fatal).
    """

    def __init__(
        self,
        paths: dict[str, Path],
        on_message: Callable[[str, Message], None],
        on_error: Callable[[str, ProtocolError], None] | None = None,
        mode: int = 0o600,
    ) -> None:
        self._paths = paths
        self._on_message = on_message
        self._on_error = on_error
        self._mode = mode
        self._servers: list[socket.socket] = []
        self._stop = threading.Event()

    @classmethod
    def for_nodes(cls, template: str, nodes: Iterable[str], on_message, **kwargs) -> SpankListener:
        return cls({n: expand_socket_template(template, n) for n in nodes}, on_message, **kwargs)

    def start(self) -> None:
        for node, path in self._paths.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.is_socket():
                path.unlink()
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(path))
            os.chmod(path, self._mode)  # the plugin writes as root; the job's user owns its agent
            server.listen(64)
            server.settimeout(0.2)
            self._servers.append(server)
            threading.Thread(target=self._accept_loop, args=(node, server), daemon=True).start()

    def close(self) -> None:
        self._stop.set()
        for server in self._servers:
            server.close()
        for path in self._paths.values():
            try:
                path.unlink()
            except OSError:
                pass

    def __enter__(self) -> SpankListener:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _accept_loop(self, node: str, server: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._read_lines, args=(node, conn), daemon=True).start()

    def _read_lines(self, node: str, conn: socket.socket) -> None:
        conn.settimeout(5.0)  # the plugin writes one line and closes; a stuck peer must not pin a thread
        buffer = b""
        with conn:
            while True:
                try:
                    chunk = conn.recv(65536)
                except OSError:
                    break
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    self._handle(node, line)
                if len(buffer) > MAX_LINE_BYTES:
                    self._handle(node, buffer)
                    buffer = b""
        if buffer.strip():
            self._handle(node, buffer)

    def _handle(self, node: str, line: bytes) -> None:
        if not line.strip():
            return
        try:
            message = parse_spank_line(line)
        except ProtocolError as exc:
            log.warning("[%s] dropped a SPANK message: %s", node, exc.message)
            if self._on_error:
                self._on_error(node, exc)
            return
        self._on_message(node, message)
