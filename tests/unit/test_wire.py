"""Wire frames: round trips, every rejection and its message, tokens, and hypothesis fuzzing."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import os
import socket
from pathlib import Path

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.core.messages import StepStart, parse
from nvrx_hpc.core.wire import (
    DEFAULT_MAX_FRAME,
    MAX_DEPTH,
    Codec,
    FrameReader,
    WireTimeout,
    load_token,
    new_token,
    read_message,
    save_token,
    token_from_text,
    token_to_text,
    write_message,
)

TOKEN = bytes(range(32))
CODEC = Codec(TOKEN)
MSG = {
    "type": "heartbeat",
    "v": 1,
    "job": "42",
    "time": 1.5,
    "rank": 3,
    "blob": b"\x00\xff",
    "tags": ["a", None],
}
DOCS = Path(__file__).resolve().parents[2] / "docs" / "wire-protocol.md"

FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def signed(payload: bytes, *, version: int = 1, token: bytes = TOKEN) -> bytes:
    """A correctly authenticated frame around any payload bytes, to reach the checks after the MAC."""
    body = bytes([version]) + payload
    tag = hmac.new(token, body, hashlib.sha256).digest()
    return (32 + len(body)).to_bytes(4, "big") + body[:1] + tag + payload


def rejected(frame: bytes, codec: Codec = CODEC) -> str:
    with pytest.raises(ProtocolError) as info:
        codec.decode(frame)
    return info.value.message


# ---------------------------------------------------------------- round trips and layout


def test_round_trip():
    assert CODEC.decode(CODEC.encode(MSG)) == MSG


def test_frame_layout_byte_by_byte():
    frame = CODEC.encode({"type": "x"})
    payload = msgpack.packb({"type": "x"})
    assert frame[:4] == (1 + 32 + len(payload)).to_bytes(4, "big")
    assert frame[4] == 1
    assert frame[5:37] == hmac.new(TOKEN, b"\x01" + payload, hashlib.sha256).digest()
    assert frame[37:] == payload


def test_an_enveloped_record_round_trips_through_a_frame():
    msg = StepStart(job="42", restart=3).to_wire()
    assert msg["type"] == "la.step" and msg["v"] == 1 and msg["job"] == "42" and msg["restart"] == 3
    assert isinstance(msg["time"], float)
    assert CODEC.decode(CODEC.encode(msg)) == msg
    assert parse(CODEC.decode(CODEC.encode(msg))) == StepStart(job="42", restart=3, time=msg["time"])


def test_frame_reader_splits_a_stream_fed_byte_by_byte():
    stream = CODEC.encode(MSG) + CODEC.encode({"type": "b"}) + CODEC.encode({"type": "c"})
    reader = FrameReader(CODEC)
    got = []
    for i in range(len(stream)):
        got += reader.feed(stream[i : i + 1])
    assert [m["type"] for m in got] == ["heartbeat", "b", "c"]
    assert reader.pending == 0
    reader.close()
    assert [m["type"] for m in FrameReader(CODEC).feed(stream)] == ["heartbeat", "b", "c"]


# ---------------------------------------------------------------- rejections


def test_tampering_with_any_byte_is_rejected():
    frame = CODEC.encode(MSG)
    for i in range(len(frame)):
        bad = bytearray(frame)
        bad[i] ^= 0x01
        with pytest.raises(ProtocolError):
            CODEC.decode(bytes(bad))


def test_wrong_token_is_a_bad_mac():
    err = rejected(Codec(new_token()).encode(MSG))
    assert err == "bad MAC (wrong token?)"


def test_wrong_version():
    assert (
        rejected(signed(msgpack.packb({"type": "x"}), version=2))
        == "unsupported protocol version 2 (expected 1)"
    )


def test_truncated_header_and_frame():
    frame = CODEC.encode(MSG)
    assert rejected(frame[:3]) == "truncated header: got 3 of 4 bytes"
    assert rejected(frame[:-1]) == f"truncated frame: announced {len(frame) - 4} bytes, got {len(frame) - 5}"
    assert rejected(frame + b"\0").startswith("trailing bytes:")


def test_announced_length_bounds():
    assert rejected((DEFAULT_MAX_FRAME + 1).to_bytes(4, "big")) == (
        f"frame rejected: announced length {DEFAULT_MAX_FRAME + 1} > maximum {DEFAULT_MAX_FRAME}"
    )
    assert rejected((10).to_bytes(4, "big") + bytes(10)).startswith(
        "frame rejected: announced length 10 < minimum"
    )


def test_oversize_length_is_rejected_before_buffering_the_body():
    reader = FrameReader(CODEC)
    with pytest.raises(ProtocolError, match="announced length 4294967295 > maximum"):
        reader.feed(b"\xff\xff\xff\xff" + b"x" * 1000)
    assert reader.pending == 0  # nothing of the body was kept
    with pytest.raises(ProtocolError, match="stream already rejected"):
        reader.feed(CODEC.encode(MSG))


def test_max_frame_is_per_codec():
    small = Codec(TOKEN, max_frame=64)
    with pytest.raises(ProtocolError, match=r"too large: length \d+ > maximum 64"):
        small.encode({"type": "x", "pad": "y" * 100})
    assert "> maximum 64" in rejected(CODEC.encode({"type": "x", "pad": "y" * 100}), small)


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        (b"\xc1", "payload not msgpack: FormatError"),
        (msgpack.packb({"type": "x"}) + b"\x00", "payload not msgpack: ExtraData"),
        (b"\x81\xa4type\xa2\xff\xfe", "payload not msgpack: UnicodeDecodeError"),
        (msgpack.packb([1, 2]), "payload not a map: got list"),
        (msgpack.packb({"kind": "x"}), 'message missing "type": needs a non-empty string, got None'),
        (msgpack.packb({"type": 7}), 'message missing "type": needs a non-empty string, got 7'),
        (msgpack.packb({"type": ""}), 'message missing "type"'),
        (msgpack.packb({1: "x"}), "payload not msgpack: ValueError: int is not allowed for map key"),
        (msgpack.packb({b"type": "x"}, use_bin_type=True), "payload map key of type bytes (only strings)"),
        (
            msgpack.packb({"type": "x", "e": msgpack.ExtType(5, b"a")}),
            "msgpack extension type 5 is not allowed",
        ),
        (msgpack.packb({"type": "x", "t": msgpack.Timestamp(1)}), "Timestamp values are not allowed"),
    ],
)
def test_payload_checks(payload, reason):
    assert reason in rejected(signed(payload))


def test_nesting_depth_is_bounded():
    deep: object = "leaf"
    for _ in range(MAX_DEPTH):
        deep = [deep]
    assert f"nested deeper than {MAX_DEPTH} levels" in rejected(
        signed(msgpack.packb({"type": "x", "d": deep}))
    )
    ok: object = "leaf"
    for _ in range(MAX_DEPTH - 2):
        ok = [ok]
    assert CODEC.decode(signed(msgpack.packb({"type": "x", "d": ok})))["d"]


@pytest.mark.parametrize(
    ("msg", "reason"),
    [
        ({"kind": "x"}, 'message missing "type"'),
        (["type"], "message not a map: got list"),
        ({"type": "x", "s": {1, 2}}, "message 'x' cannot be encoded"),
        ({"type": "x", "big": 1 << 70}, "message 'x' cannot be encoded"),
    ],
)
def test_encode_refuses_bad_messages(msg, reason):
    with pytest.raises(ProtocolError, match=reason):
        CODEC.encode(msg)


def test_codec_needs_a_real_token():
    with pytest.raises(ProtocolError, match="token must be at least 16 bytes, got 8 bytes"):
        Codec(b"12345678")
    with pytest.raises(ProtocolError, match="got str"):
        Codec("0" * 64)  # type: ignore[arg-type]
    with pytest.raises(ProtocolError, match="max_frame must be in"):
        Codec(TOKEN, max_frame=10)


# ---------------------------------------------------------------- asyncio helpers


def read_from(data: bytes, *, eof: bool = True, count: int = 1, timeout: float = 1.0) -> list:
    """Feed `data` to a StreamReader (then EOF unless told) and read `count` messages from it."""

    async def main():
        reader = asyncio.StreamReader()
        reader.feed_data(data)
        if eof:
            reader.feed_eof()
        return [await read_message(reader, CODEC, timeout) for _ in range(count)]

    return asyncio.run(main())


def test_read_message_until_clean_eof():
    assert read_from(CODEC.encode(MSG) + CODEC.encode({"type": "b"}), count=3) == [MSG, {"type": "b"}, None]


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\x00\x00", "truncated header: got 2 of 4 bytes"),
        (CODEC.encode(MSG)[:-3], "truncated frame: announced"),
        (b"\x7f\x00\x00\x00", "announced length 2130706432 > maximum"),
    ],
)
def test_read_message_rejections(data, reason):
    with pytest.raises(ProtocolError, match=reason):
        read_from(data)


def test_read_message_rejects_oversize_without_waiting_for_the_body():
    # No EOF and no body: a reader that tried to buffer the body would hit the timeout instead.
    with pytest.raises(ProtocolError, match="> maximum") as info:
        read_from(b"\x00\x20\x00\x00", eof=False, timeout=5.0)
    assert not isinstance(info.value, WireTimeout)


def test_read_message_times_out():
    with pytest.raises(WireTimeout, match=r"no complete frame within 0.05 s"):
        read_from(CODEC.encode(MSG)[:10], eof=False, timeout=0.05)


def test_write_and_read_over_a_real_socket():
    async def main():
        a, b = socket.socketpair()
        reader_a, writer_a = await asyncio.open_connection(sock=a)
        reader_b, writer_b = await asyncio.open_connection(sock=b)
        await write_message(writer_a, CODEC, MSG)
        await write_message(writer_a, CODEC, {"type": "bye"}, timeout=1.0)
        writer_a.close()
        got = [await read_message(reader_b, CODEC, 2.0) for _ in range(3)]
        writer_b.close()
        return got

    assert asyncio.run(main()) == [MSG, {"type": "bye"}, None]


# ---------------------------------------------------------------- tokens


def test_new_token_is_32_random_bytes():
    a, b = new_token(), new_token()
    assert len(a) == 32 and a != b


def test_token_text_forms():
    token = new_token()
    assert token_from_text(token_to_text(token)) == token
    assert token_from_text(token_to_text(token).upper() + "\n") == token
    assert token_from_text(base64.b64encode(token).decode()) == token
    assert token_from_text(base64.urlsafe_b64encode(token).decode().rstrip("=")) == token


def test_bad_token_text():
    with pytest.raises(ProtocolError, match="neither hex nor base64"):
        token_from_text("not a token!")
    with pytest.raises(ProtocolError, match="token too short: 4 bytes"):
        token_from_text("deadbeef")


def test_save_and_load_token(tmp_path):
    path = tmp_path / "token"
    token = new_token()
    save_token(path, token)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert load_token(path) == token
    os.chmod(path, 0o400)
    assert load_token(path) == token
    with pytest.raises(ProtocolError, match="cannot create token file"):
        save_token(path, token)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o666])
def test_load_token_refuses_a_file_others_can_access(tmp_path, mode):
    path = tmp_path / "token"
    save_token(path, new_token())
    os.chmod(path, mode)
    with pytest.raises(ProtocolError) as info:
        load_token(path)
    assert (
        info.value.message == f"token file {path} has mode {mode:04o}; group and others must have no access"
    )
    assert info.value.hint == f"chmod 600 {path}"


def test_load_token_other_failures(tmp_path):
    with pytest.raises(ProtocolError, match="cannot open token file"):
        load_token(tmp_path / "missing")
    with pytest.raises(ProtocolError, match="is not a regular file"):
        load_token(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    with pytest.raises(ProtocolError, match="is not a regular file"):
        load_token(fifo)
    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff" * 32)
    binary.chmod(0o600)
    with pytest.raises(ProtocolError, match="does not hold a hex or base64 token"):
        load_token(binary)


# ---------------------------------------------------------------- hypothesis


def only_protocol_errors(fn, *args):
    try:
        return fn(*args)
    except ProtocolError:
        return None


@FAST
@given(st.binary(max_size=300))
def test_arbitrary_bytes_to_decode_raise_only_protocol_error(data):
    only_protocol_errors(CODEC.decode, data)


@FAST
@given(st.lists(st.binary(max_size=64), max_size=8))
def test_arbitrary_chunks_to_frame_reader_raise_only_protocol_error(chunks):
    reader = FrameReader(Codec(TOKEN, max_frame=256))
    for chunk in chunks:
        if only_protocol_errors(reader.feed, chunk) is None:
            break


@FAST
@given(st.binary(min_size=1, max_size=300))
def test_arbitrary_authenticated_payloads_raise_only_protocol_error(payload):
    msg = only_protocol_errors(CODEC.decode, signed(payload))
    if msg is not None:
        assert isinstance(msg, dict) and isinstance(msg["type"], str)


@FAST
@given(st.data())
def test_any_truncation_of_a_valid_frame_is_rejected(data):
    frame = CODEC.encode(MSG)
    cut = data.draw(st.integers(0, len(frame) - 1))
    with pytest.raises(ProtocolError):
        CODEC.decode(frame[:cut])
    if cut == 0:
        return  # an empty stream is a clean end, not a truncation
    reader = FrameReader(CODEC)
    assert reader.feed(frame[:cut]) == []
    with pytest.raises(ProtocolError, match="truncated"):
        reader.close()


@FAST
@given(st.integers(DEFAULT_MAX_FRAME + 1, 2**32 - 1))
def test_any_announced_length_above_the_maximum_is_rejected(length):
    header = length.to_bytes(4, "big")
    with pytest.raises(ProtocolError, match=f"announced length {length} > maximum {DEFAULT_MAX_FRAME}"):
        CODEC.decode(header)
    with pytest.raises(ProtocolError, match="> maximum"):
        FrameReader(CODEC).feed(header)


@FAST
@given(st.integers(0, 64), st.integers(1, 255))
def test_flipping_any_bit_pattern_is_rejected(index, mask):
    frame = CODEC.encode(MSG)
    bad = bytearray(frame)
    bad[index % len(frame)] ^= mask
    with pytest.raises(ProtocolError):
        CODEC.decode(bytes(bad))


leaves = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20)
    | st.binary(max_size=20)
)
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=16,
)


@FAST
@given(st.text(min_size=1, max_size=16), st.dictionaries(st.text(max_size=8), values, max_size=6))
def test_round_trip_of_generated_messages(kind, fields):
    msg = {**fields, "type": kind}
    assert CODEC.decode(CODEC.encode(msg)) == msg
    assert FrameReader(CODEC).feed(CODEC.encode(msg) * 2) == [msg, msg]


# ---------------------------------------------------------------- docs


def test_docs_name_every_rejection():
    text = DOCS.read_text()
    for phrase in (
        "truncated header",
        "truncated frame",
        "trailing bytes",
        "announced length",
        "unsupported protocol version",
        "bad MAC (wrong token?)",
        "payload not msgpack",
        "payload not a map",
        'message missing "type"',
        "payload map key of type",
        "extension type",
        "nested deeper than",
        "stream already rejected",
        "too large",
        "group and others must have no access",
    ):
        assert phrase in text, phrase
