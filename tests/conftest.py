"""Shared fixtures. `cluster` brings up a real local Slurm cluster (munge, slurmctld, 4 slurmd) once per session."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from _transcript import TRANSCRIPT

from nvrx_hpc.slurm.devcluster import DevCluster, DevClusterSpec
from nvrx_hpc.slurm.devcluster.files import read_spec, spec_to_json

REPO = Path(__file__).resolve().parent.parent
SPANK_DIR = REPO / "spank"
# Own directory and ports, so the tests never touch a demo cluster (16817) or a site Slurm (6817).
TEST_CLUSTER_DIR = Path(os.environ.get("NVRX_TEST_CLUSTER_DIR", "/tmp/nvrx-test-cluster"))
TEST_CTLD_PORT = int(os.environ.get("NVRX_TEST_CTLD_PORT", "16837"))
TEST_SLURMD_PORT_BASE = int(os.environ.get("NVRX_TEST_SLURMD_PORT_BASE", "16941"))


@dataclass(frozen=True)
class ClusterHandle:
    """What a cluster test needs: merge `env` over os.environ for every srun/sbatch/scontrol."""

    dev: DevCluster
    env: dict[str, str]
    conf_path: Path
    state_dir: Path
    nodes: tuple[str, ...]
    spank_plugin: Path | None

    def run(self, argv: list[str], timeout: float = 60, **kwargs) -> subprocess.CompletedProcess:
        """Run a Slurm client command against this cluster, with a mandatory timeout."""
        env = {**os.environ, **self.env, **kwargs.pop("env", {})}
        return subprocess.run(argv, env=env, timeout=timeout, capture_output=True, text=True, **kwargs)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.when == "setup":
        TRANSCRIPT.clear()
    if report.failed and TRANSCRIPT:
        report.sections.append(("command transcript", "\n\n".join(TRANSCRIPT[-20:])))


def pytest_collection_modifyitems(config, items):
    for item in items:
        if "tests/cluster/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.slurm)


def _missing_slurm() -> list[str]:
    return [p for p in ("slurmctld", "slurmd", "munged", "srun", "sbatch") if shutil.which(p) is None]


@pytest.fixture(scope="session")
def cluster() -> ClusterHandle:
    missing = _missing_slurm()
    if missing:
        message = f"Slurm is not installed (missing {', '.join(missing)}); run `make test` or apt-get install slurm-wlm"
        if os.environ.get("NVRX_REQUIRE_CLUSTER") == "1":
            pytest.fail(message)
        pytest.skip(message)
    plugin = None
    if (SPANK_DIR / "Makefile").exists():
        subprocess.run(["make", "-s", "-C", str(SPANK_DIR)], check=True, timeout=120)
        plugin = SPANK_DIR / "nvrx_spank.so"
    spec = DevClusterSpec(
        state_dir=TEST_CLUSTER_DIR,
        nodes=4,
        ctld_port=TEST_CTLD_PORT,
        slurmd_port_base=TEST_SLURMD_PORT_BASE,
        spank_plugin=plugin,
    )
    dev = DevCluster(spec)
    recorded = read_spec(dev.layout)
    if recorded is not None and spec_to_json(recorded) != spec_to_json(spec):
        # The test cluster belongs to the tests: one left by another checkout (other plugin path) is replaced.
        dev.down(stop_munge=False)
    started_here = not dev.is_running()
    dev.up(timeout=90)
    yield ClusterHandle(
        dev=dev,
        env=dev.env,
        conf_path=dev.layout.slurm_conf,
        state_dir=dev.layout.root,
        nodes=spec.node_names,
        spank_plugin=plugin,
    )
    if started_here and os.environ.get("NVRX_TEST_KEEP_CLUSTER") != "1":
        dev.down(stop_munge=False)


# ---- the package as a site installs it: a wheel in a fresh venv, no checkout on sys.path ----------------


@dataclass(frozen=True)
class WheelEnv:
    """A venv holding only the wheel built from this tree; `run` calls its programs from a temp cwd."""

    venv: Path
    wheel: Path
    sdist: Path
    cwd: Path

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        env["PATH"] = f"{self.venv / 'bin'}:{env.get('PATH', '/usr/bin:/bin')}"
        return env

    def run(self, argv: list[str], timeout: float = 120, env: dict[str, str] | None = None):
        """Run argv (its PATH starts with the venv's bin, so `nvrx-hpc` and `python` are the venv's)."""
        return subprocess.run([str(a) for a in argv], cwd=self.cwd, env={**self.env, **(env or {})},
                              capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="session")
def wheel_env(tmp_path_factory) -> WheelEnv:
    """sdist from this tree, the wheel built from that sdist (so the sdist is proven complete), then a venv.

    --system-site-packages reuses the dependencies already installed (nothing big is downloaded); the venv's
    own site-packages comes first on sys.path, ahead of any editable install of a checkout.
    """
    root = tmp_path_factory.mktemp("wheel")
    dist = root / "dist"
    code = f"from setuptools import build_meta as b; print(b.build_sdist({str(dist)!r}))"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    sdist = dist / done.stdout.strip().splitlines()[-1]
    done = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                           "--wheel-dir", str(dist), str(sdist)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    wheel = next(dist.glob("nvrx_hpc-*.whl"))
    venv = root / "venv"
    # No pip inside the venv (seconds saved): this interpreter's pip installs into it with --python.
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(venv)], check=True,
                   timeout=120)
    done = subprocess.run([sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"), "install", "-q",
                           "--no-deps", "--no-index", "--force-reinstall", "--disable-pip-version-check", str(wheel)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    cwd = root / "cwd"
    cwd.mkdir()
    return WheelEnv(venv=venv, wheel=wheel, sdist=sdist, cwd=cwd)
