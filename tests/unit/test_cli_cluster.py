"""`nvrx-hpc cluster` error paths that need no cluster: clear messages and exit codes, no tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys


def nvrx(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nvrx_hpc", *args],
        capture_output=True, text=True, timeout=60, env={**os.environ, **(env or {})},
    )


def test_up_without_slurm_names_the_debian_package(tmp_path):
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    done = nvrx("cluster", "up", "--state-dir", str(tmp_path / "c"), "--no-spank", env={"PATH": str(empty_bin)})
    assert done.returncode == 69
    assert "error: slurmctld is not installed (not found on PATH)" in done.stderr
    assert "apt-get install slurmctld" in done.stderr
    assert "Traceback" not in done.stderr


def test_status_of_a_missing_cluster_says_how_to_start_one(tmp_path):
    done = nvrx("cluster", "status", "--state-dir", str(tmp_path / "none"))
    assert done.returncode == 69
    assert "no dev cluster at" in done.stderr and "nvrx-hpc cluster up" in done.stderr


def test_down_of_a_missing_cluster_is_a_no_op(tmp_path):
    done = nvrx("cluster", "down", "--state-dir", str(tmp_path / "none"))
    assert done.returncode == 0
    assert "nothing to stop" in done.stdout


def test_bad_flag_value_is_a_usage_error(tmp_path):
    done = nvrx("cluster", "up", "--nodes", "0", "--state-dir", str(tmp_path))
    assert done.returncode == 2
    assert "--nodes" in done.stderr and "Traceback" not in done.stderr


def test_missing_plugin_path_is_refused(tmp_path):
    done = nvrx("cluster", "up", "--state-dir", str(tmp_path), "--spank", str(tmp_path / "nope.so"))
    assert done.returncode == 2
    assert "does not exist" in done.stderr
