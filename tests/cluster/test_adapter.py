"""The Slurm adapter against the real local cluster: queries, drain/resume, requeue, job context.

Every test leaves the cluster as it found it (resumes what it drained, cancels what it submitted).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from nvrx_hpc.slurm.api import JobInfo, NodeInfo, SlurmJobNotFound
from nvrx_hpc.slurm.cli_backend import CliBackend
from nvrx_hpc.slurm.runner import CommandRunner

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")
# spaces, both quotes, ';', '=', '$(...)', a backtick: a shell would mangle all of these
REASON = """nvrx: test drain "xid 79"; it's $(not run) `nor this` a=b"""


def wait_for(what: str, probe: Callable[[], T], done: Callable[[T], bool], timeout: float = 30.0) -> T:
    """Poll `probe` until `done(value)`; fail with the last value after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.2
    while True:
        value = probe()
        if done(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}; last seen: {value!r}")
        time.sleep(delay)
        delay = min(delay * 2, 2.0)


@pytest.fixture
def slurm(cluster) -> CliBackend:
    return CliBackend(CommandRunner(env=cluster.env))


@pytest.fixture
def slurm_text(cluster) -> CliBackend:
    return CliBackend(CommandRunner(env=cluster.env), use_json=False)


def all_idle(nodes: list[NodeInfo]) -> bool:
    return all(n.state == "idle" and not n.flags for n in nodes)


def submit(cluster, *args: str) -> int:
    done = cluster.run(["sbatch", "--parsable", *args], timeout=30)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.strip().split(";")[0])


def cancel(cluster, slurm: CliBackend, job_id: int) -> None:
    cluster.run(["scancel", str(job_id)], timeout=30)

    def state() -> str:
        try:
            return slurm.job(job_id).state
        except SlurmJobNotFound:
            return "GONE"

    wait_for(f"job {job_id} to end", state, lambda s: s not in ("PENDING", "RUNNING", "COMPLETING"))


def test_version_is_2205_or_later(slurm: CliBackend) -> None:
    version = slurm.version()
    assert (version.major, version.minor) >= (22, 5)


def test_list_nodes_shows_all_nodes_idle(cluster, slurm: CliBackend, slurm_text: CliBackend) -> None:
    nodes = wait_for("all nodes idle", slurm.list_nodes, all_idle)
    assert tuple(n.name for n in nodes) == tuple(cluster.nodes)
    assert all(n.usable and n.responding and n.reason is None for n in nodes)
    assert [(n.name, n.state, n.flags) for n in slurm_text.list_nodes()] == [
        (n.name, n.state, n.flags) for n in nodes
    ]


def test_drain_with_a_hostile_reason_then_resume(cluster, slurm: CliBackend, slurm_text: CliBackend) -> None:
    wait_for("n2 idle", lambda: slurm.node("n2"), lambda n: n.state == "idle" and not n.flags)
    try:
        slurm.drain(["n2"], REASON)
        drained = slurm.node("n2")
        assert drained.drained and drained.flags >= {"DRAIN"}
        assert drained.reason == REASON  # byte for byte, through the JSON path
        assert drained.reason_set_by == "root" and drained.reason_time is not None
        assert slurm_text.node("n2").reason == REASON  # and through the text path
        raw = cluster.run(["sinfo", "-h", "-N", "-n", "n2", "-o", "%T|%E"], timeout=30)
        assert raw.stdout.strip() == f"drained|{REASON}", raw.stderr  # what an admin sees
        others = [n for n in slurm.list_nodes() if n.name != "n2"]
        assert not any(n.drained for n in others)
    finally:
        slurm.resume(["n2"])
    back = wait_for("n2 back to idle", lambda: slurm.node("n2"), lambda n: n.state == "idle" and not n.flags)
    assert back.reason is None and back.usable
    slurm.resume(["n2"])  # resuming an idle node is a no-op, not an error


def test_failed_job_reports_exit_code_3(
    cluster, slurm: CliBackend, slurm_text: CliBackend, tmp_path: Path
) -> None:
    done = cluster.run(
        ["sbatch", "--parsable", "--wait", "-N1", "-t1", "-J", "exit three", "-o", str(tmp_path / "%j.out"),
         "--wrap", "echo about to fail; exit 3"],
        timeout=90,
    )  # fmt: skip
    assert done.returncode == 3, done.stderr
    job_id = int(done.stdout.strip().split(";")[0])
    info = wait_for(f"job {job_id} FAILED", lambda: slurm.job(job_id), lambda j: j.finished)
    assert (info.state, info.exit_code, info.signal) == ("FAILED", 3, None)
    assert info.name == "exit three" and info.stdout == str(tmp_path / f"{job_id}.out")
    assert len(info.nodes) == 1 and info.nodes[0] in cluster.nodes
    text = slurm_text.job(job_id)
    assert (text.state, text.exit_code, text.signal, text.nodes) == (info.state, 3, None, info.nodes)
    assert slurm.jobs([job_id, 10**8]).keys() == {job_id}  # client-side filter; unknown ids left out


def test_comment_and_requeue_with_exclusion(
    cluster, slurm: CliBackend, slurm_text: CliBackend, tmp_path: Path
) -> None:
    job_id = submit(
        cluster, "-N1", "-t", "5", "--requeue", "-J", "long one", "-o", str(tmp_path / "%j.out"),
        "--wrap", "echo run ${SLURM_RESTART_COUNT:-0}; sleep 300",
    )  # fmt: skip
    try:
        running = wait_for(f"job {job_id} running", lambda: slurm.job(job_id), lambda j: j.running)
        assert running.restart_count == 0 and running.excluded_nodes == ()
        first_node = running.nodes[0]

        comment = 'nvrx: attempt 1; "quoted" text'
        slurm.set_comment(job_id, comment)
        assert slurm.job(job_id).comment == comment
        assert slurm_text.job(job_id).comment == comment

        exclude = [first_node, "n4" if first_node != "n4" else "n3"]
        slurm.requeue(job_id, exclude=exclude)
        requeued = wait_for(
            f"job {job_id} requeued",
            lambda: slurm.job(job_id),
            lambda j: j.restart_count == 1 and not j.running,
        )
        assert sorted(requeued.excluded_nodes) == sorted(exclude)
        assert requeued.comment == comment  # a requeue keeps the comment
        assert slurm_text.job(job_id).excluded_nodes == requeued.excluded_nodes
        # Released again, not left held: with cred_expire=10 it would rerun ~11 s later, away from `exclude`.
        held = {"job_requeued_in_held_state", "JobHeldAdmin", "JobHeldUser"}
        wait_for(
            f"job {job_id} released", lambda: slurm.job(job_id), lambda j: j.state_reason not in held, 10
        )
    finally:
        cancel(cluster, slurm, job_id)


def test_job_context_inside_srun(cluster, tmp_path: Path) -> None:
    script = (
        "import dataclasses, json; from nvrx_hpc.slurm.api import JobContext; "
        "ctx = JobContext.from_env(required=('job_id', 'node_name', 'procid')); "
        "print(json.dumps(dataclasses.asdict(ctx)))"
    )
    done = cluster.run(
        ["srun", "-N2", "-n2", "-t1", "--quiet", sys.executable, "-c", script],
        timeout=90,
        env={"PYTHONPATH": str(REPO)},
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    contexts = sorted((json.loads(line) for line in done.stdout.splitlines()), key=lambda c: c["procid"])
    assert [c["procid"] for c in contexts] == [0, 1]
    node_list = contexts[0]["node_list"]
    assert len(node_list) == 2 and set(node_list) <= set(cluster.nodes)
    assert [c["node_name"] for c in contexts] == node_list  # block distribution: task i on node i
    for ctx in contexts:
        assert ctx["node_list"] == node_list and ctx["job_id"] == contexts[0]["job_id"]
        assert ctx["num_nodes"] == 2 and ctx["ntasks"] == 2 and ctx["ntasks_per_node"] == 1
        assert ctx["node_id"] == ctx["procid"] and ctx["localid"] == 0
        assert ctx["step_id"] is not None and ctx["restart_count"] == 0
        assert ctx["submit_dir"] == str(tmp_path)


def test_text_and_json_agree_on_the_live_cluster(cluster, slurm: CliBackend, slurm_text: CliBackend) -> None:
    json_jobs: dict[int, JobInfo] = slurm.jobs()
    text_jobs: dict[int, JobInfo] = slurm_text.jobs()
    for job_id in json_jobs.keys() & text_jobs.keys():
        a, b = json_jobs[job_id], text_jobs[job_id]
        if a.state == b.state and a.finished:  # running jobs may change between the two queries
            assert (a.exit_code, a.signal, a.nodes, a.name, a.comment) == (
                b.exit_code,
                b.signal,
                b.nodes,
                b.name,
                b.comment,
            )
