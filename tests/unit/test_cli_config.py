"""`nvrx-hpc config show|check`: table, --json alone on stdout, sources, and errors with exit code 2."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from nvrx_hpc.cli.config import app
from nvrx_hpc.core import config as config_mod
from nvrx_hpc.core.config import config_keys
from nvrx_hpc.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def clean_env(tmp_path, monkeypatch):
    """No site file and no NVRX_* variables from the machine running the tests."""
    monkeypatch.setattr(config_mod, "DEFAULT_CONFIG_PATH", tmp_path / "absent" / "config.toml")
    for name in list(os.environ):
        if name.startswith("NVRX_"):
            monkeypatch.delenv(name)


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), env=env)


def test_show_prints_every_key_value_and_source():
    result = invoke("show")
    assert result.exit_code == 0, result.output
    assert "config file: none (defaults)" in result.stdout
    for key in config_keys():
        assert key in result.stdout
    assert "/run/nvrx/%j/agent-%n.sock" in result.stdout
    assert "default" in result.stdout


def test_show_json_is_one_object_alone_on_stdout(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text("[launcher]\nspares = 2\n")
    result = invoke(
        "show",
        "--json",
        "--config",
        str(site),
        "--set",
        "cluster.nodes=8",
        env={"NVRX_SLURM__BACKEND": "pyslurm"},
    )
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert list(data) == config_keys()
    assert data["cluster.nodes"] == {"value": 8, "source": "flag"}
    assert data["slurm.backend"] == {"value": "pyslurm", "source": "env:NVRX_SLURM__BACKEND"}
    assert data["launcher.spares"] == {"value": 2, "source": f"file:{site}"}
    assert data["cluster.ctld_port"] == {"value": 16817, "source": "default"}


def test_show_table_names_the_file(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text("[cluster]\nnodes = 3\n")
    result = invoke("show", "--config", str(site))
    assert f"config file: {site}" in result.stdout
    assert f"file:{site}" in result.stdout


def test_show_reads_nvrx_config(tmp_path):
    site = tmp_path / "site.toml"
    site.write_text("[cluster]\nnodes = 3\n")
    data = json.loads(invoke("show", "--json", env={"NVRX_CONFIG": str(site)}).stdout)
    assert data["cluster.nodes"] == {"value": 3, "source": f"file:{site}"}


def test_check_ok():
    result = invoke("check")
    assert result.exit_code == 0
    assert result.stdout.startswith("config ok (no config file; 0 of ")


def test_check_raises_config_error_for_the_top_level_handler(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[cluster]\nnode = 8\n")
    result = invoke("check", "--config", str(bad))
    assert isinstance(result.exception, ConfigError)
    assert "did you mean 'cluster.nodes'?" in result.exception.message


def test_bad_set_item_is_a_config_error():
    result = invoke("show", "--set", "cluster.nodes")
    assert isinstance(result.exception, ConfigError)
    result = invoke("show", "--set", "cluster.nodes=0")
    assert isinstance(result.exception, ConfigError)
    assert "cluster.nodes = '0' (from the command line) is invalid" in result.exception.message


def nvrx(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NVRX_")}
    return subprocess.run(
        [sys.executable, "-m", "nvrx_hpc", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={**clean, "PYTHONPATH": str(REPO), **(env or {})},
    )


def test_end_to_end_bad_file_exits_2_with_message_and_hint(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("[cluster]\nnode = 8\n")
    done = nvrx("config", "check", "--config", str(bad))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.startswith(
        f"error: unknown config key 'cluster.node' in {bad}; did you mean 'cluster.nodes'?"
    )
    assert "hint: `nvrx-hpc config show` lists every key" in done.stderr
    assert "Traceback" not in done.stderr


def test_end_to_end_bad_env_and_ok(tmp_path):
    done = nvrx("config", "check", "--config", str(tmp_path / "missing.toml"))
    assert done.returncode == 2 and "(from --config) does not exist" in done.stderr
    empty = tmp_path / "empty.toml"
    empty.write_text("")
    done = nvrx("config", "check", "--config", str(empty), env={"NVRX_CLUSTER__NODES": "100"})
    assert done.returncode == 2
    assert "error: cluster.nodes = '100' (from environment variable NVRX_CLUSTER__NODES)" in done.stderr
    good = tmp_path / "good.toml"
    good.write_text("[cluster]\nnodes = 8\n")
    done = nvrx("config", "show", "--json", "--config", str(good))
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["cluster.nodes"]["value"] == 8
