"""A process we started stays recognised across a wall-clock step.

The kernel's boot time in /proc/stat is "now minus uptime" in whole seconds, and psutil adds it to every
create time it reports: a clock step (NTP, a virtual machine resumed from a snapshot) moves it. CI lost a
run to that: the test cluster's daemons looked dead, `cluster up` restarted half of it and stopped a
live slurmd. The step is simulated here by moving the boot time psutil reads by five seconds; the system clock
itself is left alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil
import psutil._pslinux
import pytest

from nvrx_hpc.agent.registry import RankRecord
from nvrx_hpc.agent.site import _is_our_agent
from nvrx_hpc.core.proc_start import same_start, started_s
from nvrx_hpc.slurm.devcluster.layout import Layout
from nvrx_hpc.slurm.devcluster.processes import Manifest, is_alive, start_daemon


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env={"SLURM_JOB_ID": "41"})
    yield proc
    proc.kill()
    proc.wait()


@pytest.fixture
def clock_step(monkeypatch):
    """After `step()`, psutil sees the boot time five seconds later, as after a five-second clock step."""
    real = psutil._pslinux.boot_time

    def step() -> None:
        monkeypatch.setattr(psutil._pslinux, "boot_time", lambda: real() + 5.0)

    return step


def test_started_s_is_the_start_since_boot_and_tells_a_new_process_apart(sleeper):
    first = started_s(sleeper.pid)
    assert first == started_s(sleeper.pid)
    assert abs((psutil.Process(sleeper.pid).create_time() - psutil.boot_time()) - first) < 0.02
    assert 0 < first <= float(Path("/proc/uptime").read_text().split()[0])
    assert not same_start(sleeper.pid, first - 1.0)
    assert started_s(os.getpid()) < first


def test_a_gone_process_is_no_such_process(sleeper):
    sleeper.kill()
    sleeper.wait()
    with pytest.raises(psutil.NoSuchProcess):
        started_s(sleeper.pid)
    assert not same_start(sleeper.pid, 1.0)


def test_a_dev_cluster_daemon_is_still_alive_after_a_clock_step(tmp_path, clock_step):
    manifest = Manifest(Layout(tmp_path))
    daemon = start_daemon("slurmd-n2", [sys.executable, "-c", "import time; time.sleep(120)"],
                          tmp_path / "out.log", manifest)  # fmt: skip
    try:
        assert is_alive(manifest.load()[0])
        wall_clock_start = psutil.Process(daemon.pid).create_time()
        clock_step()
        assert psutil.Process(daemon.pid).create_time() - wall_clock_start == pytest.approx(5.0)  # psutil moved
        assert is_alive(manifest.load()[0])  # `cluster up` leaves it alone, `down` still stops it
    finally:
        psutil.Process(daemon.pid).kill()


def test_a_rank_is_still_alive_after_a_clock_step(sleeper, clock_step):
    record = RankRecord(rank=0, pid=sleeper.pid)
    assert record.alive()
    clock_step()
    assert record.alive()


def test_the_epilog_still_knows_the_jobs_site_agent_after_a_clock_step(sleeper, clock_step):
    record = {"pid": sleeper.pid, "started_s": started_s(sleeper.pid), "exe": os.path.realpath(sys.executable)}
    assert _is_our_agent(psutil.Process(sleeper.pid), record, "41", os.getuid())
    clock_step()
    assert _is_our_agent(psutil.Process(sleeper.pid), record, "41", os.getuid())
