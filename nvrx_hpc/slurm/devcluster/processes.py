"""Starts and stops the dev cluster's daemons, and remembers exactly which processes it started."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from nvrx_hpc.core.errors import ClusterError
from nvrx_hpc.core.proc_start import same_start, started_s
from nvrx_hpc.slurm.devcluster.layout import Layout
from nvrx_hpc.slurm.runner import CommandRunner

__all__ = ["StartedProcess", "Manifest", "ensure_munge", "start_daemon", "stop_processes", "is_alive"]

log = logging.getLogger(__name__)

MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_RUN_DIR = Path("/run/munge")


@dataclass(frozen=True)
class StartedProcess:
    """A daemon we started. `started_s` (seconds from boot to its start) guards against killing a recycled PID."""

    name: str
    pid: int
    started_s: float
    argv: tuple[str, ...]


def is_alive(proc: StartedProcess) -> bool:
    """Running and still the same process (zombies awaiting a late reaper count as gone)."""
    try:
        return same_start(proc.pid, proc.started_s) and psutil.Process(proc.pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _started_s(row: dict) -> float:
    if "started_s" in row:
        return float(row["started_s"])
    # A manifest written by older code holds psutil's wall-clock create time: checked the old way, once.
    try:
        if abs(psutil.Process(row["pid"]).create_time() - float(row["create_time"])) < 1.0:
            return started_s(row["pid"])
    except psutil.Error:
        pass
    return -1.0


class Manifest:
    """`pids/started.json`: the processes this tool started, so `down` stops exactly those."""

    def __init__(self, layout: Layout) -> None:
        self._path = layout.manifest

    def load(self) -> list[StartedProcess]:
        try:
            rows = json.loads(self._path.read_text())
        except (OSError, ValueError):
            return []
        return [StartedProcess(r["name"], r["pid"], _started_s(r), tuple(r["argv"])) for r in rows]

    def save(self, procs: Sequence[StartedProcess]) -> None:
        self._path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._path.with_suffix(".tmp")
        tmp.write_text(json.dumps([asdict(p) for p in procs], indent=1))
        os.replace(tmp, self._path)

    def add(self, proc: StartedProcess) -> None:
        self.save([p for p in self.load() if p.name != proc.name] + [proc])


def _munge_works(runner: CommandRunner) -> bool:
    cred = runner.run(["munge", "-n"], timeout=5, check=False)
    if cred.returncode != 0:
        return False
    return runner.run(["unmunge"], timeout=5, check=False, input_text=cred.stdout).returncode == 0


def ensure_munge(runner: CommandRunner, manifest: Manifest) -> None:
    """munged must answer; start it (as user munge) when it does not, and record that we did."""
    runner.which("munged")
    if _munge_works(runner):
        return
    if not MUNGE_KEY.exists() or MUNGE_KEY.stat().st_size == 0:
        runner.run(["mungekey", "--create", "--force"], timeout=10)
    runner.run(["chown", "munge:munge", str(MUNGE_KEY)], timeout=5)
    MUNGE_KEY.chmod(0o400)
    MUNGE_RUN_DIR.mkdir(parents=True, exist_ok=True)
    runner.run(["chown", "munge:munge", str(MUNGE_RUN_DIR)], timeout=5)
    # munged daemonizes and writes its pid file; a stale socket from a killed munged is replaced.
    argv = ["runuser", "-u", "munge", "--", runner.which("munged"), "--force"]
    runner.run(argv, timeout=10)
    deadline = time.monotonic() + 5
    while not _munge_works(runner):
        if time.monotonic() > deadline:
            raise ClusterError("munged did not start answering within 5 s", hint="see `journalctl` or /var/log/munge")
        time.sleep(0.1)
    pid_file = MUNGE_RUN_DIR / "munged.pid"
    try:
        pid = int(pid_file.read_text().strip())
        manifest.add(StartedProcess("munged", pid, started_s(pid), tuple(argv)))
    except (OSError, ValueError, psutil.Error):
        log.warning("munged started but its pid file %s is unreadable; `cluster down` will leave it running", pid_file)


def start_daemon(name: str, argv: Sequence[str], log_path: Path, manifest: Manifest) -> StartedProcess:
    """Start one foreground daemon (`-D`) in its own session, output to `log_path`."""
    with open(log_path, "ab") as out:
        child = subprocess.Popen(  # noqa: S603 - argv list from our own config
            list(argv), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    proc = StartedProcess(name, child.pid, started_s(child.pid), tuple(argv))
    manifest.add(proc)
    return proc


def stop_processes(procs: Sequence[StartedProcess], grace_s: float = 10.0) -> list[str]:
    """SIGTERM, wait up to `grace_s`, then SIGKILL what is left. Returns the names that needed SIGKILL."""
    alive = [p for p in procs if is_alive(p)]
    for p in alive:
        try:
            psutil.Process(p.pid).terminate()
        except psutil.Error:
            pass
    deadline = time.monotonic() + grace_s
    while any(is_alive(p) for p in alive) and time.monotonic() < deadline:
        time.sleep(0.1)
    killed = []
    for p in alive:
        if is_alive(p):
            killed.append(p.name)
            try:
                psutil.Process(p.pid).kill()
            except psutil.Error:
                pass
    return killed
