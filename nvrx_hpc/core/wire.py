"""Wire protocol between our processes: length-prefixed, versioned, HMAC-authenticated msgpack frames.

Frame (docs/wire-protocol.md)::

    length  u32 big-endian   bytes that follow: 1 + 32 + len(payload), at most max_frame
    version u8               PROTOCOL_VERSION (1)
    tag     32 bytes         HMAC-SHA256(token, version byte + payload)
    payload msgpack          a map with string keys and a string "type" (nvrx_hpc.core.messages: the records)

Every rejection is a ProtocolError that names the check that failed. No pickle, no msgpack extension types.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgpack

from nvrx_hpc.core.errors import AuthError, ProtocolError

if TYPE_CHECKING:  # asyncio is imported where used: a worker's link thread never needs it
    import asyncio

__all__ = [
    "PROTOCOL_VERSION",
    "DEFAULT_MAX_FRAME",
    "HEADER_SIZE",
    "TAG_SIZE",
    "MIN_TOKEN_BYTES",
    "MAX_DEPTH",
    "WireTimeout",
    "Codec",
    "FrameReader",
    "read_message",
    "write_message",
    "new_token",
    "token_to_text",
    "token_from_text",
    "load_token",
    "save_token",
]

PROTOCOL_VERSION = 1
DEFAULT_MAX_FRAME = 1 << 20  # 1 MiB: the largest allowed value of the length field
HEADER_SIZE = 4
TAG_SIZE = 32
MIN_TOKEN_BYTES = 16
MAX_DEPTH = 32
_MIN_LENGTH = 1 + TAG_SIZE + 1  # version, tag, and at least one payload byte


class WireTimeout(ProtocolError):
    """A read or write did not finish before its deadline (the peer is slow, hung or gone)."""


class _ExtRejected(Exception):
    def __init__(self, code: int) -> None:
        self.code = code


def _reject_ext(code: int, data: bytes) -> Any:
    raise _ExtRejected(code)


class Codec:
    """Encodes and decodes frames for one job's token; `max_frame` bounds the length field."""

    def __init__(self, token: bytes, max_frame: int = DEFAULT_MAX_FRAME) -> None:
        if not isinstance(token, bytes) or len(token) < MIN_TOKEN_BYTES:
            got = f"{len(token)} bytes" if isinstance(token, bytes) else type(token).__name__
            raise ProtocolError(
                f"token must be at least {MIN_TOKEN_BYTES} bytes, got {got}",
                hint="create one with nvrx_hpc.core.wire.new_token()",
            )
        if not _MIN_LENGTH <= max_frame < 1 << 32:
            raise ProtocolError(f"max_frame must be in {_MIN_LENGTH}..{(1 << 32) - 1}, got {max_frame}")
        self._token = token
        self.max_frame = max_frame

    def _tag(self, body: bytes) -> bytes:
        return hmac.new(self._token, body, hashlib.sha256).digest()

    def encode(self, msg: Mapping[str, Any]) -> bytes:
        """One whole frame for `msg`, a map with a string "type".

        Raises:
            ProtocolError: no "type", a value msgpack cannot carry, or a frame over max_frame.
        """
        _check_message(msg)
        try:
            payload = msgpack.packb(msg, use_bin_type=True, datetime=False)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ProtocolError(f"message {msg.get('type')!r} cannot be encoded: {exc}") from None
        body = bytes([PROTOCOL_VERSION]) + payload
        length = TAG_SIZE + len(body)
        if length > self.max_frame:
            raise ProtocolError(
                f"message {msg['type']!r} is too large: length {length} > maximum {self.max_frame}",
                hint="send less per message, or raise max_frame on both ends",
            )
        return length.to_bytes(HEADER_SIZE, "big") + body[:1] + self._tag(body) + payload

    def check_length(self, length: int) -> None:
        """Reject an announced length before any of its bytes are read."""
        if length > self.max_frame:
            raise ProtocolError(f"frame rejected: announced length {length} > maximum {self.max_frame}")
        if length < _MIN_LENGTH:
            raise ProtocolError(
                f"frame rejected: announced length {length} < minimum {_MIN_LENGTH} (version + MAC + payload)"
            )

    def decode(self, frame: bytes) -> dict[str, Any]:
        """The message in one whole frame (header included); nothing may follow it."""
        if len(frame) < HEADER_SIZE:
            raise ProtocolError(f"truncated header: got {len(frame)} of {HEADER_SIZE} bytes")
        length = int.from_bytes(frame[:HEADER_SIZE], "big")
        self.check_length(length)
        got = len(frame) - HEADER_SIZE
        if got < length:
            raise ProtocolError(f"truncated frame: announced {length} bytes, got {got}")
        if got > length:
            raise ProtocolError(f"trailing bytes: frame announces {length} bytes but {got} follow the header")
        return self.decode_body(frame[HEADER_SIZE:])

    def decode_body(self, body: bytes) -> dict[str, Any]:
        """The message in the bytes after the length field (version, tag, payload)."""
        if len(body) < _MIN_LENGTH:
            raise ProtocolError(f"truncated frame: {len(body)} bytes after the header, need {_MIN_LENGTH}")
        version = body[0]
        if version != PROTOCOL_VERSION:
            raise ProtocolError(
                f"unsupported protocol version {version} (expected {PROTOCOL_VERSION})",
                hint="both ends must run the same nvrx-hpc version",
            )
        tag, payload = body[1 : 1 + TAG_SIZE], body[1 + TAG_SIZE :]
        if not hmac.compare_digest(tag, self._tag(body[:1] + payload)):
            raise AuthError(
                "bad MAC (wrong token?)",
                hint="the peer uses another job's token, or the frame was altered in transit",
            )
        return _unpack(payload, self.max_frame)


def _unpack(payload: bytes, max_frame: int) -> dict[str, Any]:
    try:
        obj = msgpack.unpackb(
            payload,
            raw=False,
            strict_map_key=True,
            use_list=True,
            ext_hook=_reject_ext,
            max_str_len=max_frame,
            max_bin_len=max_frame,
            max_array_len=len(payload),
            max_map_len=len(payload),
            max_ext_len=max_frame,  # so that ext_hook sees, and refuses, every extension type
        )
    except _ExtRejected as exc:
        raise ProtocolError(
            f"payload not accepted: msgpack extension type {exc.code} is not allowed"
        ) from None
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        raise ProtocolError(f"payload not msgpack: {detail}") from None
    if not isinstance(obj, dict):
        raise ProtocolError(f"payload not a map: got {type(obj).__name__}")
    _check_tree(obj)
    _check_message(obj)
    return obj


_LEAVES = frozenset({type(None), bool, int, float, str, bytes})
_CONTAINERS = frozenset({dict, list})
_STR = {str}


def _check_tree(obj: Any) -> None:
    """Only plain msgpack types, string map keys, and at most MAX_DEPTH levels (iterative: no recursion).

    Exact type checks: msgpack builds plain dicts, lists, str, int, ...; anything else (a Timestamp, which
    ext -1 decodes to without calling ext_hook) is refused. Runs on every frame, so each container's
    element types are collected in C (set(map(type, ...))) and only containers are walked into."""
    stack = [(obj, 1)]
    pop, push = stack.pop, stack.append
    while stack:
        item, depth = pop()
        if depth > MAX_DEPTH:
            raise ProtocolError(f"payload nested deeper than {MAX_DEPTH} levels")
        if type(item) is dict:
            keys = set(map(type, item))
            if keys and keys != _STR:
                bad = next(k for k in keys if k is not str)
                raise ProtocolError(f"payload map key of type {bad.__name__} (only strings)")
            values = item.values()
        else:
            values = item
        kinds = set(map(type, values))
        if kinds <= _LEAVES:
            continue
        bad_kinds = kinds - _LEAVES - _CONTAINERS
        if bad_kinds:
            raise ProtocolError(f"payload not accepted: {next(iter(bad_kinds)).__name__} values are not allowed")
        for value in values:
            if type(value) in _CONTAINERS:
                push((value, depth + 1))


def _check_message(msg: Any) -> None:
    if not isinstance(msg, Mapping):
        raise ProtocolError(f"message not a map: got {type(msg).__name__}")
    kind = msg.get("type")
    if not isinstance(kind, str) or not kind:
        raise ProtocolError(f'message missing "type": needs a non-empty string, got {kind!r}')


class FrameReader:
    """Incremental decoder for a byte stream: `feed()` returns the messages completed so far.

    An announced length over the maximum is refused as soon as its 4 bytes arrive, before any body is
    kept. After a ProtocolError the stream is out of step, so the reader refuses everything after it.
    """

    def __init__(self, codec: Codec) -> None:
        self._codec = codec
        self._buf = bytearray()
        self._need: int | None = None  # body length of the frame being read, once its header is in
        self._failed: ProtocolError | None = None

    @property
    def pending(self) -> int:
        """Bytes held for an incomplete frame (0 at a frame boundary)."""
        return len(self._buf) + (HEADER_SIZE if self._need is not None else 0)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        if self._failed is not None:
            raise ProtocolError(f"stream already rejected: {self._failed.message}")
        out: list[dict[str, Any]] = []
        view, pos = memoryview(data), 0
        try:
            while pos < len(view):
                if self._need is None:
                    take = min(HEADER_SIZE - len(self._buf), len(view) - pos)
                    self._buf += view[pos : pos + take]
                    pos += take
                    if len(self._buf) < HEADER_SIZE:
                        break
                    length = int.from_bytes(self._buf, "big")
                    self._codec.check_length(length)
                    self._need, self._buf = length, bytearray()
                take = min(self._need - len(self._buf), len(view) - pos)
                self._buf += view[pos : pos + take]
                pos += take
                if len(self._buf) == self._need:
                    body, self._buf, self._need = bytes(self._buf), bytearray(), None
                    out.append(self._codec.decode_body(body))
        except ProtocolError as exc:
            self._failed, self._buf = exc, bytearray()
            raise
        return out

    def close(self) -> None:
        """Call at end of stream: an incomplete frame left over is a truncation."""
        if self.pending:
            what = "header" if self._need is None else f"frame of {self._need} bytes"
            raise ProtocolError(f"truncated {what}: stream ended with {self.pending} bytes of it")


async def read_message(
    reader: asyncio.StreamReader, codec: Codec, timeout: float | None
) -> dict[str, Any] | None:
    """The next message, or None at a clean end of stream (between frames).

    Raises:
        WireTimeout: no whole frame within `timeout` seconds.
        ProtocolError: the frame was rejected, or the stream ended inside one.
    """
    import asyncio

    try:
        return await asyncio.wait_for(_read_frame(reader, codec), timeout)
    except asyncio.TimeoutError:
        raise WireTimeout(f"no complete frame within {timeout:g} s") from None


async def _read_frame(reader: asyncio.StreamReader, codec: Codec) -> dict[str, Any] | None:
    import asyncio

    try:
        header = await reader.readexactly(HEADER_SIZE)
    except asyncio.IncompleteReadError as exc:
        if not exc.partial:
            return None
        raise ProtocolError(f"truncated header: got {len(exc.partial)} of {HEADER_SIZE} bytes") from None
    length = int.from_bytes(header, "big")
    codec.check_length(length)
    try:
        body = await reader.readexactly(length)
    except asyncio.IncompleteReadError as exc:
        raise ProtocolError(f"truncated frame: announced {length} bytes, got {len(exc.partial)}") from None
    return codec.decode_body(body)


async def write_message(
    writer: asyncio.StreamWriter, codec: Codec, msg: Mapping[str, Any], timeout: float | None = 10.0
) -> None:
    """Encode `msg` and write it, waiting at most `timeout` seconds for the peer to take it."""
    import asyncio

    writer.write(codec.encode(msg))
    try:
        await asyncio.wait_for(writer.drain(), timeout)
    except asyncio.TimeoutError:
        raise WireTimeout(f"peer did not take a {msg['type']!r} frame within {timeout:g} s") from None


# ---------------------------------------------------------------- tokens


def new_token() -> bytes:
    """32 random bytes: one job's shared secret."""
    return secrets.token_bytes(32)


def token_to_text(token: bytes) -> str:
    """Lower-case hex, the form token files hold."""
    return token.hex()


def token_from_text(text: str) -> bytes:
    """Hex, or base64 (standard or URL-safe); an even-length run of hex digits is always read as hex."""
    text = text.strip()
    try:
        if text and len(text) % 2 == 0 and all(c in "0123456789abcdefABCDEF" for c in text):
            token = bytes.fromhex(text)
        else:
            std = text.replace("-", "+").replace("_", "/")
            token = base64.b64decode(std + "=" * (-len(std) % 4), validate=True)
    except (ValueError, binascii.Error):
        raise ProtocolError(
            f"token is neither hex nor base64 ({len(text)} characters)",
            hint="write it with token_to_text(new_token())",
        ) from None
    if len(token) < MIN_TOKEN_BYTES:
        raise ProtocolError(f"token too short: {len(token)} bytes (need at least {MIN_TOKEN_BYTES})")
    return token


def load_token(path: str | os.PathLike[str]) -> bytes:
    """Read a token file, refusing one that group or others may access (mode 0600 or stricter).

    Raises:
        ProtocolError: missing, not a regular file, too open, or not a token.
    """
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise ProtocolError(f"cannot open token file {path}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)  # the file we opened, not whatever the path names now
        if not stat.S_ISREG(st.st_mode):
            raise ProtocolError(f"token file {path} is not a regular file")
        mode = stat.S_IMODE(st.st_mode)
        if mode & 0o077:
            raise ProtocolError(
                f"token file {path} has mode {mode:04o}; group and others must have no access",
                hint=f"chmod 600 {path}",
            )
        data = os.read(fd, 4096)
    finally:
        os.close(fd)
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise ProtocolError(f"token file {path} does not hold a hex or base64 token") from None
    return token_from_text(text)


def save_token(path: str | os.PathLike[str], token: bytes) -> None:
    """Write a new token file with mode 0600; refuses to overwrite an existing file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError as exc:
        raise ProtocolError(f"cannot create token file {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "w", encoding="ascii") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(token_to_text(token) + "\n")
