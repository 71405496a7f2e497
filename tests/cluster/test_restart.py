"""`nvrx-hpc run` on the real local cluster: real sbatch allocations, srun steps, SPANK plugin, agents,
and a real 4-rank PyTorch gloo training that checkpoints through nvrx_hpc.ckpt (examples/train_ckpt.py).
Each fault is injected for real and the final model hash must equal the fault-free run's (`ckpt_baseline`,
one reference run shared by every fault test)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
from _faults import SLOW, events, final_hash, first, kinds, sim_xid79, submit, transcript, wait_iteration, wait_job
from _hook_log import hook_records

from nvrx_hpc.core.exit_codes import ExitCode


def _culprits(run_dir) -> list[dict]:
    """The culprit of each failed attempt: `launcher.culprit`, or the flight recorder's `launcher.culprit.refined`."""
    found: list[dict] = []
    for event in events(run_dir):
        if event["kind"] == "launcher.culprit":
            found.append(event)
        elif event["kind"] == "launcher.culprit.refined":
            found[-1] = event
    return found


def test_f1_f2_crash_then_hang_without_spares_restart_in_place_and_finish(cluster, tmp_path, ckpt_baseline):
    """More faults than spares on healthy nodes: a rank SIGKILLed, then (on the restart) a rank SIGSTOPped.
    Both are software faults on nodes whose health checks pass: each restarts in place, no node is
    excluded, and the job finishes with the fault-free hash."""
    job, run_dir = submit(cluster, tmp_path, "f1f2", nodes=2, spares=0,
                          fault="crash:rank=3:step=5,hang:rank=1:step=7:restart=1",
                          run_args=("--heartbeat-timeout", "4"))  # fmt: skip
    assert wait_job(cluster, job)["state"] == "COMPLETED", transcript(tmp_path, "f1f2")
    culprits = _culprits(run_dir)
    assert [c["rank"] for c in culprits] == [3, 1], culprits
    assert "signal 9" in culprits[0]["reason"] and culprits[1]["detail"].get("finding", "hung") == "hung"
    judged = [e for e in events(run_dir) if e["kind"] == "launcher.node.judged"]
    assert [(j["detail"]["row"], j["detail"]["exclude"]) for j in judged] == [("software", False)] * 2
    checks = [e for e in events(run_dir) if e["kind"] == "launcher.node.health_check"]
    assert len(checks) == 2 and all(c["detail"]["ok"] for c in checks)
    assert "launcher.node.excluded" not in kinds(run_dir)
    starts = [e["detail"]["nodes"] for e in events(run_dir) if e["kind"] == "launcher.step.started"]
    assert len(starts) == 3 and starts[0] == starts[1] == starts[2]  # in place, on the same nodes
    assert list((run_dir / "stacks").glob("rank-1*")), "the hung rank's stacks were not collected"
    assert "resumed from step" in (run_dir / "logs" / "step-1.log").read_text()
    assert final_hash(run_dir) == ckpt_baseline


def test_f3_rank_stuck_inside_a_collective_is_named_from_flight_recorder_dumps(cluster, tmp_path, ckpt_baseline):
    """Rank 2 stops inside the all-reduce section before its call: every rank is then in a communication
    section, so the sections cannot tell; the flight-recorder dumps the agents took at hang time can
    (the others started collective N, rank 2 did not), and the launcher names rank 2 online."""
    job, run_dir = submit(cluster, tmp_path, "f3", nodes=2, spares=1, fault="stuckin:rank=2:step=5",
                          run_args=("--heartbeat-timeout", "4"))  # fmt: skip
    assert wait_job(cluster, job)["state"] == "COMPLETED", transcript(tmp_path, "f3")
    assert list((run_dir / "fr").glob("rank-*.restart-0.pkl")), "no flight-recorder dump taken at hang time"
    culprit = first(run_dir, "launcher.culprit")
    assert culprit["detail"]["unsure"] is True
    refined = [e for e in events(run_dir) if e["kind"] == "launcher.culprit.refined"]
    named = refined[0]["rank"] if refined else culprit["rank"]
    assert named == 2, (culprit, refined, first(run_dir, "launcher.attribution"))
    assert final_hash(run_dir) == ckpt_baseline


def test_f6_node_agent_killed_excludes_the_node(cluster, tmp_path, ckpt_baseline):
    job, run_dir = submit(cluster, tmp_path, "f6", nodes=2, spares=1, fault=SLOW)
    victim = wait_iteration(run_dir, 3)["agents"]["n2"]["pid"]
    live = subprocess.run([sys.executable, "-m", "nvrx_hpc", "status", job, "--run-dir", str(run_dir), "--json"],
                          capture_output=True, text=True, timeout=30)  # fmt: skip
    assert live.returncode == 0, live.stderr
    view = json.loads(live.stdout)
    assert sorted(view["ranks"]) == ["0", "1", "2", "3"] and view["pool"]["spares"] == ["n3"]
    assert {r["node"] for r in view["ranks"].values()} == {"n1", "n2"}
    assert "agent" in " ".join(psutil.Process(victim).cmdline())
    os.kill(victim, signal.SIGKILL)
    assert wait_job(cluster, job)["state"] == "COMPLETED", transcript(tmp_path, "f6")
    culprit = first(run_dir, "launcher.culprit")
    assert culprit["node"] == "n2" and "agent" in culprit["reason"]
    judged = first(run_dir, "launcher.node.judged")
    assert judged["detail"]["row"] == "agent-lost" and judged["detail"]["exclude"] is True
    excluded = first(run_dir, "launcher.node.excluded")
    assert excluded["node"] == "n2" and excluded["detail"]["replaced_by"] == "n3"
    assert final_hash(run_dir) == ckpt_baseline


def test_f6_node_agent_stopped_goes_silent_and_its_node_is_excluded(cluster, tmp_path, ckpt_baseline):
    """A node that loses power sends no TCP reset: its agent's link stays up and goes quiet. A SIGSTOPped agent
    does the same; silent past `agent_silent_s` (15 s) it counts as lost and its node goes."""
    job, run_dir = submit(cluster, tmp_path, "f6s", nodes=2, spares=1, fault=SLOW,
                          train_args=("--step-time", "1.5"))  # still training when the silence counts  # fmt: skip
    victim = wait_iteration(run_dir, 3)["agents"]["n2"]["pid"]
    assert "agent" in " ".join(psutil.Process(victim).cmdline())
    os.kill(victim, signal.SIGSTOP)
    assert wait_job(cluster, job)["state"] == "COMPLETED", transcript(tmp_path, "f6s")
    culprit = first(run_dir, "launcher.culprit")
    assert culprit["node"] == "n2" and "silent for" in culprit["reason"], culprit
    assert first(run_dir, "launcher.node.excluded")["detail"]["replaced_by"] == "n3"
    assert final_hash(run_dir) == ckpt_baseline


def test_f11_failure_without_progress_stops_with_do_not_requeue(cluster, tmp_path):
    job, run_dir = submit(cluster, tmp_path, "f11", nodes=1, spares=1, fault="noprogress:step=4",
                          run_args=("--max-no-progress", "2", "--max-restarts", "5"),
                          train_args=("--scheme", "none"))  # one training node: no partner to copy to  # fmt: skip
    result = wait_job(cluster, job)
    assert result["exit_code"] == int(ExitCode.DO_NOT_REQUEUE), transcript(tmp_path, "f11")
    stop = first(run_dir, "launcher.stop")
    assert "no training progress in 2" in stop["reason"]
    assert kinds(run_dir).count("launcher.step.started") == 3
    assert "launcher.requeue" not in kinds(run_dir)
    status = subprocess.run([sys.executable, "-m", "nvrx_hpc", "status", job, "--run-dir", str(run_dir)],
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    assert status.returncode == 0 and "outcome: stop: no training progress" in status.stdout, status


def test_a_bug_in_the_training_stops_at_once_without_excluding_a_node(cluster, tmp_path):
    """A Python exception in one rank: attribution says the workload is at fault and a restart cannot help,
    so the job stops with do-not-requeue after one attempt, and no healthy node is excluded."""
    job, run_dir = submit(cluster, tmp_path, "bug", nodes=2, spares=1, fault="raise:rank=2:step=3")
    result = wait_job(cluster, job)
    assert result["exit_code"] == int(ExitCode.DO_NOT_REQUEUE), transcript(tmp_path, "bug")
    verdict = first(run_dir, "launcher.attribution")
    assert verdict["detail"]["category"] == "application" and verdict["detail"]["restartable"] is False
    assert 2 in verdict["detail"]["ranks"]
    stop = first(run_dir, "launcher.stop")
    assert stop["reason"].startswith("not restartable (application)") and "ValueError" in stop["reason"]
    assert kinds(run_dir).count("launcher.step.started") == 1 and "launcher.node.excluded" not in kinds(run_dir)


def test_site_mode_attaches_the_prolog_agents_and_drains_the_culprit(cluster, tmp_path, ckpt_baseline):
    """sbatch --nvrx: each node's Prolog starts the job's agent, `nvrx-hpc run --mode site` attaches them,
    drains the culprit with an `nvrx:` reason (here: a node behind a failure with --exclude-after 1), and
    each Epilog stops its agent."""
    job, run_dir = submit(cluster, tmp_path, "site", nodes=2, spares=1, fault="exit:rank=0:step=5:code=3",
                          run_args=("--mode", "site", "--exclude-after", "1"), sbatch_args=("--nvrx",))
    try:
        assert wait_job(cluster, job)["state"] == "COMPLETED", transcript(tmp_path, "site")
        culprit = first(run_dir, "launcher.culprit")
        node = cluster.dev.backend.node(culprit["node"])
        assert node.drained and node.reason.startswith("nvrx: n1 behind 1 failures"), node.reason
        assert final_hash(run_dir) == ckpt_baseline
    finally:
        cluster.dev.backend.resume(["n1", "n2", "n3"])
    site = first(run_dir, "launcher.agents.site")
    assert sorted(site["detail"]["attached"]) == ["n1", "n2", "n3"] and site["detail"]["missing"] == []
    records = hook_records(cluster, job)
    started = {r["node"]: r["site_agent"]["pid"] for r in records if r["hook"] == "prolog"}
    assert started == site["detail"]["attached"], "the launcher attached other agents than the Prologs started"
    deadline = time.monotonic() + 30  # the Epilogs run after the job's end
    while len([r for r in hook_records(cluster, job) if r["hook"] == "epilog"]) < 3:
        assert time.monotonic() < deadline, hook_records(cluster, job)
        time.sleep(0.5)
    for record in (r for r in hook_records(cluster, job) if r["hook"] == "epilog"):
        assert record["site_agent"]["pid"] == started[record["node"]]
        assert record["site_agent"]["outcome"] in ("stopped", "gone"), record
        assert _ended(started[record["node"]])


def _ended(pid: int) -> bool:
    """Gone, or a zombie its new parent has not reaped yet."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def test_site_mode_without_prolog_agents_starts_its_own(cluster, tmp_path, ckpt_baseline):
    """--mode site for a job submitted without --nvrx: no Prolog started agents, so the launcher does."""
    job, run_dir = submit(cluster, tmp_path, "site-own", nodes=2, spares=0, run_args=("--mode", "site"))
    assert wait_job(cluster, job)["state"] == "COMPLETED", transcript(tmp_path, "site-own")
    site = first(run_dir, "launcher.agents.site")
    missing = site["detail"]["missing"]
    assert site["detail"]["attached"] == {} and len(missing) == 2
    assert all("the Prolog started no agent" in site["detail"]["why"][n] for n in missing)
    assert final_hash(run_dir) == ckpt_baseline


def test_f5_sim_xid79_during_a_run_excludes_the_node(cluster, tmp_path, ckpt_baseline):
    """Simulated GPU (sim backend, chosen explicitly): an Xid 79 on n2 mid-run -> n2 out, spare in."""
    job, run_dir = submit(cluster, tmp_path, "f5", nodes=2, spares=1, fault=SLOW, run_args=("--health-interval", "1"),
                          env_line="export NVRX_HEALTH__GPU_BACKEND=sim\n")
    wait_iteration(run_dir, 3)
    with sim_xid79(cluster, job, "n2"):
        assert wait_job(cluster, job)["state"] == "COMPLETED", transcript(tmp_path, "f5")
    culprit = first(run_dir, "launcher.culprit")
    assert culprit["node"] == "n2" and culprit["detail"]["finding"] == "health" and "79" in culprit["reason"]
    judged = first(run_dir, "launcher.node.judged")
    assert judged["detail"]["row"] == "health" and judged["detail"]["exclude"] is True
    excluded = [e for e in events(run_dir) if e["kind"] == "launcher.node.excluded"]
    assert [e["node"] for e in excluded] == ["n2"]
    assert final_hash(run_dir) == ckpt_baseline


def test_time_limit_warning_checkpoints_requeues_and_finishes(cluster, tmp_path, ckpt_baseline):
    """Slurm's B:USR1 warning (sent here with scancel): ranks checkpoint and exit, the job is requeued
    (exit 94) and its second run resumes to the same final model, in the same run directory."""
    job, run_dir = submit(cluster, tmp_path, "usr1", nodes=2, spares=0, fault=SLOW)
    wait_iteration(run_dir, 3)
    signal_batch = cluster.run(["scancel", "--batch", "--signal=USR1", job], timeout=30)
    assert signal_batch.returncode == 0, signal_batch.stderr
    assert wait_job(cluster, job, timeout=240)["state"] == "COMPLETED", transcript(tmp_path, "usr1")
    assert "launcher.time_limit_warning" in kinds(run_dir) and "launcher.requeue" in kinds(run_dir)
    assert cluster.dev.backend.job(job).restart_count == 1
    assert "launcher.run_dir.previous_job" not in kinds(run_dir)  # a requeue continues its own run dir
    assert kinds(run_dir).count("launcher.started") == 2
    assert final_hash(run_dir) == ckpt_baseline
