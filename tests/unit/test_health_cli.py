"""`nvrx-hpc health` and `nvrx-hpc cluster inject-gpu-fault|clear-gpu-faults` as real processes (no Slurm needed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict
from pathlib import Path

import pytest

from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.health.sim_faults import FAULT_KEYS, clear, inject, parse_fault, read_faults
from nvrx_hpc.slurm.devcluster import DevClusterSpec, Layout
from nvrx_hpc.slurm.devcluster.files import write_config

REPO = Path(__file__).resolve().parents[2]


def nvrx(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k != "NVRX_GPU_BACKEND"}
    full.update({"PYTHONPATH": str(REPO), **(env or {})})
    return subprocess.run([sys.executable, "-m", "nvrx_hpc", *args], capture_output=True, text=True, timeout=60,
                          env=full, check=False)  # fmt: skip


@pytest.fixture
def state_dir(tmp_path) -> Path:
    """A dev cluster's files (spec, gpu-faults dir) without its daemons: enough for the fault commands."""
    spec = DevClusterSpec(state_dir=tmp_path / "c", nodes=3)
    write_config(spec, Layout(spec.state_dir))
    return spec.state_dir


def test_health_json_on_a_healthy_sim_node(state_dir):
    done = nvrx("health", "--json", "--node", "n2", env={"NVRX_GPU_BACKEND": "sim",
                                                         "NVRX_CLUSTER__STATE_DIR": str(state_dir)})  # fmt: skip
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["node"] == "n2" and report["backend"] == "sim" and report["verdict"] == "ok"
    assert {r["check"] for r in report["results"]} >= {"gpu.xid", "gpu.ecc", "host.shm"}


def test_inject_then_health_is_fatal_then_clear(state_dir):
    env = {"NVRX_CLUSTER__STATE_DIR": str(state_dir)}
    done = nvrx("cluster", "inject-gpu-fault", "n2", "xid=79", "ecc_uncorrected=2@1", "--state-dir", str(state_dir))
    assert done.returncode == 0, done.stderr
    assert "n2: 2 fault(s) injected" in done.stdout
    bad = nvrx("health", "--json", "--node", "n2", "--backend", "sim", env=env)
    assert bad.returncode == 69
    verdicts = {r["check"]: r["verdict"] for r in json.loads(bad.stdout)["results"]}
    assert verdicts["gpu.xid"] == "fatal" and verdicts["gpu.ecc"] == "fatal" and verdicts["gpu.pcie"] == "ok"
    table = nvrx("health", "--table", "--node", "n2", "--backend", "sim", "--check", "gpu.ecc", env=env)
    assert table.returncode == 69 and "GPU 1: 2 uncorrectable ECC errors" in table.stdout
    assert "n2: fatal (GPU backend sim" in table.stdout

    cleared = nvrx("cluster", "clear-gpu-faults", "--state-dir", str(state_dir))
    assert cleared.returncode == 0 and "n2" in cleared.stdout
    assert nvrx("health", "--json", "--node", "n2", "--backend", "sim", env=env).returncode == 0


def test_health_without_gpu_backend_none_and_nvml(state_dir):
    none = nvrx("health", "--json", "--backend", "none")
    assert none.returncode == 0, none.stderr
    gpu = [r for r in json.loads(none.stdout)["results"] if r["check"].startswith("gpu.")]
    assert gpu and all(r["verdict"] == "skip" and "GPU checks are off" in r["detail"] for r in gpu)
    nvml = nvrx("health", "--json", "--backend", "nvml", "--check", "gpu.count")
    assert nvml.returncode == 0
    assert json.loads(nvml.stdout)["results"][0]["detail"].startswith("no GPU/NVML:")


def test_health_usage_errors():
    bad = nvrx("health", "--backend", "cuda")
    assert bad.returncode == 2 and "expected one of nvml, sim, none" in bad.stderr
    both = nvrx("health", "--json", "--table")
    assert both.returncode == 2
    unknown = nvrx("health", "--check", "gpu.nope", "--backend", "none")
    assert unknown.returncode == 2 and "unknown health check gpu.nope" in unknown.stderr
    env_bad = nvrx("health", env={"NVRX_GPU_BACKEND": "cuda"})
    assert env_bad.returncode == 2
    assert "health.gpu_backend = 'cuda' (from environment variable NVRX_GPU_BACKEND) is invalid" in env_bad.stderr


def test_fault_command_errors(state_dir):
    unknown_node = nvrx("cluster", "inject-gpu-fault", "n9", "xid=79", "--state-dir", str(state_dir))
    assert unknown_node.returncode == 2 and "no node n9 in the dev cluster; nodes are n1, n2, n3" in unknown_node.stderr
    bad = nvrx("cluster", "inject-gpu-fault", "n1", "xid=lots", "--state-dir", str(state_dir))
    assert bad.returncode == 2 and "bad GPU fault 'xid=lots'" in bad.stderr


# ---- the fault file format


def test_parse_faults():
    assert asdict(parse_fault("xid=79")) == {"key": "xid", "value": 79, "gpu": 0, "seq": 0, "time": 0.0}
    assert parse_fault("ecc_uncorrected=2@3").gpu == 3
    assert parse_fault("remap_pending=yes").value == 1
    assert parse_fault("hang=gpu.ecc").value == "gpu.ecc"
    assert set(FAULT_KEYS) >= {"xid", "missing", "hang", "raise", "nvlink_down", "clocks"}


@pytest.mark.parametrize("spec", ["xid", "xid=", "nope=1", "ecc_uncorrected=-1", "xid=79@-1", "hang=host.shm",
                                  "clocks=slow", "lost=maybe"])  # fmt: skip
def test_bad_faults(spec):
    with pytest.raises(ConfigError):
        parse_fault(spec)


def test_inject_appends_with_sequence_numbers_and_clear(tmp_path):
    inject(tmp_path, "n1", [parse_fault("xid=79")])
    faults = inject(tmp_path, "n1", [parse_fault("xid=48@1"), parse_fault("temp=90")])
    assert [f.seq for f in faults] == [1, 2, 3] and read_faults(tmp_path / "n1.json") == faults
    assert clear(tmp_path, ["n1", "n2"]) == ["n1"] and read_faults(tmp_path / "n1.json") == []
    (tmp_path / "n3.json").write_text("{not json")
    with pytest.raises(ConfigError, match="clear-gpu-faults"):
        read_faults(tmp_path / "n3.json")
    assert clear(tmp_path) == ["n3"]
