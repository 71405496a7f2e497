"""Site mode: the Prolog starts one agent per node for a job submitted with `--nvrx`, the launcher
attaches it, the Epilog stops it.

The agent's socket comes from the site's `agent.socket` template (the SPANK plugin's `agent_socket`
names the same path). Its pid record (pid, start time, uid, interpreter, job) and its log live in
`agent.record_dir`, which only root writes: the Epilog never reads a pid or a log from a directory the
job's user controls, and before it signals it checks the process's start time, uid, executable and
SLURM_JOB_ID. A socket directory whose name holds the job id is created fresh for the job's user (0700)
under a root-owned parent; any other directory must already let that user create files (docs/security.md).
"""

from __future__ import annotations

import json
import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from nvrx_hpc.core.config import NvrxConfig, load_config
from nvrx_hpc.core.errors import NvrxError
from nvrx_hpc.core.proc_start import same_start, started_s
from nvrx_hpc.core.safedir import job_dir

__all__ = ["SiteAgentFiles", "start_site_agent", "stop_site_agent", "attach", "ATTACH_WAIT_S"]

ATTACH_WAIT_S = 30.0  # how long `agent-attach` retries: the Prolog may still be starting the agent
_STOP_GRACE_S = 3.0
_TAIL_BYTES = 1000
# What the agent keeps from the Prolog's environment: nothing else of root's environment leaks into it.
_KEEP_ENV = ("PATH", "PYTHONPATH", "LANG", "LC_ALL", "SLURM_JOB_ID", "SLURMD_NODENAME", "SLURM_CONF")


@dataclass(frozen=True)
class SiteAgentFiles:
    socket: Path
    pid_file: Path
    log_file: Path

    @classmethod
    def of(cls, config: NvrxConfig, job: str, node: str) -> SiteAgentFiles:
        return cls.at(Path(config.agent.socket_path(job, node)), Path(config.agent.record_dir))

    @classmethod
    def at(cls, sock: Path, record_dir: Path | None = None) -> SiteAgentFiles:
        """Records named after the socket (unique per job and node) in `record_dir` (default: the config's)."""
        directory = record_dir if record_dir is not None else Path(load_config().config.agent.record_dir)
        name = str(sock).strip("/").replace("/", "_")
        return cls(sock, directory / f"{name}.pid", directory / f"{name}.log")


def _job_identity(env: dict[str, str]) -> tuple[str, str, int, int]:
    job, node = env.get("SLURM_JOB_ID", ""), env.get("SLURMD_NODENAME", "")
    if not job or not node:
        raise NvrxError("SLURM_JOB_ID and SLURMD_NODENAME are not set: not a Prolog/Epilog environment")
    if not env.get("SLURM_JOB_UID", "").isdigit():
        raise NvrxError("SLURM_JOB_UID is not set: the job's user is unknown")
    uid = int(env["SLURM_JOB_UID"])
    gid = int(env["SLURM_JOB_GID"]) if env.get("SLURM_JOB_GID", "").isdigit() else pwd.getpwuid(uid).pw_gid
    return job, node, uid, gid


def record_dir_ready(directory: Path) -> None:
    """Create the record directory (0755, ours); refuse one that another user owns or may write."""
    directory.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    try:
        directory.mkdir(mode=0o755)
    except FileExistsError:
        pass
    st = os.lstat(directory)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise NvrxError(f"refusing the agent record directory {directory}: {stat.filemode(st.st_mode)} "
                        f"uid {st.st_uid}; it must be a directory that only uid {os.geteuid()} writes")  # fmt: skip


def _make_job_dirs(files: SiteAgentFiles, config: NvrxConfig, job: str, node: str, uid: int, gid: int) -> None:
    """The job's socket directory (when its name holds the job id) and burst buffer: fresh, 0700, the user's."""
    if _per_job(config.agent.socket, parent=True):  # otherwise a site directory the site made usable for jobs
        job_dir(files.socket.parent, uid, gid)
    if _per_job(config.agent.bb_dir, parent=False):
        job_dir(Path(config.agent.bb_path(job, node)), uid, gid)


def _per_job(template: str, parent: bool) -> bool:
    """Whether the template's last directory (of the socket: its parent) is named after the job (%j)."""
    path = Path(template)
    return "%j" in (path.parent.name if parent else path.name)


def _open_log(path: Path, gid: int) -> int:
    """The agent's log in the record directory: ours, 0640, readable by the job's group."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    if os.geteuid() == 0:
        os.fchown(fd, 0, gid)
    os.fchmod(fd, 0o640)
    return fd


def _write_record(path: Path, record: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as out:
        out.write(json.dumps(record) + "\n")
    os.replace(tmp, path)


def start_site_agent(env: dict[str, str], config: NvrxConfig) -> dict[str, Any]:
    """Start this node's agent for the job in `env` (the Prolog's), detached, as the job's user.

    Returns what the hook record keeps: pid, socket. Raises NvrxError or OSError; the Prolog fails open.
    """
    job, node, uid, gid = _job_identity(env)
    files = SiteAgentFiles.of(config, job, node)
    record_dir_ready(files.pid_file.parent)
    _make_job_dirs(files, config, job, node, uid, gid)
    argv = [sys.executable, "-m", "nvrx_hpc", "agent", "--site", "--socket", str(files.socket), "--node", node]
    agent_env = {k: env[k] for k in _KEEP_ENV if k in env}
    agent_env.update({k: v for k, v in env.items() if k.startswith("NVRX_")})
    as_other = os.geteuid() == 0 and uid != 0
    creds: dict[str, Any] = {}
    if as_other:
        name = pwd.getpwuid(uid).pw_name
        creds = {"user": uid, "group": gid, "extra_groups": os.getgrouplist(name, gid)}
    log_fd = _open_log(files.log_file, gid)
    try:
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module, argv list
            argv, env=agent_env, cwd="/", stdin=subprocess.DEVNULL, stdout=log_fd, stderr=subprocess.STDOUT,
            start_new_session=True, close_fds=True, **creds,
        )  # fmt: skip
    finally:
        os.close(log_fd)
    _write_record(files.pid_file, {"pid": proc.pid, "started_s": started_s(proc.pid), "socket": str(files.socket),
                                   "uid": uid, "exe": os.path.realpath(sys.executable), "job": job})  # fmt: skip
    return {"pid": proc.pid, "socket": str(files.socket)}


def _is_our_agent(proc: psutil.Process, record: dict[str, Any], job: str, uid: int) -> bool:
    """The process the record names, and not a recycled pid or someone else's process."""
    try:
        if not same_start(proc.pid, float(record["started_s"])) or proc.uids().real != uid:
            return False
        if os.path.realpath(proc.exe()) != record.get("exe", os.path.realpath(sys.executable)):
            return False
        return proc.environ().get("SLURM_JOB_ID") == job
    except (psutil.Error, OSError, ValueError, TypeError, KeyError):
        return False


def _read_tail(path: Path) -> str:
    """The end of a regular file, never through a symlink nor blocking on a FIFO; '' otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return ""
        f.seek(max(0, st.st_size - _TAIL_BYTES))
        return f.read(_TAIL_BYTES).decode(errors="replace")


def _read_record(path: Path) -> dict[str, Any] | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise NvrxError(f"unreadable site-agent pid record {path}: {exc}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        try:
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise ValueError("not a regular file of ours")
            record = json.loads(f.read(4096))
            int(record["pid"]), float(record["started_s"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise NvrxError(f"unreadable site-agent pid record {path}: {exc}") from None
    return record


def stop_site_agent(env: dict[str, str], config: NvrxConfig) -> dict[str, Any] | None:
    """Stop this node's agent for the job in `env` (the Epilog's) and remove its files; None if there was none."""
    job, node, uid, _gid = _job_identity(env)
    files = SiteAgentFiles.of(config, job, node)
    record = _read_record(files.pid_file)
    if record is None:
        return None
    pid = int(record["pid"])
    outcome = "gone"
    try:
        proc = psutil.Process(pid)
        if _is_our_agent(proc, record, job, uid):
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(_STOP_GRACE_S)
                outcome = "stopped"
            except psutil.TimeoutExpired:
                proc.kill()
                outcome = "killed"
    except psutil.NoSuchProcess:
        pass
    tail = _read_tail(files.log_file)  # kept in the hook record: the file goes away
    for path in (files.pid_file, files.log_file, files.socket):
        try:
            path.unlink()  # unlink never follows a symlink
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            pass
    if _per_job(config.agent.socket, parent=True):
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
