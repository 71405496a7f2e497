"""The Epilog's orphan check decides from files the job's user wrote: it requeues only when every sign
agrees, and a hostile or broken run directory (symlinks, a FIFO, huge or torn files, another job's
files) means no requeue, never a hang or a traceback."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from nvrx_hpc.launcher.orphan import decide, read_small_json
from nvrx_hpc.slurm.api import JobInfo

UID = os.getuid()


def _job(state: str = "FAILED", restarts: int = 0, job_id: int = 42) -> JobInfo:
    return JobInfo(job_id=job_id, name="train", state=state, restart_count=restarts)


def _run_dir(tmp_path: Path, *, final: bool = False, stopped: str | None = None, job_id: int = 42,
             restarts: int = 0, uid: int = UID) -> Path:
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    identity = {"job_id": job_id, "uid": uid, "cluster": "c", "submit_time": "t", "restart_count": restarts}
    (run / "job.json").write_text(json.dumps(identity))
    (run / "status.json").write_text(json.dumps({"job": job_id, "final": final, "outcome": None}))
    (run / "launcher-state.json").write_text(json.dumps({"stopped": stopped} if stopped else {}))
    return run


def test_a_launcher_that_died_undecided_is_requeued(tmp_path):
    decision = decide(_run_dir(tmp_path), _job(), UID)
    assert decision.requeue and "not final" in decision.reason


@pytest.mark.parametrize("state", ["COMPLETED", "FAILED"])
def test_either_way_its_script_ended(tmp_path, state):
    assert decide(_run_dir(tmp_path), _job(state), UID).requeue


@pytest.mark.parametrize("state", ["CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY"])
def test_a_job_ended_by_a_user_or_by_slurm_is_left_alone(tmp_path, state):
    decision = decide(_run_dir(tmp_path), _job(state), UID)
    assert not decision.requeue and state in decision.reason


def test_a_decided_launcher_is_left_alone(tmp_path):
    assert not decide(_run_dir(tmp_path, final=True), _job(), UID).requeue
    assert "stopped" in decide(_run_dir(tmp_path, stopped="cannot requeue"), _job(), UID).reason


def test_a_job_requeued_since_is_not_requeued_again(tmp_path):
    """The template's wrapper (or anybody) requeued it already: Slurm's restart count moved on."""
    decision = decide(_run_dir(tmp_path, restarts=0), _job(restarts=1), UID)
    assert not decision.requeue and "requeued already" in decision.reason


def test_another_jobs_or_users_run_directory_is_left_alone(tmp_path):
    assert not decide(_run_dir(tmp_path, job_id=7), _job(), UID).requeue
    assert not decide(_run_dir(tmp_path, uid=UID + 1), _job(), UID).requeue
    run = _run_dir(tmp_path)
    (run / "status.json").write_text(json.dumps({"job": 7, "final": False}))
    assert not decide(run, _job(), UID).requeue


def test_symlinked_status_is_not_followed(tmp_path):
    run = _run_dir(tmp_path, final=True)
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps({"job": 42, "final": False}))
    (run / "status.json").unlink()
    (run / "status.json").symlink_to(planted)
    assert read_small_json(run / "status.json") is None
    assert not decide(run, _job(), UID).requeue


def test_a_fifo_does_not_block(tmp_path):
    run = _run_dir(tmp_path)
    (run / "status.json").unlink()
    os.mkfifo(run / "status.json")
    assert read_small_json(run / "status.json") is None  # returns at once: O_NONBLOCK, then not a regular file
    assert not decide(run, _job(), UID).requeue


@pytest.mark.parametrize("content", [b"", b"{", b"[1, 2]", b"\xff\xfe", b"{" + b" " * (2 << 20) + b"}"])
def test_torn_odd_or_huge_files_mean_no_requeue(tmp_path, content):
    run = _run_dir(tmp_path)
    (run / "status.json").write_bytes(content)
    assert not decide(run, _job(), UID).requeue


def test_a_directory_without_an_identity_is_not_ours(tmp_path):
    run = _run_dir(tmp_path)
    (run / "job.json").unlink()
    assert "job.json" in decide(run, _job(), UID).reason


def test_the_run_dir_pointer_round_trips_and_refuses_what_others_could_plant(tmp_path, monkeypatch):
    from nvrx_hpc.core import run_pointer

    home = tmp_path / "tmp-job"
    monkeypatch.setattr(run_pointer, "job_tmp_dir", lambda _uid, _job: home)
    run = tmp_path / "my run"
    run.mkdir()
    run_pointer.write_run_pointer(run, 42)
    assert run_pointer.read_run_pointer(42) == run.resolve()
    assert home.stat().st_mode & 0o777 == 0o700
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text(str(tmp_path) + "\n")
    (home / "run-dir").unlink()
    (home / "run-dir").symlink_to(elsewhere)
    assert run_pointer.read_run_pointer(42) is None  # never through a symlink
    (home / "run-dir").unlink()
    (home / "run-dir").write_text("relative/path\n")
    assert run_pointer.read_run_pointer(42) is None
    (home / "run-dir").write_text(str(run) + "\n")
    home.chmod(0o777)
    assert run_pointer.read_run_pointer(42) is None  # a directory others may write proves nothing
