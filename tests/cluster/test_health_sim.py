"""The health gate on the real local cluster, with simulated GPUs (`sim` backend) and injected faults.

The dev cluster's Prolog/Epilog wrappers export NVRX_HEALTH__GPU_BACKEND=sim, and slurm.conf has
SchedulerParameters=nohold_on_prolog_fail, as docs/health.md advises sites. Every test restores
what it changed (faults cleared, nodes resumed, jobs cancelled) in a finally block.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest
from _hook_log import hook_records

from nvrx_hpc.slurm.api import SlurmJobNotFound
from nvrx_hpc.slurm.cli_backend import CliBackend

pytestmark = pytest.mark.slurm

T = TypeVar("T")
REPO = Path(__file__).resolve().parents[2]


def wait_for(what: str, probe: Callable[[], T], done: Callable[[T], bool], timeout: float = 60.0) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if done(value):
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout:g} s waiting for {what}; last seen: {value!r}")
        time.sleep(0.5)


def nvrx(cluster, *args: str, env: dict[str, str] | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    """The real CLI against the test cluster."""
    full_env = {**os.environ, **cluster.env, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "nvrx_hpc", *args], env=full_env, capture_output=True, text=True,
                          timeout=timeout, check=False)  # fmt: skip


def job_state(slurm: CliBackend, job_id: int) -> str:
    try:
        return slurm.job(job_id).state
    except SlurmJobNotFound:
        return "GONE"


def restore(cluster, slurm: CliBackend, nodes: list[str], jobs: list[int]) -> None:
    """Cancel `jobs`, clear every injected fault, resume `nodes` if drained or down (whoever drained them)."""
    for job in jobs:
        cluster.run(["scancel", str(job)], timeout=30)
    nvrx(cluster, "cluster", "clear-gpu-faults", "--state-dir", str(cluster.state_dir))
    for node in nodes:
        info = slurm.node(node)
        if info.drained or info.down:
            slurm.resume([node])
    for job in jobs:
        wait_for(f"job {job} to end", lambda j=job: job_state(slurm, j), lambda s: s not in ("PENDING", "RUNNING"))
    # A resumed node is "idle*" for about a second; later tests expect every node plainly idle.
    wait_for(f"{', '.join(nodes)} idle", slurm.list_nodes,
             lambda ns: all(n.state == "idle" and not n.flags for n in ns if n.name in nodes))  # fmt: skip


@pytest.fixture
def slurm(cluster) -> CliBackend:
    wrapper = (cluster.state_dir / "etc" / "prolog.sh").read_text()
    conf = cluster.conf_path.read_text()
    if "NVRX_HEALTH__GPU_BACKEND=sim" not in wrapper or "nohold_on_prolog_fail" not in conf:
        pytest.fail(f"the test cluster at {cluster.state_dir} was started by an older nvrx-hpc (no sim backend in "
                    "its Prolog or no nohold_on_prolog_fail); restart it: nvrx-hpc cluster down --state-dir ... "
                    "--keep-munge, then rerun")  # fmt: skip
    backend = cluster.dev.backend
    wait_for("all nodes idle", backend.list_nodes, lambda ns: all(n.usable and n.state == "idle" for n in ns))
    return backend


def test_sim_fatal_xid_on_n2_prolog_drains_and_job_runs_elsewhere(cluster, slurm, tmp_path) -> None:
    jobs: list[int] = []
    try:
        done = nvrx(cluster, "cluster", "inject-gpu-fault", "n2", "xid=79", "--state-dir", str(cluster.state_dir))
        assert done.returncode == 0, done.stderr
        # Fill n1 so that the scheduler's first choice for the next job is n2.
        busy = cluster.run(["sbatch", "--parsable", "-w", "n1", "-n", "2", "-o", "/dev/null", "--wrap", "sleep 300"])
        assert busy.returncode == 0, busy.stderr
        jobs.append(int(busy.stdout.split(";")[0]))
        wait_for("n1 busy", lambda: job_state(slurm, jobs[0]), lambda s: s == "RUNNING")

        out = tmp_path / "job-%j.out"
        sub = cluster.run(["sbatch", "--parsable", "-N1", "-n2", "-t", "2", "-o", str(out),
                           "--wrap", "echo ran on $SLURMD_NODENAME"])  # fmt: skip
        assert sub.returncode == 0, sub.stderr
        job = int(sub.stdout.split(";")[0])
        jobs.append(job)
        final = wait_for(f"job {job} to complete", lambda: slurm.job(job), lambda j: j.finished, timeout=90)

        assert final.state == "COMPLETED", final
        assert "n2" not in final.nodes and final.nodes, final
        assert final.restart_count >= 1, "the job should have been requeued once, after n2's Prolog failed"
        ran_on = (tmp_path / f"job-{job}.out").read_text().strip()
        assert ran_on == f"ran on {final.nodes[0]}"

        n2 = slurm.node("n2")
        assert n2.drained, n2
        assert n2.reason.startswith("nvrx: gpu.xid: Xid 79 on GPU 0"), n2.reason
        prologs = [r for r in hook_records(cluster, job) if r["hook"] == "prolog"]
        on_n2 = [r for r in prologs if r["node"] == "n2"]
        assert on_n2 and on_n2[0]["health"]["action"] == "drained", prologs
        assert on_n2[0]["health"]["exit_code"] == 94
        elsewhere = [r for r in prologs if r["node"] == final.nodes[0]]
        assert elsewhere and elsewhere[-1]["health"]["action"] == "pass", prologs
    finally:
        restore(cluster, slurm, ["n2"], jobs)


def test_sim_admin_drain_is_never_undrained_by_us(cluster, slurm) -> None:
    admin_reason = "maintenance: PSU swap (ticket 42)"
    node_env = {"SLURMD_NODENAME": "n3", "NVRX_GPU_BACKEND": "sim"}
    try:
        slurm.drain(["n3"], admin_reason)
        nvrx(cluster, "cluster", "inject-gpu-fault", "n3", "xid=79", "--state-dir", str(cluster.state_dir))

        refused = nvrx(cluster, "node", "undrain", "n3", "--yes")
        assert refused.returncode == 2, refused
        assert "only undrains nodes whose reason starts with 'nvrx:'" in refused.stderr
        assert "hint: if you are sure" in refused.stderr

        # A fatal re-check keeps the admin's reason; a passing one with --undrain does not resume.
        fatal = nvrx(cluster, "node", "recheck", "--undrain", "--json", env=node_env)
        assert fatal.returncode == 69, fatal
        assert json.loads(fatal.stdout)["action"] == "left-alone"
        nvrx(cluster, "cluster", "clear-gpu-faults", "n3", "--state-dir", str(cluster.state_dir))
        passed = nvrx(cluster, "node", "recheck", "--undrain", "--json", env=node_env)
        assert passed.returncode == 0, passed
        assert json.loads(passed.stdout)["action"] == "pass"

        info = slurm.node("n3")
        assert info.drained and info.reason == admin_reason, info
    finally:
        restore(cluster, slurm, ["n3"], [])


def test_sim_node_drain_list_undrain_round_trip(cluster, slurm) -> None:
    try:
        drained = nvrx(cluster, "node", "drain", "n4", "--reason", "GPU 3 runs hot", "--yes")
        assert drained.returncode == 0, drained
        assert slurm.node("n4").reason == "nvrx: manual: GPU 3 runs hot"
        listed = {row["node"]: row for row in json.loads(nvrx(cluster, "node", "list", "--json").stdout)}
        assert listed["n4"]["owner"] == "nvrx" and listed["n1"]["owner"] == ""

        refused = nvrx(cluster, "node", "undrain", "n4")  # no TTY here, no --yes
        assert refused.returncode == 2 and "without --yes" in refused.stderr

        resumed = nvrx(cluster, "node", "undrain", "n4", "--yes")
        assert resumed.returncode == 0, resumed
        assert "n4: resumed (was: nvrx: manual: GPU 3 runs hot)" in resumed.stdout
        wait_for("n4 idle", lambda: slurm.node("n4"), lambda n: not n.drained)
    finally:
        restore(cluster, slurm, ["n4"], [])


def test_sim_prolog_stays_in_budget_when_a_check_hangs(cluster, slurm) -> None:
    try:
        nvrx(cluster, "cluster", "inject-gpu-fault", "n4", "hang=gpu.ecc", "--state-dir", str(cluster.state_dir))
        start = time.monotonic()
        run = cluster.run(["srun", "--quiet", "-w", "n4", "-N1", "-t", "1", "printenv", "SLURM_JOB_ID"], timeout=60)
        took = time.monotonic() - start
        assert run.returncode == 0, run.stderr
        assert took < 30, f"srun took {took:.1f} s; the Prolog budget is 10 s, the hung check never returns"
        record = next(r for r in hook_records(cluster, int(run.stdout.strip())) if r["hook"] == "prolog")
        health = record["health"]
        assert health["timed_out"] == ["gpu.ecc"], health
        assert health["action"] == "pass" and health["exit_code"] == 0
        assert health["duration_s"] <= 10.0
        hung = next(f for f in health["findings"] if f["check"] == "gpu.ecc")
        assert hung["verdict"] == "error" and "timed out" in hung["detail"]
        assert not slurm.node("n4").drained
    finally:
        restore(cluster, slurm, ["n4"], [])


def test_sim_check_that_crashes_fails_open(cluster, slurm) -> None:
    try:
        nvrx(cluster, "cluster", "inject-gpu-fault", "n3", "raise=gpu.temperature", "--state-dir",
             str(cluster.state_dir))  # fmt: skip
        run = cluster.run(["srun", "--quiet", "-w", "n3", "-N1", "-t", "1", "printenv", "SLURM_JOB_ID"], timeout=60)
        assert run.returncode == 0, run.stderr
        record = next(r for r in hook_records(cluster, int(run.stdout.strip())) if r["hook"] == "prolog")
        crashed = next(f for f in record["health"]["findings"] if f["check"] == "gpu.temperature")
        assert crashed["verdict"] == "error" and "check crashed: RuntimeError" in crashed["detail"]
        assert record["health"]["action"] == "pass" and record["health"]["exit_code"] == 0
        assert not slurm.node("n3").drained
    finally:
        restore(cluster, slurm, ["n3"], [])
