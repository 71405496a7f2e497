"""Fixtures shared by the cluster tests: one fault-free reference run of examples/train_ckpt.py for every fault test."""

from __future__ import annotations

import subprocess

import pytest
from _faults import final_hash, kinds, submit, transcript, wait_job
from _transcript import record


@pytest.fixture(autouse=True)
def _commands_transcribed(monkeypatch):
    """Every command a cluster test runs lands in the transcript printed when the test fails."""
    real = subprocess.run

    def run(*args, **kwargs):
        return record(real(*args, **kwargs))

    monkeypatch.setattr(subprocess, "run", run)


@pytest.fixture(scope="session")
def ckpt_baseline(cluster, tmp_path_factory) -> str:
    """The final model hash of a fault-free run: 2 nodes x 2 ranks under `nvrx-hpc run`."""
    tmp = tmp_path_factory.mktemp("ckpt-baseline")
    job, run_dir = submit(cluster, tmp, "clean", nodes=2, spares=0)
    result = wait_job(cluster, job)
    assert result["state"] == "COMPLETED", transcript(tmp, "clean")
    assert "launcher.restart" not in kinds(run_dir)
    return final_hash(run_dir)
