"""Site mode without Slurm: the Prolog's start of a node agent (a real detached process), the launcher's
attach over the agent's socket, and the Epilog's stop. The cluster test runs the same through slurmd."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from nvrx_hpc.agent.site import SiteAgentFiles, attach, start_site_agent, stop_site_agent
from nvrx_hpc.core.config import load_config
from nvrx_hpc.core.errors import NvrxError
from nvrx_hpc.core.proc_start import started_s
from nvrx_hpc.core.wire import new_token, save_token
from nvrx_hpc.launcher.hub import AgentHub

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def prolog_env(tmp_path):
    short = tmp_path
    env = {"SLURM_JOB_ID": "77", "SLURMD_NODENAME": "nx", "SLURM_JOB_UID": str(os.getuid()),
           "SLURM_JOB_GID": str(os.getgid()), "PATH": os.environ["PATH"], "PYTHONPATH": str(REPO),
           "NVRX_AGENT__SOCKET": f"{short.absolute()}/run/%j/agent-%n.sock",
           "NVRX_AGENT__RECORD_DIR": f"{short.absolute()}/records"}  # fmt: skip
    yield env, load_config(env=env).config
    stop_site_agent(env, load_config(env=env).config)


def _wait_socket(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.is_socket():
        assert time.monotonic() < deadline, f"no socket at {path}"
        time.sleep(0.05)


def test_prolog_agent_waits_is_attached_reports_and_the_epilog_stops_it(prolog_env, tmp_path):
    env, config = prolog_env
    started = start_site_agent(env, config)
    files = SiteAgentFiles.of(config, "77", "nx")
    assert started["socket"] == str(files.socket) and files.socket.parent.name == "77"
    assert oct(files.socket.parent.stat().st_mode & 0o777) == "0o700"
    proc = psutil.Process(started["pid"])
    assert proc.ppid() != os.getpid() or proc.status() != psutil.STATUS_ZOMBIE
    assert os.getsid(started["pid"]) == started["pid"]  # its own session: slurmd does not wait for it
    _wait_socket(files.socket)
    token_file = tmp_path / "token"
    save_token(token_file, token := new_token())

    async def scenario() -> None:
        hub = AgentHub(token, host="127.0.0.1", job="77")
        port = await hub.start()
        answer = await asyncio.to_thread(attach, files.socket, f"127.0.0.1:{port}", token_file, 0.0, 10)
        assert answer["ok"] and answer["pid"] == started["pid"] and answer["node"] == "nx"
        assert await hub.wait_for_agents(["nx"], 20) == []
        with pytest.raises(NvrxError, match="already attached"):
            await asyncio.to_thread(attach, files.socket, f"127.0.0.1:{port}", token_file, 0.0, 5)
        await hub.close()

    asyncio.run(scenario())
    stopped = stop_site_agent(env, config)
    assert stopped["pid"] == started["pid"] and stopped["outcome"] in ("stopped", "gone")  # gone: with its launcher
    assert "attached to the launcher" in stopped["log_tail"]
    assert not psutil.pid_exists(started["pid"]) or psutil.Process(started["pid"]).status() == psutil.STATUS_ZOMBIE
    assert not files.pid_file.exists() and not files.socket.exists()


def test_an_unattached_agent_refuses_ranks_and_a_bad_attach_says_why(prolog_env, tmp_path):
    env, config = prolog_env
    started = start_site_agent(env, config)
    files = SiteAgentFiles.of(config, "77", "nx")
    _wait_socket(files.socket)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as rank:  # a wire frame before any token
        rank.settimeout(10)
        rank.connect(str(files.socket))
        rank.sendall(b"\x00\x00\x00\x10" + bytes(16))
        assert rank.recv(100) == b""  # closed
    with pytest.raises(NvrxError, match="not HOST:PORT"):
        attach(files.socket, "nowhere", tmp_path / "token", 0.0, 5)
    with pytest.raises(NvrxError, match="token"):
        attach(files.socket, "127.0.0.1:9", tmp_path / "missing-token", 0.0, 5)
    with pytest.raises(NvrxError, match="no site agent"):
        attach(files.socket.with_name("agent-other.sock"), "127.0.0.1:9", tmp_path / "token", 0.0, 0.3)
    t = time.monotonic()
    with pytest.raises(NvrxError, match="the Prolog started no agent here"):
        attach(files.socket.with_name("agent-other.sock"), "127.0.0.1:9", tmp_path / "token", 0.0, 30,
               pid_file=files.pid_file.with_name("agent-other.pid"))
    assert time.monotonic() - t < 10  # at once, not after the 30 s
    stopped = stop_site_agent(env, config)
    assert (stopped["pid"], stopped["outcome"]) == (started["pid"], "stopped")
    assert "refused a rank connection" in stopped["log_tail"]
    assert not files.socket.parent.exists()  # the job's directory goes with its last agent
    assert stop_site_agent(env, config) is None


def test_the_epilog_never_signals_a_recycled_pid(prolog_env):
    env, config = prolog_env
    files = SiteAgentFiles.of(config, "77", "nx")
    files.socket.parent.mkdir(parents=True)
    files.pid_file.parent.mkdir(parents=True)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        files.pid_file.write_text(f'{{"pid": {bystander.pid}, "started_s": 1.0, "socket": "x"}}\n')
        assert stop_site_agent(env, config) == {"pid": bystander.pid, "outcome": "gone", "log_tail": ""}
        started = started_s(bystander.pid)  # right start time, but not the job's process
        files.pid_file.write_text(f'{{"pid": {bystander.pid}, "started_s": {started}, "socket": "x"}}\n')
        assert stop_site_agent(env, config) == {"pid": bystander.pid, "outcome": "gone", "log_tail": ""}
        assert bystander.poll() is None
    finally:
        bystander.kill()
        bystander.wait()
