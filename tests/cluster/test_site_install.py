"""From the installed wheel only: `nvrx-hpc cluster up` (plugin built from the packaged sources, hooks run
from the venv), then `nvrx-hpc site install` into a prefix, `site check`, a rerun that changes nothing, the
prefix's own plugin loaded by srun, a broken install caught by the check, and `--uninstall`."""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from pathlib import Path

import pytest

# Own ports inside this checkout's test block, after the shared test cluster's slurmds (base .. base+3).
_BASE = int(os.environ.get("NVRX_TEST_SLURMD_PORT_BASE", "16941"))
CTLD_PORT, SLURMD_PORT = _BASE + 8, _BASE + 9
STATE_DIR = Path(os.environ.get("NVRX_TEST_CLUSTER_DIR", "/tmp/nvrx-test-cluster") + "-wheel")


def _transcript(done) -> str:
    return f"argv: {done.args}\nrc: {done.returncode}\nstdout:\n{done.stdout[-3000:]}\nstderr:\n{done.stderr[-3000:]}"


def _need_slurm() -> None:
    missing = [p for p in ("slurmctld", "slurmd", "munged", "srun", "make", "gcc") if shutil.which(p) is None]
    if missing:
        if os.environ.get("NVRX_REQUIRE_CLUSTER") == "1":
            pytest.fail(f"missing {missing}")
        pytest.skip(f"missing {missing}")


@pytest.fixture(scope="module")
def wheel_cluster(wheel_env):
    """A one-node dev cluster brought up by the venv's `nvrx-hpc cluster up`; its client env."""
    _need_slurm()
    argv = ["nvrx-hpc", "cluster", "up", "--nodes", "1", "--state-dir", STATE_DIR, "--ctld-port", CTLD_PORT,
            "--slurmd-port-base", SLURMD_PORT, "--timeout", "120", "--json"]
    up = wheel_env.run(argv, timeout=300)
    try:
        assert up.returncode == 0, _transcript(up)
        status = json.loads(up.stdout)
        assert status["running"] and [n["name"] for n in status["nodes"]] == ["n1"], status
        env = json.loads(wheel_env.run(["nvrx-hpc", "cluster", "env", "--state-dir", STATE_DIR, "--json"]).stdout)
        yield env
    finally:
        down = wheel_env.run(["nvrx-hpc", "cluster", "down", "--state-dir", STATE_DIR, "--keep-munge"], timeout=120)
        assert down.returncode == 0, _transcript(down)


def test_cluster_up_from_the_wheel_builds_the_packaged_plugin_and_runs_its_hooks(wheel_env, wheel_cluster):
    plugin = STATE_DIR / "plugin" / "nvrx_spank.so"
    assert plugin.is_file()
    helped = wheel_env.run(["srun", "--help"], env=wheel_cluster, timeout=30)
    assert "--nvrx" in helped.stdout + helped.stderr, _transcript(helped)
    ran = wheel_env.run(["srun", "-N1", "--nvrx", "--time=1", "true"], env=wheel_cluster, timeout=120)
    assert ran.returncode == 0, _transcript(ran)
    hooks = STATE_DIR / "log" / "hooks.jsonl"
    deadline = time.monotonic() + 60
    records: list[dict] = []
    while time.monotonic() < deadline:  # the Epilog lands a moment after srun returns
        records = [json.loads(line) for line in hooks.read_text().splitlines()] if hooks.exists() else []
        if {"prolog", "epilog"} <= {r["hook"] for r in records}:
            break
        time.sleep(0.5)
    assert {"prolog", "epilog"} <= {r["hook"] for r in records}, records
    wrapper = (STATE_DIR / "etc" / "prolog.sh").read_text()
    assert f"{wheel_env.venv}/bin/python -m nvrx_hpc prolog" in wrapper, wrapper  # the venv's code, no checkout


def test_site_install_check_rerun_and_uninstall_on_the_local_cluster(wheel_env, wheel_cluster, tmp_path):
    prefix = tmp_path / "root"
    prefix.mkdir()
    install = ["nvrx-hpc", "site", "install", "--prefix", prefix, "--json"]
    first = wheel_env.run(install, env=wheel_cluster, timeout=300)
    assert first.returncode == 0, _transcript(first)
    report = json.loads(first.stdout)
    assert {f["action"] for f in report["files"]} == {"written"}, report
    prolog = prefix / "etc" / "nvrx-hpc" / "prolog"
    assert f"exec {wheel_env.venv}/bin/python -m nvrx_hpc prolog" in prolog.read_text()
    assert os.access(prolog, os.X_OK)
    slurm_etc = prefix / Path(wheel_cluster["SLURM_CONF"]).parent.relative_to("/")  # that of $SLURM_CONF
    entry = (slurm_etc / "plugstack.conf.d" / "nvrx.conf").read_text()
    assert f"required {prefix}/usr/local/lib/nvrx-hpc/nvrx_spank.so agent_socket=" in entry
    # The dev cluster runs its own hooks, so Slurm still lacks this prefix's Prolog line, among others.
    assert f"Prolog={prefix}/etc/nvrx-hpc/prolog" in report["slurm_conf_lines"]
    assert f"PlugStackConfig={slurm_etc}/plugstack.conf" in report["slurm_conf_lines"]

    again = wheel_env.run(install, env=wheel_cluster, timeout=300)
    assert again.returncode == 0, _transcript(again)
    assert {f["action"] for f in json.loads(again.stdout)["files"]} == {"unchanged"}, again.stdout

    # The prefix's own plugin loads: srun with a copy of slurm.conf whose plugstack is the prefix's.
    conf = Path(wheel_cluster["SLURM_CONF"])
    text = "".join(
        f"PlugStackConfig={slurm_etc}/plugstack.conf\n" if line.startswith("PlugStackConfig=") else line
        for line in conf.read_text().splitlines(keepends=True)
    )
    (tmp_path / "slurm.conf").write_text(text)
    helped = wheel_env.run(["srun", "--help"], env={**wheel_cluster, "SLURM_CONF": str(tmp_path / "slurm.conf")})
    assert "[nvrx]" in helped.stdout + helped.stderr, _transcript(helped)

    check = wheel_env.run(["nvrx-hpc", "site", "check", "--prefix", prefix, "--json"], env=wheel_cluster)
    lines = {c["name"]: c for c in json.loads(check.stdout)["checks"]}
    assert check.returncode == 0, _transcript(check)
    for name in ("slurm", "plugin.file", "plugin.plugstack", "plugin.loadable", "prolog", "epilog", "versions",
                 "config", "socket.dir", "bb.dir"):
        assert lines[name]["status"] == "ok", lines[name]
    assert lines["nvml"]["status"] in ("ok", "warn") and lines["nvml"]["detail"], lines["nvml"]

    # A broken install is caught, with its fix, and a rerun repairs exactly that file.
    (prefix / "usr" / "local" / "lib" / "nvrx-hpc" / "nvrx_spank.so").unlink()
    broken = wheel_env.run(["nvrx-hpc", "site", "check", "--prefix", prefix], env=wheel_cluster)
    assert broken.returncode == 69, _transcript(broken)
    assert "fail  plugin.file" in broken.stdout and "nvrx-hpc site install" in broken.stdout, broken.stdout
    repaired = json.loads(wheel_env.run(install, env=wheel_cluster, timeout=300).stdout)
    actions = {Path(f["path"]).name: f["action"] for f in repaired["files"]}
    assert actions["nvrx_spank.so"] == "written" and actions["prolog"] == "unchanged", actions
    (prefix / "usr" / "local" / "lib" / "nvrx-hpc" / "nvrx_spank.so").write_bytes(b"\x7fELF not ours")
    swapped = wheel_env.run(["nvrx-hpc", "site", "check", "--prefix", prefix, "--json"], env=wheel_cluster)
    lines = {c["name"]: c for c in json.loads(swapped.stdout)["checks"]}
    assert swapped.returncode == 69 and lines["versions"]["status"] == "fail", lines["versions"]
    assert "not the plugin site install built" in lines["versions"]["detail"]
    repaired = json.loads(wheel_env.run(install, env=wheel_cluster, timeout=300).stdout)
    assert {Path(f["path"]).name: f["action"] for f in repaired["files"]}["nvrx_spank.so"] == "replaced"

    # An admin's edit survives both a rerun and the uninstall; everything else goes.
    config = prefix / "etc" / "nvrx-hpc" / "config.toml"
    config.write_text(config.read_text() + "\n# site edit\n")
    rerun = json.loads(wheel_env.run(install, env=wheel_cluster, timeout=300).stdout)
    assert {Path(f["path"]).name: f["action"] for f in rerun["files"]}["config.toml"] == "kept"
    gone = wheel_env.run(["nvrx-hpc", "site", "install", "--uninstall", "--prefix", prefix], env=wheel_cluster)
    assert gone.returncode == 0, _transcript(gone)
    left = sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*") if p.is_file())
    assert left == ["etc/nvrx-hpc/config.toml"], left


def test_site_check_on_the_test_cluster_finds_the_plugin_plugstack_names(cluster):
    """No manifest (the dev cluster is set up by `cluster up`, not site install): the check follows plugstack."""
    if cluster.spank_plugin is None:
        pytest.skip("the SPANK plugin is not built here")
    done = cluster.run([sys.executable, "-m", "nvrx_hpc", "site", "check", "--json"], timeout=120,
                       env={"NVRX_CONFIG": "/dev/null"})
    lines = {c["name"]: c for c in json.loads(done.stdout)["checks"]}
    assert lines["plugin.file"]["status"] == "ok" and str(cluster.spank_plugin) in lines["plugin.file"]["detail"]
    for name in ("slurm", "plugin.plugstack", "plugin.loadable", "prolog", "epilog"):
        assert lines[name]["status"] == "ok", lines[name]
    assert lines["prolog.flags"]["status"] == "warn" and "Alloc" in lines["prolog.flags"]["fix"]
    assert lines["versions"]["status"] == "warn" and "no install manifest" in lines["versions"]["detail"]
