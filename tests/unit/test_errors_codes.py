"""Errors between our processes have their own classes and documented exit codes: a launcher that does not
answer is UNAVAILABLE (not an internal error), a frame under another token is AUTH (not a usage error), and
no command exits with a bare number."""

from __future__ import annotations

import asyncio
import re
import socket
from pathlib import Path

import pytest

from nvrx_hpc.agent.daemon import Agent, AgentSettings
from nvrx_hpc.core.errors import AuthError, PeerUnreachable, ProtocolError
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.core.messages import AgentHello
from nvrx_hpc.core.wire import Codec, new_token

REPO = Path(__file__).resolve().parents[2]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again when we return: nobody listens there


def test_an_agent_whose_launcher_does_not_listen_exits_unavailable_with_the_address(tmp_path):
    port = _closed_port()
    agent = Agent(AgentSettings(node="n1", job="7", socket_path=tmp_path / "a.sock", launcher_host="127.0.0.1",
                                launcher_port=port, token=new_token(), connect_s=0.3))
    with pytest.raises(PeerUnreachable) as caught:
        asyncio.run(agent.run())
    assert caught.value.exit_code == ExitCode.UNAVAILABLE == 69
    assert f"launcher at 127.0.0.1:{port} unreachable" in caught.value.message
    assert "nvrx-hpc run" in caught.value.hint


def test_a_frame_under_another_token_is_an_auth_error_not_a_usage_error():
    frame = Codec(new_token()).encode(AgentHello(job="7", node="n1").to_wire())
    with pytest.raises(AuthError) as caught:
        Codec(new_token()).decode(frame)
    assert isinstance(caught.value, ProtocolError)  # every reader that drops bad frames still drops it
    assert caught.value.exit_code == ExitCode.AUTH == 77
    assert caught.value.exit_code != ExitCode.USAGE


def test_every_exit_code_is_documented_and_no_command_exits_with_a_literal():
    page = (REPO / "docs" / "exit-codes.md").read_text()
    for code in ExitCode:
        assert f"| `{code.name}` | {int(code)} |" in page, code
    literals = [f"{p.name}:{n}" for p in (REPO / "nvrx_hpc" / "cli").glob("*.py")
                for n, line in enumerate(p.read_text().splitlines(), 1) if re.search(r"Exit\(\d", line)]
    assert not literals, literals
