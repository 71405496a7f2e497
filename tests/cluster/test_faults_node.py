"""`nvrx-hpc run` on real allocations: the job's shape, a whole node lost (F4), the launcher itself killed
(F7), a job the partition can no longer hold, and a run directory that belongs to one job."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

from _faults import (
    SLOW,
    bb_of,
    events,
    final_hash,
    first,
    kill_all,
    kinds,
    processes_of_node,
    revive_node,
    submit,
    train_argv,
    transcript,
    wait_iteration,
    wait_job,
)  # fmt: skip

from nvrx_hpc.core.exit_codes import ExitCode

# A training script the project has never seen: each rank writes what the launcher told it.
UNSEEN = """import os, pathlib
out = pathlib.Path(os.environ["NVRX_RUN_DIR"]) / "seen"
out.mkdir(exist_ok=True)
keys = ("RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "SLURMD_NODENAME", "MASTER_PORT")
(out / ("rank-" + os.environ["RANK"])).write_text(" ".join(os.environ.get(k, "-") for k in keys))
"""


def test_shape_comes_from_the_allocation_and_another_jobs_run_dir_is_set_aside(cluster, tmp_path):
    """`sbatch -N 4 --ntasks-per-node=2` + `nvrx-hpc run --spares 1`: 3 nodes x 2 ranks = world size 6,
    printed in the first line. Asking 3 ranks per node of this allocation is a usage error before anything
    starts. The run directory held another job with the same id (a cluster whose state was reset): its
    state is moved aside, and this job starts fresh (no inherited exclusions or restart count)."""
    run_dir = tmp_path / "shape"
    script = tmp_path / "unseen_train.py"
    script.write_text(UNSEEN)
    run = [sys.executable, "-m", "nvrx_hpc", "run", "--spares", "1", "--run-dir", str(run_dir)]
    body = (
        f"{shlex.join([*run, '--tasks-per-node', '3', '--', sys.executable, str(script)])}\n"
        'echo "usage-exit=$?"\n'
        f"exec {shlex.join([*run, '--', sys.executable, str(script)])}"
    )
    job, _ = submit(cluster, tmp_path, "shape", nodes=3, spares=1, script_body=body, sbatch_args=("--hold",))
    # What an earlier job with this id left behind: two exclusions and five restarts.
    run_dir.mkdir(parents=True)
    stale = {"job_id": int(job), "uid": os.getuid(), "cluster": None, "submit_time": "2001-01-01T00:00:00",
             "restart_count": 0}  # fmt: skip
    (run_dir / "job.json").write_text(json.dumps(stale))
    (run_dir / "launcher-state.json").write_text(json.dumps({"excluded": {"n1": "old", "n2": "old"},
                                                             "restarts_total": 5, "attempts_started": 6}))
    (run_dir / "events.jsonl").write_text('{"kind": "launcher.started", "time": 1}\n')
    assert cluster.run(["scontrol", "release", job], timeout=30).returncode == 0
    assert wait_job(cluster, job, timeout=120)["state"] == "COMPLETED", transcript(tmp_path, "shape")
    out = (tmp_path / "shape.out").read_text()
    lines = out.splitlines()
    assert "usage-exit=2" in out and "need 3 CPUs per node, but this allocation has 2" in out, out
    first_line = next(line for line in lines if line.startswith("nvrx-hpc run: job"))
    assert "3 node(s) x 2 rank(s) = world size 6 + 1 spare node(s)" in first_line, out
    assert "from SLURM_NTASKS_PER_NODE" in first_line
    seen = sorted((run_dir / "seen").iterdir())
    assert len(seen) == 6 and all(p.read_text().split()[1:3] == ["6", "2"] for p in seen), [
        p.read_text() for p in seen
    ]
    assert len({p.read_text().split()[3] for p in seen}) == 3  # three nodes, the fourth held as the spare
    moved = first(run_dir, "launcher.run_dir.previous_job")
    previous = Path(moved["detail"]["moved_to"])
    assert json.loads((previous / "launcher-state.json").read_text())["restarts_total"] == 5
    started = first(run_dir, "launcher.started")
    assert started["detail"]["pool"]["excluded"] == {} and len(started["detail"]["pool"]["active"]) == 3
    assert first(run_dir, "launcher.step.started")["detail"]["restart"] == 0
    assert json.loads((run_dir / "job.json").read_text())["submit_time"] != stale["submit_time"]


def test_f4_node_lost_spare_in_partner_restore(cluster, tmp_path, ckpt_baseline):
    """n2 loses power: its slurmd, its slurmstepds and their tasks die at once, and its burst buffer is
    wiped. The agent link drops, n2 is excluded, the spare n3 takes its ranks, which restore their shards
    from the partner copies on n1, and the job ends with the fault-free hash."""
    job, run_dir = submit(cluster, tmp_path, "f4", nodes=2, spares=1, fault=SLOW)
    try:
        wait_iteration(run_dir, 5)  # the version of step 4 is committed, with its partner copies
        victims = processes_of_node(cluster.state_dir, "n2")
        assert any(b"slurmd" in Path(f"/proc/{p}/cmdline").read_bytes() for p in victims), victims
        kill_all(victims)
        bb = bb_of(cluster, tmp_path, "f4", "n2")
        subprocess.run(["rm", "-rf", str(bb)], timeout=30, check=True)
        assert wait_job(cluster, job)["state"] == "COMPLETED", transcript(tmp_path, "f4")
    finally:
        revive_node(cluster, "n2")
    culprit = first(run_dir, "launcher.culprit")
    assert culprit["node"] == "n2" and culprit["detail"]["finding"] == "agent_lost", culprit
    excluded = first(run_dir, "launcher.node.excluded")
    assert excluded["node"] == "n2" and excluded["detail"]["replaced_by"] == "n3"
    restored = first(run_dir, "ckpt.restored")  # the moved ranks' shards came from their partners on n1
    assert restored["detail"]["sources"] == {"local": 2, "peer": 2} and restored["detail"]["step"] >= 4, restored
    assert final_hash(run_dir) == ckpt_baseline


def _launcher_pid(run_dir: Path) -> int:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"nvrx_hpc" in argv and b"run" in argv and str(run_dir).encode() in argv:
            return int(entry.name)
    raise AssertionError(f"no launcher process for {run_dir}")


def test_f7_launcher_killed_the_template_requeues_and_the_job_resumes(cluster, tmp_path, ckpt_baseline):
    """The script of `nvrx-hpc render` runs the launcher as its child; the launcher is SIGKILLed mid-run:
    the script requeues the job, whose second run continues the same run directory and resumes from the
    last committed checkpoint to the fault-free hash."""
    run_dir = tmp_path / "f7"
    render = subprocess.run(
        [sys.executable, "-m", "nvrx_hpc", "render", "--nodes", "2", "--tasks-per-node", "2", "--time", "5",
         "--run-dir", str(run_dir), "--python", sys.executable, "--", *train_argv(cluster, tmp_path, "f7")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert render.returncode == 0, render.stderr
    script = tmp_path / "f7.sbatch"
    script.write_text(render.stdout)
    run_dir.mkdir()  # Slurm opens the job's output there (`nvrx-hpc submit` would have made it)
    done = cluster.run(["sbatch", "--parsable", "--nodelist=n1,n2", str(script)], timeout=30,
                       env={"NVRX_TEST_FAULT": SLOW})  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    wait_iteration(run_dir, 5)
    os.kill(_launcher_pid(run_dir), signal.SIGKILL)
    result = wait_job(cluster, job, timeout=300)
    out = (run_dir / f"slurm-{job}.out").read_text()
    assert result["state"] == "COMPLETED" and result["restarts"] == 1, out
    assert "the launcher was killed by signal 9; requeueing" in out
    assert kinds(run_dir).count("launcher.started") == 2 and "launcher.run_dir.previous_job" not in kinds(run_dir)
    second = [e for e in events(run_dir) if e["kind"] == "launcher.step.started"][-1]
    assert second["detail"]["restart"] == 1  # its own attempt number, though the first launcher never ended
    restored = [e for e in events(run_dir) if e["kind"] == "ckpt.restored"]
    assert restored and restored[-1]["detail"]["step"] >= 4, restored
    assert final_hash(run_dir) == ckpt_baseline


def test_f7_site_mode_launcher_killed_the_epilog_requeues_and_the_job_resumes(cluster, tmp_path, ckpt_baseline):
    """Site mode, the user's own script (no template wrapper): `exec nvrx-hpc run` in an `sbatch --nvrx`
    job, the launcher SIGKILLed mid-run. The job fails undecided; the Epilog's detached check (as the job's
    user) sees the launcher's status not final and requeues it; the second run continues the run directory
    and resumes from the last committed checkpoint to the fault-free hash."""
    job, run_dir = submit(cluster, tmp_path, "f7site", nodes=2, spares=0, fault=SLOW, run_args=("--mode", "site"),
                          sbatch_args=("--nvrx",))  # fmt: skip
    wait_iteration(run_dir, 5)
    os.kill(_launcher_pid(run_dir), signal.SIGKILL)
    deadline = time.monotonic() + 120
    while cluster.dev.backend.job(job).restart_count < 1:  # FAILED first, then requeued by the Epilog
        assert time.monotonic() < deadline, transcript(tmp_path, "f7site")
        time.sleep(0.5)
    result = wait_job(cluster, job, timeout=300)
    assert result["state"] == "COMPLETED" and result["restarts"] == 1, transcript(tmp_path, "f7site")
    requeued = first(run_dir, "epilog.requeue")
    assert "not final" in requeued["reason"] and requeued["source"] == "epilog", requeued
    assert kinds(run_dir).count("launcher.started") == 2 and "launcher.run_dir.previous_job" not in kinds(run_dir)
    restored = [e for e in events(run_dir) if e["kind"] == "ckpt.restored"]
    assert restored and restored[-1]["detail"]["step"] >= 4, restored
    assert final_hash(run_dir) == ckpt_baseline
    # Its second run ended decided: the Epilog after it requeues nothing.
    time.sleep(3)
    assert kinds(run_dir).count("epilog.requeue") == 1 and cluster.dev.backend.job(job).restart_count == 1


def test_a_job_the_partition_cannot_hold_stops_instead_of_pending_forever(cluster, tmp_path):
    """A 4-node job on the 4-node cluster loses a node to exclusion (--exclude-after 1) with no spare: a
    requeue excluding it could never start, so the launcher stops with DO_NOT_REQUEUE and says why, and
    `nvrx-hpc status` shows it."""
    job, run_dir = submit(cluster, tmp_path, "strand", nodes=4, spares=0, tasks_per_node=1,
                          fault="crash:rank=1:step=3", run_args=("--exclude-after", "1"))  # fmt: skip
    result = wait_job(cluster, job)
    assert result["exit_code"] == int(ExitCode.DO_NOT_REQUEUE) and result["restarts"] == 0, transcript(
        tmp_path, "strand")
    capacity = first(run_dir, "launcher.capacity")
    assert capacity["detail"]["needed"] == 4 and len(capacity["detail"]["usable"]) == 3
    stop = first(run_dir, "launcher.stop")
    assert stop["detail"]["stranded"] is True and stop["reason"].startswith("cannot requeue: partition")
    assert "launcher.requeue" not in kinds(run_dir)
    status = subprocess.run([sys.executable, "-m", "nvrx_hpc", "status", job, "--run-dir", str(run_dir)],
                            capture_output=True, text=True, timeout=30)  # fmt: skip
    assert status.returncode == 0 and "outcome: stop: cannot requeue" in status.stdout, status


def test_a_requeue_the_partition_cannot_hold_at_full_size_shrinks_when_min_nodes_allows(cluster, tmp_path):
    """A 4-node job on the 4-node cluster, --min-nodes 3: a crash on n2 (--exclude-after 1) shrinks it to 3
    nodes in place; then Slurm's time-limit warning asks for a requeue. A requeue of 4 nodes excluding n2
    could never start, so the launcher asks Slurm for 3 (NumNodes) and the requeued job runs on them."""
    job, run_dir = submit(cluster, tmp_path, "shrinkq", nodes=4, spares=0, tasks_per_node=1,
                          fault="crash:rank=1:step=3,slow:step=1:restart=1",
                          run_args=("--exclude-after", "1", "--min-nodes", "3"), train_args=("--scheme", "none"))
    deadline = time.monotonic() + 180
    while "launcher.decision.shrink" not in kinds(run_dir) or "launcher.step.first_iteration" not in kinds(
            run_dir)[kinds(run_dir).index("launcher.decision.shrink"):]:  # fmt: skip
        assert time.monotonic() < deadline, transcript(tmp_path, "shrinkq")
        time.sleep(0.5)
    warn = cluster.run(["scancel", "--batch", "--signal=USR1", job], timeout=30)
    assert warn.returncode == 0, warn.stderr
    result = wait_job(cluster, job, timeout=300)
    assert result["state"] == "COMPLETED" and result["restarts"] == 1, transcript(tmp_path, "shrinkq")
    capacity = first(run_dir, "launcher.capacity")
    assert capacity["detail"]["needed"] == 4 and capacity["detail"]["excluded"] == ["n2"], capacity
    assert first(run_dir, "launcher.requeue.shrunk")["detail"]["nodes"] == 3
    info = cluster.dev.backend.job(job)
    assert len(info.nodes) == 3 and "n2" not in info.nodes and "n2" in info.excluded_nodes, info
    second = [e for e in events(run_dir) if e["kind"] == "launcher.started"][-1]
    assert second["detail"]["world_size"] == 3 and "n2" not in second["detail"]["nodes"], second


def test_two_jobs_sharing_a_first_node_each_get_their_own_rendezvous_port(cluster, tmp_path):
    """Two jobs run at once with the same first node (n1, one core each): each attempt's MASTER_PORT is
    picked free on the batch host, so both rendezvous succeed (a fixed 29500 + restart collided)."""
    jobs = [
        submit(cluster, tmp_path, name, nodes=1, spares=0, tasks_per_node=1, fault=SLOW, steps=6,
               sbatch_args=("--nodelist=n1",), train_args=("--scheme", "none"))
        for name in ("port-a", "port-b")
    ]  # fmt: skip
    for (job, run_dir), name in zip(jobs, ("port-a", "port-b"), strict=True):
        assert wait_job(cluster, job)["state"] == "COMPLETED", transcript(tmp_path, name)
        assert kinds(run_dir).count("launcher.step.started") == 1
    starts = [first(run_dir, "launcher.step.started")["time"] for _, run_dir in jobs]
    ends = [first(run_dir, "launcher.step.ended")["time"] for _, run_dir in jobs]
    assert max(starts) < min(ends), "the two trainings did not overlap"
