"""Site mode: the Prolog starts one agent per node for a job submitted with `--nvrx`, the launcher
attaches it, the Epilog stops it.

The agent's socket comes from the site's `agent.socket` template (the SPANK plugin's `agent_socket`
names the same path). Beside it the Prolog keeps a `.pid` file of the same name (pid and start time, so
the Epilog never signals a recycled pid) and a `.log`. A socket directory whose name holds the job id
is created for the job's user (0700); any other directory must already let that user create files.
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from nvrx_hpc.core.config import NvrxConfig
from nvrx_hpc.core.errors import NvrxError

__all__ = ["SiteAgentFiles", "start_site_agent", "stop_site_agent", "attach", "ATTACH_WAIT_S"]

ATTACH_WAIT_S = 30.0  # how long `agent-attach` retries: the Prolog may still be starting the agent
_STOP_GRACE_S = 3.0
# What the agent keeps from the Prolog's environment: nothing else of root's environment leaks into it.
_KEEP_ENV = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "SLURM_JOB_ID", "SLURMD_NODENAME", "SLURM_CONF")


@dataclass(frozen=True)
class SiteAgentFiles:
    socket: Path
    pid_file: Path
    log_file: Path

    @classmethod
    def of(cls, config: NvrxConfig, job: str, node: str) -> SiteAgentFiles:
        return cls.at(Path(config.agent.socket_path(job, node)))

    @classmethod
    def at(cls, sock: Path) -> SiteAgentFiles:
        """Named after the socket, which is unique per job and node whatever the template's directories."""
        return cls(sock, sock.with_suffix(".pid"), sock.with_suffix(".log"))


def _job_identity(env: dict[str, str]) -> tuple[str, str, int, int]:
    job, node = env.get("SLURM_JOB_ID", ""), env.get("SLURMD_NODENAME", "")
    if not job or not node:
        raise NvrxError("SLURM_JOB_ID and SLURMD_NODENAME are not set: not a Prolog/Epilog environment")
    uid = int(env.get("SLURM_JOB_UID", os.getuid()))
    gid = int(env["SLURM_JOB_GID"]) if env.get("SLURM_JOB_GID", "").isdigit() else pwd.getpwuid(uid).pw_gid
    return job, node, uid, gid


def _make_socket_dir(directory: Path, job: str, uid: int, gid: int) -> None:
    directory.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    directory.mkdir(exist_ok=True, mode=0o700)
    if job in directory.name:  # the job's own directory: its user's alone
        if os.geteuid() == 0:
            os.chown(directory, uid, gid)
        os.chmod(directory, 0o700)


def start_site_agent(env: dict[str, str], config: NvrxConfig) -> dict[str, Any]:
    """Start this node's agent for the job in `env` (the Prolog's), detached, as the job's user.

    Returns what the hook record keeps: pid, socket. Raises NvrxError or OSError; the Prolog fails open.
    """
    job, node, uid, gid = _job_identity(env)
    files = SiteAgentFiles.of(config, job, node)
    _make_socket_dir(files.socket.parent, job, uid, gid)
    argv = [sys.executable, "-m", "nvrx_hpc", "agent", "--site", "--socket", str(files.socket), "--node", node]
    agent_env = {k: env[k] for k in _KEEP_ENV if k in env}
    agent_env.update({k: v for k, v in env.items() if k.startswith("NVRX_")})
    as_other = os.geteuid() == 0 and uid != 0
    with open(files.log_file, "ab") as log_file:
        if as_other:
            os.chown(files.log_file, uid, gid)
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module, argv list
            argv, env=agent_env, cwd=str(files.socket.parent), stdin=subprocess.DEVNULL, stdout=log_file,
            stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
            user=uid if as_other else None, group=gid if as_other else None, extra_groups=[] if as_other else None,
        )  # fmt: skip
    created = psutil.Process(proc.pid).create_time()
    tmp = files.pid_file.with_name(files.pid_file.name + ".tmp")
    tmp.write_text(json.dumps({"pid": proc.pid, "create_time": created, "socket": str(files.socket)}) + "\n")
    os.replace(tmp, files.pid_file)
    return {"pid": proc.pid, "socket": str(files.socket)}


def stop_site_agent(env: dict[str, str], config: NvrxConfig) -> dict[str, Any] | None:
    """Stop this node's agent for the job in `env` (the Epilog's) and remove its files; None if there was none."""
    job, node, _uid, _gid = _job_identity(env)
    files = SiteAgentFiles.of(config, job, node)
    try:
        record = json.loads(files.pid_file.read_text())
        pid, created = int(record["pid"]), float(record["create_time"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise NvrxError(f"unreadable site-agent pid file {files.pid_file}: {exc}") from None
    outcome = "gone"
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - created) < 0.05 and "agent" in proc.cmdline():  # not a recycled pid
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(_STOP_GRACE_S)
                outcome = "stopped"
            except psutil.TimeoutExpired:
                proc.kill()
                outcome = "killed"
    except psutil.NoSuchProcess:
        pass
    tail = ""
    try:
        with open(files.log_file, "rb") as f:  # kept in the hook record: the directory goes away
            f.seek(max(0, f.seek(0, os.SEEK_END) - 1000))
            tail = f.read().decode(errors="replace")
    except OSError:
        pass
    for path in (files.pid_file, files.socket, files.log_file):
        try:
            path.unlink()
        except FileNotFoundError:
            pass
    if job in files.socket.parent.name:
        try:
            files.socket.parent.rmdir()  # only once every node's files are gone (it may be shared)
        except OSError:
            pass
    return {"pid": pid, "outcome": outcome, "log_tail": tail}


def attach(sock_path: Path, launcher: str, token_file: Path, health_interval: float,
           wait_s: float = ATTACH_WAIT_S, pid_file: Path | None = None) -> dict[str, Any]:
    """Hand the launcher's address and token file to the site agent listening on `sock_path`.

    With `pid_file`, a node whose Prolog started no agent (no pid file: the Prolog has finished before any
    task of the job runs on the node) is reported at once instead of after `wait_s`.

    Raises:
        NvrxError: no agent answered within `wait_s` seconds, or it refused (the message says why).
    """
    if pid_file is not None and not pid_file.exists():
        raise NvrxError(f"the Prolog started no agent here (no {pid_file})",
                        hint="submit with --nvrx, and check the Prolog's record in the hook log")
    request = {"type": "nvrx.attach", "launcher": launcher, "token_file": str(token_file),
               "health_interval": health_interval}  # fmt: skip
    deadline = time.monotonic() + wait_s
    last_error = "no socket"
    while True:
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(10)
                s.connect(str(sock_path))
                s.sendall(json.dumps(request).encode() + b"\n")
                reply = s.makefile("rb").readline()
            break
        except OSError as exc:
            last_error = str(exc)
            if time.monotonic() > deadline:
                raise NvrxError(f"no site agent at {sock_path} within {wait_s:g} s ({last_error})",
                                hint="was the job submitted with --nvrx, and does the Prolog start agents?") from None
            time.sleep(0.2)
    try:
        answer = json.loads(reply)
    except ValueError:
        raise NvrxError(f"the agent at {sock_path} answered {reply[:200]!r}") from None
    if not isinstance(answer, dict) or not answer.get("ok"):
        why = answer.get("error") if isinstance(answer, dict) else answer
        raise NvrxError(f"the agent at {sock_path} refused to attach: {why}")
    return answer
