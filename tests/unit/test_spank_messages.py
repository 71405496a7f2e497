"""The Python side of the plugin's socket protocol: parsing, rejection, and a real socket round trip."""

from __future__ import annotations

import json
import socket
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nvrx_hpc.core.errors import ProtocolError
from nvrx_hpc.slurm.spank_listener import SpankListener, expand_socket_template
from nvrx_hpc.slurm.spank_messages import Register, StepEnd, TaskExit, parse_spank_line

REGISTER = {"v": 1, "type": "register", "job": 12, "step": 0, "rank": 3, "local_rank": 1, "pid": 4242,
            "node": "n2", "restart_count": 0, "time": 1.5}


def line(obj) -> bytes:
    return json.dumps(obj).encode()


def test_parses_each_message_type():
    assert parse_spank_line(line(REGISTER)) == Register(**REGISTER)
    exit_msg = {**REGISTER, "type": "task_exit", "status": 1792, "exit_code": 7, "signal": None}
    del exit_msg["restart_count"]
    parsed = parse_spank_line(line(exit_msg))
    assert isinstance(parsed, TaskExit) and parsed.exit_code == 7
    end = parse_spank_line(line({"v": 1, "type": "step_end", "job": 12, "step": "batch", "node": "n1", "time": 2.0}))
    assert isinstance(end, StepEnd) and end.step == "batch"


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "JSON list, expected an object"),
        (line({**REGISTER, "type": "explode"}), "bad SPANK message"),
        (line({**REGISTER, "v": 2}), "v:"),
        (line({k: v for k, v in REGISTER.items() if k != "pid"}), "register.pid"),
        (line({**REGISTER, "pid": -1}), "register.pid"),
        (line({**REGISTER, "step": "extern"}), "register.step"),
        (b"{" + b" " * 5000 + b"}", "over the 4096-byte limit"),
    ],
)
def test_rejects_bad_lines_with_a_clear_error(raw, says):
    with pytest.raises(ProtocolError, match=None) as err:
        parse_spank_line(raw)
    assert says in err.value.message


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600))
def test_garbage_only_ever_raises_protocol_error(raw):
    try:
        parse_spank_line(raw)
    except ProtocolError:
        pass


def test_socket_template_expansion():
    assert str(expand_socket_template("/r/%n/agent-%j.sock", "n3", "77")) == "/r/n3/agent-77.sock"
    assert str(expand_socket_template("/r/100%%/%n", "n1")) == "/r/100%/n1"


def test_listener_receives_lines_per_node_and_survives_garbage(tmp_path):
    got, errors = [], []
    done = threading.Event()

    def on_message(node, message):
        got.append((node, message))
        if len(got) == 2:
            done.set()

    template = str(tmp_path / "%n.sock")
    with SpankListener.for_nodes(template, ["n1", "n2"], on_message, on_error=lambda n, e: errors.append(n)):
        assert oct((tmp_path / "n1.sock").stat().st_mode & 0o777) == "0o600"
        for node in ("n1", "n2"):
            with socket.socket(socket.AF_UNIX) as client:
                client.connect(str(tmp_path / f"{node}.sock"))
                client.sendall(b"garbage\n" + line({**REGISTER, "node": node}) + b"\n")
        assert done.wait(5)
    assert sorted((n, m.node) for n, m in got) == [("n1", "n1"), ("n2", "n2")]
    assert sorted(errors) == ["n1", "n2"]
    assert not (tmp_path / "n1.sock").exists()
