"""The Epilog trigger without Slurm: failure detection from the Epilog's variables, run-directory lookup,
one winner of the per-job lock among many nodes, a detached analysis that leaves its report, and
fail-open on anything unexpected."""

from __future__ import annotations

import json
import multiprocessing
import os
import shutil
import time
from pathlib import Path

import pytest

from nvrx_hpc.attribution.trigger import LOG_NAME, find_run_dir, job_failed, take_lock, trigger_from_epilog

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("env", "failed"),
    [
        ({"SLURM_JOB_EXIT_CODE": "0", "SLURM_JOB_EXIT_CODE2": "0:0"}, False),
        ({"SLURM_JOB_EXIT_CODE": "256", "SLURM_JOB_EXIT_CODE2": "1:0"}, True),
        ({"SLURM_JOB_EXIT_CODE2": "0:9"}, True),
        ({"SLURM_JOB_DERIVED_EC": "0:0", "SLURM_JOB_EXIT_CODE": "0"}, False),
        ({"SLURM_JOB_DERIVED_EC": "137"}, True),
        ({}, None),
        ({"SLURM_JOB_EXIT_CODE2": "garbage"}, None),
    ],
)
def test_job_failed(env, failed):
    assert job_failed(env) is failed


def test_find_run_dir(tmp_path, monkeypatch):
    from nvrx_hpc.attribution import trigger

    pointed: dict[str, Path] = {}  # what launchers recorded on this node (/tmp/nvrx-<uid>-<job>/run-dir)
    monkeypatch.setattr(trigger, "read_run_pointer", pointed.get)
    run = tmp_path / "nvrx-runs" / "31"
    run.mkdir(parents=True)
    assert find_run_dir({"NVRX_RUN_DIR": str(run)}, "31") == run
    assert find_run_dir({"SPANK_NVRX_RUN_DIR": str(run)}, "31") == run
    assert find_run_dir({"NVRX_RUN_DIR": str(tmp_path / "absent")}, "31") is None
    assert find_run_dir({"SLURM_JOB_WORK_DIR": str(tmp_path), "NVRX_CONFIG": "/dev/null"}, "31") == run
    assert find_run_dir({"SLURM_JOB_WORK_DIR": str(tmp_path)}, "32") is None
    pointed["32"] = run  # a --run-dir of the user's choice: found through the launcher's pointer
    assert find_run_dir({"SLURM_JOB_WORK_DIR": str(tmp_path)}, "32") == run
    pointed["31"] = tmp_path  # an older job's pointer never wins over the template's directory
    assert find_run_dir({"SLURM_JOB_WORK_DIR": str(tmp_path), "NVRX_CONFIG": "/dev/null"}, "31") == run


def _race(run_dir: str, node: str, results) -> None:
    results.put((node, take_lock(Path(run_dir), "0", node)))


def test_exactly_one_node_wins_the_lock(tmp_path):
    ctx = multiprocessing.get_context("fork")
    results = ctx.Queue()
    procs = [ctx.Process(target=_race, args=(str(tmp_path), f"n{i}", results)) for i in range(8)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(10)
    winners = [node for node, won in (results.get(timeout=5) for _ in procs) if won]
    assert len(winners) == 1
    assert json.loads((tmp_path / ".attribution-0.lock").read_text())["node"] == winners[0]
    assert take_lock(tmp_path, "1", "n9")  # a requeued run (restart 1) gets its own analysis


def _epilog_env(run: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NVRX_", "SLURM_"))}
    env.update({"PYTHONPATH": str(REPO), "NVRX_ATTR_CONFIG": "/dev/null", "SLURM_JOB_ID": run.name,
                "SLURM_JOB_UID": str(os.getuid()),
                "SLURMD_NODENAME": "n1", "SLURM_JOB_EXIT_CODE2": "1:0", "NVRX_RUN_DIR": str(run)})  # fmt: skip
    env.update(extra)
    return env


def test_trigger_starts_one_detached_analysis_that_writes_the_report(tmp_path):
    run = Path(shutil.copytree(CORPUS / "application_cuda_oom", tmp_path / "808"))
    started = time.monotonic()
    for node in ("n1", "n2", "n3"):
        trigger_from_epilog(_epilog_env(run, SLURMD_NODENAME=node))
    assert time.monotonic() - started < 15, "the Epilog must not wait for the analysis"
    deadline = time.monotonic() + 60
    while not (run / "report.html").exists():
        assert time.monotonic() < deadline, (run / LOG_NAME).read_text()
        time.sleep(0.2)
    time.sleep(0.3)
    report = json.loads((run / "report.json").read_text())
    assert report["job_id"] == "808" and report["category"] == "application" and report["culprit"]["ranks"] == [1]
    assert [p.name for p in run.glob(".attribution-*.lock")] == [".attribution-0.lock"]


def test_trigger_does_nothing_for_a_good_job_or_without_a_run_dir(tmp_path):
    run = Path(shutil.copytree(CORPUS / "application_cuda_oom", tmp_path / "809"))
    trigger_from_epilog(_epilog_env(run, SLURM_JOB_EXIT_CODE2="0:0", SLURM_JOB_EXIT_CODE="0"))
    trigger_from_epilog(_epilog_env(run, NVRX_ATTR_EPILOG_ENABLED="false"))
    trigger_from_epilog(_epilog_env(run, NVRX_RUN_DIR=str(tmp_path / "absent")))
    assert not list(run.glob(".attribution-*"))


def test_trigger_fails_open(tmp_path, caplog):
    run = Path(shutil.copytree(CORPUS / "application_cuda_oom", tmp_path / "810"))
    trigger_from_epilog(_epilog_env(run, NVRX_ATTR_POST_RETRIES="many"))  # a bad setting: logged, no raise
    trigger_from_epilog({})  # no job id at all
    run.chmod(0o500)
    try:
        trigger_from_epilog(_epilog_env(run))  # unwritable run dir (root ignores the mode; then it just runs)
    finally:
        run.chmod(0o700)
    assert "could not start the attribution" in caplog.text
