"""The Epilog's attribution never acts as root on the run directory, and its log is opened safely."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from nvrx_hpc.attribution.pipeline import _Budget
from nvrx_hpc.attribution.settings import load_settings
from nvrx_hpc.attribution.trigger import LOG_NAME, run_here, take_lock
from nvrx_hpc.core.as_user import job_user as _job_user
from nvrx_hpc.core.errors import AttributionError

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
REPO = Path(__file__).resolve().parents[2]


def _env(run: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVRX_", "SLURM_"))}
    env.update({"PYTHONPATH": str(REPO), "NVRX_ATTR_CONFIG": "/dev/null", "SLURM_JOB_ID": run.name,
                "SLURMD_NODENAME": "n1", "SLURM_JOB_EXIT_CODE2": "1:0", "NVRX_RUN_DIR": str(run)})  # fmt: skip
    return env


@pytest.mark.parametrize("plant", ["symlink", "fifo"])
def test_a_planted_log_is_neither_followed_nor_waited_on(tmp_path, plant):
    run = Path(shutil.copytree(CORPUS / "application_cuda_oom", tmp_path / "811"))
    victim = tmp_path / "victim"
    if plant == "symlink":
        (run / LOG_NAME).symlink_to(victim)
    else:
        os.mkfifo(run / LOG_NAME)
    started = time.monotonic()
    code = run_here(_env(run), load_settings(_env(run)))
    assert code == 0 and time.monotonic() - started < 60
    assert not victim.exists()  # the symlink's target was never created
    assert (run / "report.json").exists()  # the analysis still ran, without its log


def test_the_lock_is_never_taken_through_a_symlink(tmp_path):
    victim = tmp_path / "victim"
    (tmp_path / ".attribution-0.lock").symlink_to(victim)
    assert take_lock(tmp_path, "0", "n1") is False
    assert not victim.exists()


def test_the_job_user_comes_from_the_epilog_environment():
    assert _job_user({"SLURM_JOB_UID": "0"})[0] == 0
    assert _job_user({}) is None and _job_user({"SLURM_JOB_UID": "x"}) is None


def test_the_budget_holds_when_a_reader_swallows_the_first_timeout():
    caught = 0
    started = time.monotonic()
    with pytest.raises(AttributionError), _Budget(0.2):
        for _ in range(3):  # a file reader that turns the budget's error into "try the next file"
            try:
                while True:
                    time.sleep(0.01)
            except AttributionError:
                caught += 1
        while True:
            time.sleep(0.01)
    assert caught == 3 and time.monotonic() - started < 5
