"""A stand-in node agent for the worker tests: a real Unix socket server decoding with core.wire."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.core.wire import Codec, FrameReader, new_token, save_token


def short_dir() -> str:
    """A directory short enough for a Unix socket path (108 bytes)."""
    return tempfile.mkdtemp(prefix="nvrxw-", dir="/tmp")


def token_file(directory: str, token: bytes | None = None) -> tuple[str, bytes]:
    token = token or new_token()
    path = os.path.join(directory, f"token-{token[:4].hex()}")
    save_token(path, token)
    return path, token


class StubAgent:
    """Accepts worker connections on `path`; every decoded message lands in `messages` as (conn no, msg)."""

    def __init__(self, path: str, token: bytes, *, close_on_error: bool = True) -> None:
        self.path = path
        self.close_on_error = close_on_error
        self.codec = Codec(token)
        self.messages: list[tuple[int, dict[str, Any]]] = []
        self.errors: list[str] = []
        self.conns: list[socket.socket] = []
        self._lock = threading.Lock()
        self._server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._server.bind(path)
        self._server.listen(8)
        self._stopped = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stopped:
            try:
                conn, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                self.conns.append(conn)
                number = len(self.conns) - 1
            threading.Thread(target=self._read, args=(conn, number), daemon=True).start()

    def _read(self, conn: socket.socket, number: int) -> None:
        reader = FrameReader(self.codec)
        while True:
            try:
                data = conn.recv(65536)
            except OSError:
                return
            if not data:
                return
            try:
                msgs = reader.feed(data)
            except ProtocolError as exc:
                self.errors.append(exc.message)
                if self.close_on_error:
                    conn.close()
                    return
                reader = FrameReader(self.codec)  # a confused agent: keeps the connection, drops the bytes
                continue
            with self._lock:
                self.messages.extend((number, m) for m in msgs)

    def types(self, conn: int | None = None) -> list[str]:
        with self._lock:
            return [m["type"] for n, m in self.messages if conn is None or n == conn]

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        with self._lock:
            return [m for _, m in self.messages if m["type"] == kind]

    def wait(self, predicate: Callable[[], Any], timeout: float = 5.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            result = predicate()
            if result:
                return result
            time.sleep(0.005)
        raise AssertionError(f"timed out; messages so far: {self.types()}; errors: {self.errors}")

    def send(self, msg: dict[str, Any], conn: int = -1) -> None:
        self.wait(lambda: self.conns)
        self.conns[conn].sendall(self.codec.encode(msg))

    def stop(self) -> None:
        """Go away like a killed agent: listening socket and every connection closed, path removed."""
        self._stopped = True
        self._server.close()
        for conn in self.conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            conn.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass
