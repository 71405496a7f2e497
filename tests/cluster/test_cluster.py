"""The local dev cluster, for real: munge, slurmctld and 4 slurmd on this host."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from nvrx_hpc.slurm.devcluster import DevCluster, DevClusterSpec


def nvrx(*args: str, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "nvrx_hpc", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )


def test_four_nodes_idle_in_status_json(cluster):
    done = nvrx("cluster", "status", "--state-dir", str(cluster.state_dir), "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["running"] is True
    assert [n["name"] for n in status["nodes"]] == ["n1", "n2", "n3", "n4"]
    assert {n["state"] for n in status["nodes"]} <= {"idle", "mixed", "allocated"}
    assert {d["name"] for d in status["daemons"]} >= {"slurmctld", "slurmd-n1", "slurmd-n4"}


def test_srun_runs_on_all_four_nodes(cluster):
    plain = cluster.run(["srun", "-N4", "-t1", "hostname"], timeout=60)
    assert plain.returncode == 0, plain.stderr
    assert len(plain.stdout.split()) == 4
    # Every virtual node has the same hostname; SLURMD_NODENAME tells them apart.
    names = cluster.run(["srun", "-N4", "-t1", "--label", "printenv", "SLURMD_NODENAME"], timeout=60)
    assert names.returncode == 0, names.stderr
    assert sorted(line.split(": ")[1] for line in names.stdout.splitlines()) == ["n1", "n2", "n3", "n4"]


def test_sbatch_wait_returns_the_job_exit_code(cluster, tmp_path):
    ok = tmp_path / "ok.sh"
    ok.write_text(f"#!/bin/bash\nsrun -N2 -t1 touch {tmp_path}/ran-$SLURM_JOB_ID-\\$SLURMD_NODENAME\n")
    done = cluster.run(["sbatch", "--wait", "--parsable", "-N2", "-t1", "-o", str(tmp_path / "ok.out"), str(ok)])
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().split(";")[0]
    assert len(list(tmp_path.glob(f"ran-{job}-*"))) >= 1
    bad = tmp_path / "bad.sh"
    bad.write_text("#!/bin/bash\nexit 3\n")
    failed = cluster.run(["sbatch", "--wait", "-t1", "-o", str(tmp_path / "bad.out"), str(bad)])
    assert failed.returncode == 3


def test_prolog_and_epilog_run_nvrx_hpc_on_each_node(cluster):
    # -w: a node still COMPLETING the previous test's job (its Epilog re-checks after a failure) is waited for.
    done = cluster.run(["srun", "-N2", "-w", "n1,n2", "-t1", "printenv", "SLURM_JOB_ID"], timeout=60)
    assert done.returncode == 0, done.stderr
    job = done.stdout.split()[0]
    hook_log = cluster.state_dir / "log" / "hooks.jsonl"
    expected = {(hook, node) for hook in ("prolog", "epilog") for node in ("n1", "n2")}
    deadline = time.monotonic() + 20  # the epilog runs after srun has returned
    mine: list[dict] = []
    while time.monotonic() < deadline:
        records = [json.loads(r) for r in hook_log.read_text().splitlines()] if hook_log.exists() else []
        mine = [r for r in records if r.get("job") == job]
        if {(r["hook"], r["node"]) for r in mine} == expected:
            break
        time.sleep(0.2)
    assert {(r["hook"], r["node"]) for r in mine} == expected
    assert {r["context"] for r in mine} == {"prolog_slurmd", "epilog_slurmd"}


def test_up_is_idempotent_and_env_points_at_the_cluster(cluster):
    before = {p.name: p.pid for p in cluster.dev.manifest.load()}
    started = time.monotonic()
    again = nvrx(
        "cluster", "up", "--state-dir", str(cluster.state_dir), "--ctld-port", str(cluster.dev.spec.ctld_port),
        "--slurmd-port-base", str(cluster.dev.spec.slurmd_port_base), "--json",
        *(["--spank", str(cluster.spank_plugin)] if cluster.spank_plugin else ["--no-spank"]),
    )
    assert again.returncode == 0, again.stderr
    assert time.monotonic() - started < 20
    assert {p.name: p.pid for p in cluster.dev.manifest.load()} == before
    env = nvrx("cluster", "env", "--state-dir", str(cluster.state_dir))
    assert f"export SLURM_CONF={cluster.conf_path}" in env.stdout.splitlines()


def test_up_with_other_settings_on_a_running_cluster_is_refused(cluster):
    other = nvrx(
        "cluster", "up", "--state-dir", str(cluster.state_dir), "--nodes", "2", "--no-spank",
        "--ctld-port", str(cluster.dev.spec.ctld_port), "--slurmd-port-base", str(cluster.dev.spec.slurmd_port_base),
    )
    assert other.returncode == 69
    assert "other settings is running" in other.stderr
    assert "hint: stop it with `nvrx-hpc cluster down`" in other.stderr
    assert cluster.dev.is_running()


def test_up_on_ports_in_use_fails_before_starting_anything(cluster, tmp_path):
    taken = nvrx(
        "cluster", "up", "--state-dir", str(tmp_path / "clash"), "--nodes", "1", "--no-spank",
        "--ctld-port", str(cluster.dev.spec.ctld_port), "--slurmd-port-base", "16991",
    )
    assert taken.returncode == 69
    assert f"port {cluster.dev.spec.ctld_port} is in use" in taken.stderr
    assert not (tmp_path / "clash" / "pids" / "started.json").exists()
    assert cluster.dev.is_running()


def test_down_stops_exactly_what_it_started(cluster, tmp_path):
    """A second one-node cluster on other ports: `down` stops its daemons and leaves the test cluster alone."""
    state = tmp_path / "second"
    spec = DevClusterSpec(state_dir=state, nodes=1, ctld_port=16877, slurmd_port_base=16981)
    second = DevCluster(spec)
    try:
        second.up(timeout=60)
        pids = [p.pid for p in second.manifest.load() if p.name != "munged"]
        assert len(pids) == 2
        done = nvrx("cluster", "down", "--state-dir", str(state), "--keep-munge")
        assert done.returncode == 0, done.stderr
        assert "stopped 2 daemons" in done.stdout
        assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    finally:
        second.down(stop_munge=False)
    assert cluster.dev.is_running()
    assert nvrx("cluster", "status", "--state-dir", str(state)).returncode == 69
    assert cluster.run(["srun", "-N1", "-t1", "true"]).returncode == 0


def test_state_dir_keeps_per_node_dirs(cluster):
    for node in cluster.nodes:
        assert (cluster.state_dir / "etc" / node / "mpi.conf").read_text().startswith("PMIxCliTmpDirBase=")
        assert Path(cluster.state_dir / "bb" / node).is_dir()
