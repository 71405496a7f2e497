"""Fixtures shared by the cluster tests: one fault-free reference run of examples/train_ckpt.py for every fault test."""

from __future__ import annotations

import subprocess

import pytest
from _faults import final_hash, kinds, revive_node, submit, transcript, wait_job
from _transcript import record

from nvrx_hpc.slurm.devcluster.processes import is_alive


@pytest.fixture(autouse=True)
def _commands_transcribed(monkeypatch):
    """Every command a cluster test runs lands in the transcript printed when the test fails."""
    real = subprocess.run

    def run(*args, **kwargs):
        return record(real(*args, **kwargs))

    monkeypatch.setattr(subprocess, "run", run)


@pytest.fixture(autouse=True)
def _no_node_left_dead(request):
    """A test that loses a node must bring it back. One that leaves a slurmd dead is named here (an error at
    its teardown) and the node is revived, so the tests after it run on four nodes instead of failing in turn."""
    yield
    if "cluster" not in request.fixturenames:
        return
    cluster = request.getfixturevalue("cluster")
    daemons = cluster.dev.manifest.load()
    dead = [p.name.removeprefix("slurmd-") for p in daemons if p.name.startswith("slurmd-") and not is_alive(p)]
    for node in dead:
        revive_node(cluster, node)
    if dead:
        pytest.fail(f"the test left the slurmd of {', '.join(dead)} dead; revived for the tests after it")


@pytest.fixture(scope="session")
def ckpt_baseline(cluster, tmp_path_factory) -> str:
    """The final model hash of a fault-free run: 2 nodes x 2 ranks under `nvrx-hpc run`."""
    tmp = tmp_path_factory.mktemp("ckpt-baseline")
    job, run_dir = submit(cluster, tmp, "clean", nodes=2, spares=0)
    result = wait_job(cluster, job)
    assert result["state"] == "COMPLETED", transcript(tmp, "clean")
    assert "launcher.restart" not in kinds(run_dir)
    return final_hash(run_dir)
