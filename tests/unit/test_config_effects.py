"""Every config key changes behaviour: set through its NVRX_* variable, it changes what the code that consumes
it builds (the launcher's RunSettings, the checkpointer's settings, the GPU backend, the Slurm backend, ...);
and its field is read somewhere outside the config module, so no key is documented and read by nothing."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from nvrx_hpc.ckpt.settings import CheckpointSettings
from nvrx_hpc.cli.hooks import hook_log_path
from nvrx_hpc.core import config as config_mod
from nvrx_hpc.core.config import ResolvedConfig, config_keys, default_value, env_var_name, load_config
from nvrx_hpc.health.backends import open_gpu_backend
from nvrx_hpc.health.monitor import HealthMonitor
from nvrx_hpc.health.policy import DEFAULT_POLICY_FILE
from nvrx_hpc.launcher import orphan
from nvrx_hpc.launcher.settings import RunSettings
from nvrx_hpc.slurm.backend import get_backend

PACKAGE = Path(__file__).resolve().parents[2] / "nvrx_hpc"

# A value other than the default for each key, as its environment variable would carry it.
CHANGED = {
    "cluster.state_dir": "/tmp/elsewhere", "cluster.nodes": "2", "cluster.cpus_per_node": "4",
    "cluster.ctld_port": "17817", "cluster.slurmd_port_base": "17901",
    "slurm.backend": "pyslurm", "slurm.command_timeout_s": "3",
    "agent.socket": "/tmp/s/%j/%n.sock", "agent.bb_dir": "/tmp/bb/%j", "agent.record_dir": "/tmp/records",
    "agent.heartbeat_timeout_s": "60",  # the default value, set by hand: calibration goes off
    "agent.initial_timeout_s": "30", "agent.calibration_floor_s": "2",
    "launcher.spares": "1", "launcher.max_restarts": "9", "launcher.max_no_progress": "5", "launcher.min_nodes": "2",
    "launcher.run_dir": "/scratch/{job_id}", "launcher.mode": "site", "launcher.section_timeouts": "ckpt=60",
    "launcher.stop_grace_s": "1", "launcher.health_interval_s": "0", "launcher.exclude_after": "1",
    "launcher.exclude_window_s": "60", "launcher.attribution": "false", "launcher.epilog_requeue": "false",
    "launcher.standby": "true",
    "health.gpu_backend": "none", "health.prolog_budget_s": "2", "health.policy_file": str(DEFAULT_POLICY_FILE),
    "health.hook_log": "/tmp/hooks.jsonl",
    "attribution.post": "file", "attribution.engine": "python", "attribution.file_path": "/tmp/r.jsonl",
    "attribution.webhook_url": "http://h", "attribution.webhook_token": "t", "attribution.slack_url": "http://s",
    "attribution.service_url": "http://v", "attribution.service_token": "t", "attribution.service_token_file": "/t",
    "attribution.post_timeout_s": "1", "attribution.post_retries": "0", "attribution.post_backoff_s": "1",
    "attribution.epilog_enabled": "false", "attribution.epilog_budget_s": "9",
    "attribution.epilog_slurm_timeout_s": "1",
    "attribution.serve_host": "0.0.0.0", "attribution.serve_port": "9000", "attribution.serve_db": "/tmp/a.db",
    "attribution.serve_max_body_bytes": "2048", "attribution.drain_after": "1", "attribution.drain_window_days": "1",
    "ckpt.shared_dir": "/tmp/shared", "ckpt.scheme": "xor", "ckpt.set_size": "4", "ckpt.keep": "3",
    "ckpt.drain_every": "2", "ckpt.drain_bandwidth_mib_s": "10", "ckpt.drain_keep": "1", "ckpt.chunk_mib": "8",
    "ckpt.wait_timeout_s": "5", "ckpt.reprotect": "false",
    "straggler.enabled": "false", "straggler.threshold": "0.6", "straggler.window_s": "2",
    "straggler.windows": "5", "straggler.exclude_at_restart": "true",
    "inprocess.enabled": "true", "inprocess.spare_ranks": "1", "inprocess.soft_timeout_s": "2",
    "inprocess.hard_timeout_s": "20", "inprocess.pg_timeout_s": "10", "inprocess.max_restarts": "3",
    "inprocess.refill_max": "0",
    "logging.level": "debug",
}  # fmt: skip


def _run_settings(r: ResolvedConfig, _env: dict[str, str]) -> object:
    built = RunSettings.from_config(r, command=["python", "t.py"], run_dir=Path("/r"))
    return dataclasses.asdict(built), r.config.launcher.run_path("/submit", "42")


def _slurm(r: ResolvedConfig, _env: dict[str, str]) -> object:
    try:
        backend = get_backend(r.config.slurm.backend, timeout=r.config.slurm.command_timeout_s)
    except Exception as exc:  # noqa: BLE001 - pyslurm is not installed here: the choice shows as its error
        return type(exc).__name__
    return type(backend).__name__, backend.timeout


def _health(r: ResolvedConfig, env: dict[str, str]) -> object:
    monitor = HealthMonitor.from_config(r.config, node="n1", on_fatal=lambda _r: None, interval_s=1e6, env=env)
    gpu = open_gpu_backend(r.config.health.gpu_backend, node="n1", config=r.config).describe()
    return gpu, monitor.budget_s, monitor.policy.source, hook_log_path(env)


def _agent_paths(r: ResolvedConfig, _env: dict[str, str]) -> object:
    agent = r.config.agent
    return agent.socket_path("7", "n1"), agent.bb_path("7", "n1"), agent.record_dir


# The code each key feeds, by key or section: what it builds from the config (and the environment it reads).
CONSUMERS = {
    "launcher.epilog_requeue": lambda r, _e: orphan.wanted({"SPANK_NVRX_ENABLED": "1"}, r.config),
    "launcher": _run_settings, "straggler": _run_settings, "inprocess": _run_settings,
    "agent.heartbeat_timeout_s": _run_settings, "agent.initial_timeout_s": _run_settings,
    "agent.calibration_floor_s": _run_settings,
    "agent": _agent_paths, "slurm": _slurm, "health": _health,
    "ckpt": lambda r, _e: CheckpointSettings.from_config(r.config.ckpt, bb_dir="/bb", failure_domain="n1").model_dump(),
    "attribution": lambda r, _env: r.config.attribution.model_dump(),  # AttributionSettings is the section itself
    "cluster": lambda r, _env: r.config.cluster.model_dump(),  # what `nvrx-hpc cluster up` builds its spec from
    "logging": lambda r, _env: r.config.logging.level,
}  # fmt: skip


@pytest.fixture(autouse=True)
def no_site_files(tmp_path, monkeypatch):
    monkeypatch.setattr(config_mod, "DEFAULT_CONFIG_PATH", tmp_path / "absent.toml")
    monkeypatch.setattr(config_mod, "_LEGACY_ATTR_FILE", tmp_path / "absent-attr.toml")


def test_every_key_has_a_changed_value_and_a_consumer():
    assert sorted(CHANGED) == sorted(config_keys())
    for key in config_keys():
        assert key in CONSUMERS or key.partition(".")[0] in CONSUMERS, key


@pytest.mark.parametrize("key", config_keys())
def test_setting_a_key_changes_what_its_consumer_builds(key):
    consumer = CONSUMERS.get(key) or CONSUMERS[key.partition(".")[0]]
    env = {env_var_name(key): CHANGED[key]}
    changed = load_config(env=env)
    assert changed.sources[key] == f"env:{env_var_name(key)}"
    assert consumer(changed, env) != consumer(load_config(env={}), {}), f"{key}={CHANGED[key]} changed nothing"


@pytest.mark.parametrize("key", config_keys())
def test_every_key_is_read_outside_the_config_module(key):
    field = key.partition(".")[2]
    own = rf"self\.{field}\b"  # the table's own methods (socket_path, token) read it for their callers
    readers = [
        p for p in PACKAGE.rglob("*.py")
        if re.search(own if p.name.startswith("config") else rf"\.{field}\b", p.read_text())
    ]  # fmt: skip
    assert readers, f"{key} ({default_value(key)!r} by default) is read by nothing"
