"""Config resolution: defaults < TOML < NVRX_<SECTION>__<FIELD> < flags, sources, and every error message."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pydantic
import pytest

from nvrx_hpc.core import config as config_mod
from nvrx_hpc.core.config import (
    NvrxConfig,
    config_keys,
    default_value,
    env_var_name,
    load_config,
    parse_overrides,
)
from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.exit_codes import ExitCode

DOCS = Path(__file__).resolve().parents[2] / "docs" / "config.md"


@pytest.fixture(autouse=True)
def no_site_file(tmp_path, monkeypatch):
    """Whatever /etc/nvrx-hpc holds on this machine, tests see no site file unless they write one."""
    monkeypatch.setattr(config_mod, "DEFAULT_CONFIG_PATH", tmp_path / "absent" / "config.toml")
    monkeypatch.setattr(config_mod, "_LEGACY_ATTR_FILE", tmp_path / "absent" / "attribution.toml")
    monkeypatch.setattr(config_mod, "_warned", set())


def write(tmp_path: Path, text: str, name: str = "config.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def config_error(**kwargs) -> ConfigError:
    kwargs.setdefault("env", {})
    with pytest.raises(ConfigError) as info:
        load_config(**kwargs)
    assert info.value.exit_code == ExitCode.USAGE
    return info.value


# ---------------------------------------------------------------- defaults and the model


def test_defaults_with_no_file_and_no_env():
    resolved = load_config(env={})
    assert resolved.config == NvrxConfig()
    assert resolved.file is None
    assert set(resolved.sources) == set(config_keys())
    assert set(resolved.sources.values()) == {"default"}
    c = resolved.config
    assert (c.cluster.state_dir, c.cluster.nodes, c.cluster.cpus_per_node) == ("/tmp/nvrx-cluster", 4, 2)
    assert (c.cluster.ctld_port, c.cluster.slurmd_port_base) == (16817, 16901)
    assert (c.slurm.backend, c.slurm.command_timeout_s) == ("cli", 10.0)
    assert c.agent.socket == "/run/nvrx/%j/agent-%n.sock" and c.agent.bb_dir == "/dev/shm/nvrx/%j"
    assert c.launcher.run_dir == "{submit_dir}/nvrx-runs/{job_id}"
    assert (c.health.gpu_backend, c.health.prolog_budget_s, c.logging.level) == ("nvml", 10.0, "WARNING")


def test_model_is_frozen_and_forbids_extra_fields():
    cfg = NvrxConfig()
    with pytest.raises(pydantic.ValidationError):
        cfg.cluster.nodes = 9  # type: ignore[misc]
    with pytest.raises(pydantic.ValidationError):
        NvrxConfig.model_validate({"cluster": {"nodez": 1}})


def test_every_field_has_a_description_and_a_default():
    for key in config_keys():
        section, _, field = key.partition(".")
        info = type(getattr(NvrxConfig(), section)).model_fields[field]
        assert info.description, key
        assert not info.is_required(), key


def test_env_var_name_rule():
    assert env_var_name("cluster.nodes") == "NVRX_CLUSTER__NODES"
    assert env_var_name("slurm.command_timeout_s") == "NVRX_SLURM__COMMAND_TIMEOUT_S"


# ---------------------------------------------------------------- precedence and sources


def test_precedence_with_all_four_layers(tmp_path):
    path = write(
        tmp_path,
        '[cluster]\nnodes = 5\ncpus_per_node = 3\n[slurm]\nbackend = "pyslurm"\n[logging]\nlevel = "info"\n',
    )
    env = {"NVRX_CLUSTER__NODES": "6", "NVRX_CLUSTER__CPUS_PER_NODE": "4"}
    resolved = load_config(path=path, env=env, overrides={"cluster.nodes": 7})
    c = resolved.config
    assert c.cluster.nodes == 7  # flag beats env, file and default
    assert c.cluster.cpus_per_node == 4  # env beats file
    assert c.slurm.backend == "pyslurm"  # file beats default
    assert c.logging.level == "INFO"
    assert c.cluster.ctld_port == 16817  # default
    assert resolved.sources["cluster.nodes"] == "flag"
    assert resolved.sources["cluster.cpus_per_node"] == "env:NVRX_CLUSTER__CPUS_PER_NODE"
    assert resolved.sources["slurm.backend"] == f"file:{path}"
    assert resolved.sources["cluster.ctld_port"] == "default"
    assert resolved.file == path
    assert resolved.to_dict()["cluster.nodes"] == {"value": 7, "source": "flag"}


def test_nvrx_config_env_names_the_file_and_an_explicit_path_beats_it(tmp_path):
    from_env = write(tmp_path, "[cluster]\nnodes = 2\n", "env.toml")
    from_flag = write(tmp_path, "[cluster]\nnodes = 3\n", "flag.toml")
    assert load_config(env={"NVRX_CONFIG": str(from_env)}).config.cluster.nodes == 2
    assert load_config(path=from_flag, env={"NVRX_CONFIG": str(from_env)}).config.cluster.nodes == 3


def test_site_file_at_the_default_path_is_read(tmp_path, monkeypatch):
    site = write(tmp_path, "[launcher]\nspares = 2\n")
    monkeypatch.setattr(config_mod, "DEFAULT_CONFIG_PATH", site)
    resolved = load_config(env={})
    assert resolved.config.launcher.spares == 2
    assert resolved.sources["launcher.spares"] == f"file:{site}"


def test_string_overrides_are_parsed_like_env_values():
    resolved = load_config(
        env={}, overrides=parse_overrides(["cluster.nodes=8", "slurm.command_timeout_s= 2.5"])
    )
    assert resolved.config.cluster.nodes == 8 and resolved.config.slurm.command_timeout_s == 2.5


def test_runtime_nvrx_variables_are_not_config():
    env = {
        name: "x"
        for name in (
            "NVRX_DEBUG",
            "NVRX_TRACEBACK",
            "NVRX_AGENT_SOCKET",
            "NVRX_BB_DIR",
            "NVRX_NODE",
            "NVRX_RUN_DIR",
            "NVRX_RESTART_COUNT",
            "NVRX_SOMETHING_ELSE",
        )
    }
    assert set(load_config(env=env).sources.values()) == {"default"}


def test_single_underscore_is_ignored_with_a_warning(caplog):
    with caplog.at_level(logging.WARNING, logger="nvrx_hpc.core.config"):
        resolved = load_config(env={"NVRX_CLUSTER_NODES": "8"})
    assert resolved.config.cluster.nodes == 4
    assert "NVRX_CLUSTER_NODES is not read as config; did you mean NVRX_CLUSTER__NODES?" in caplog.text


def test_old_names_are_deprecated_aliases_below_the_new_ones(caplog):
    with caplog.at_level(logging.WARNING, logger="nvrx_hpc.core.config"):
        old = load_config(env={"NVRX_GPU_BACKEND": "sim", "NVRX_ATTR_POST": "file, webhook"})
    assert old.config.health.gpu_backend == "sim" and old.sources["health.gpu_backend"] == "env:NVRX_GPU_BACKEND"
    assert old.config.attribution.post == ("file", "webhook")
    assert "NVRX_GPU_BACKEND is deprecated and will be removed; use NVRX_HEALTH__GPU_BACKEND" in caplog.text
    assert "NVRX_ATTR_POST is deprecated and will be removed; use NVRX_ATTRIBUTION__POST" in caplog.text
    both = load_config(env={"NVRX_GPU_BACKEND": "sim", "NVRX_HEALTH__GPU_BACKEND": "none"})
    assert both.config.health.gpu_backend == "none"  # the old name never overrides the new one
    assert config_error(env={"NVRX_GPU_BACKEND": "cuda"}).message.startswith(
        "health.gpu_backend = 'cuda' (from environment variable NVRX_GPU_BACKEND) is invalid")
    unknown = config_error(env={"NVRX_ATTR_WEBHOOK_URLL": "x"})
    assert unknown.message == "unknown attribution variable NVRX_ATTR_WEBHOOK_URLL"


def test_the_old_attribution_file_is_a_layer_below_the_config_file(tmp_path, caplog):
    old = write(tmp_path, "post = ['file']\npost_retries = 4\n", "attribution.toml")
    new = write(tmp_path, "[attribution]\npost_retries = 6\n")
    with caplog.at_level(logging.WARNING, logger="nvrx_hpc.core.config"):
        resolved = load_config(new, env={"NVRX_ATTR_CONFIG": str(old)})
    assert resolved.config.attribution.post == ("file",) and resolved.config.attribution.post_retries == 6
    assert resolved.sources["attribution.post"] == f"file:{old}" and f"{old} is deprecated" in caplog.text
    bogus = write(tmp_path, "bogus = 1\n", "a.toml")
    assert "'attribution.bogus'" in config_error(env={"NVRX_ATTR_CONFIG": str(bogus)}).message
    assert "does not exist" in config_error(env={"NVRX_ATTR_CONFIG": str(tmp_path / "nope.toml")}).message


def test_lists_and_tables_from_text_and_toml(tmp_path):
    env = {"NVRX_LAUNCHER__SECTION_TIMEOUTS": "checkpoint=600, eval=30"}
    assert load_config(env=env).config.launcher.section_timeouts == {"checkpoint": 600.0, "eval": 30.0}
    path = write(tmp_path, "[launcher]\nsection_timeouts = {checkpoint = 600}\n[attribution]\npost = ['slack']\n")
    resolved = load_config(path, env={})
    assert resolved.config.launcher.section_timeouts == {"checkpoint": 600.0}
    assert resolved.config.attribution.post == ("slack",)
    assert "'eval' is not NAME=VALUE" in config_error(env={"NVRX_LAUNCHER__SECTION_TIMEOUTS": "eval"}).message


# ---------------------------------------------------------------- unknown keys


def test_unknown_key_in_file_names_key_file_and_suggestion(tmp_path):
    path = write(tmp_path, "[cluster]\nnode = 8\n")
    err = config_error(path=path)
    assert err.message == f"unknown config key 'cluster.node' in {path}; did you mean 'cluster.nodes'?"
    assert "config show" in err.hint


def test_unknown_section_in_file(tmp_path):
    path = write(tmp_path, "[clustr]\nnodes = 8\n")
    assert "unknown config key 'clustr.nodes'" in config_error(path=path).message
    assert "did you mean 'cluster.nodes'?" in config_error(path=path).message


def test_key_outside_any_section(tmp_path):
    path = write(tmp_path, "nodes = 8\n")
    err = config_error(path=path)
    assert err.message == f"unknown config key 'nodes' in {path}; did you mean 'nodes' under [cluster]?"


def test_field_in_the_wrong_section_suggests_the_right_one(tmp_path):
    path = write(tmp_path, "[slurm]\nspares = 1\n")
    assert "did you mean 'launcher.spares'?" in config_error(path=path).message


def test_unknown_env_variable_names_variable_and_suggestion():
    err = config_error(env={"NVRX_CLUSTER__NODS": "8"})
    assert err.message == (
        "unknown config variable 'NVRX_CLUSTER__NODS' in the environment; did you mean 'NVRX_CLUSTER__NODES'?"
    )
    assert "two underscores" in err.hint


def test_unknown_env_section():
    err = config_error(env={"NVRX_SLRUM__BACKEND": "cli"})
    assert "'NVRX_SLRUM__BACKEND'" in err.message and "did you mean 'NVRX_SLURM__BACKEND'?" in err.message


def test_unknown_flag_key_names_the_command_line_and_suggestion():
    err = config_error(overrides={"cluster.nodez": "8"})
    assert (
        err.message == "unknown config key 'cluster.nodez' on the command line; did you mean 'cluster.nodes'?"
    )
    err = config_error(overrides={"nodes": "8"})
    assert "did you mean 'cluster.nodes'?" in err.message


def test_unknown_key_with_nothing_close():
    err = config_error(overrides={"zzz.qqq": 1})
    assert err.message == "unknown config key 'zzz.qqq' on the command line"


# ---------------------------------------------------------------- bad values


def test_bad_type_in_file_names_key_value_file_and_expectation(tmp_path):
    path = write(tmp_path, '[cluster]\nnodes = "8"\n')
    err = config_error(path=path)
    assert err.message == (
        f"cluster.nodes = '8' (from {path}) is invalid: input should be a valid integer; "
        "expected an integer >= 1 and <= 64"
    )
    assert "Default 4" in err.hint


def test_bool_is_not_an_integer(tmp_path):
    path = write(tmp_path, "[cluster]\nnodes = true\n")
    assert "input should be a valid integer" in config_error(path=path).message
    assert "input should be a valid integer" in config_error(overrides={"cluster.nodes": True}).message


def test_out_of_range_from_env():
    err = config_error(env={"NVRX_CLUSTER__NODES": "100"})
    assert err.message == (
        "cluster.nodes = '100' (from environment variable NVRX_CLUSTER__NODES) is invalid: "
        "input should be less than or equal to 64; expected an integer >= 1 and <= 64"
    )


def test_not_a_number_from_env():
    err = config_error(env={"NVRX_SLURM__COMMAND_TIMEOUT_S": "soon"})
    assert "slurm.command_timeout_s = 'soon'" in err.message and "expected a number > 0" in err.message
    assert "finite" in config_error(env={"NVRX_SLURM__COMMAND_TIMEOUT_S": "inf"}).message


def test_out_of_range_from_flag():
    err = config_error(overrides={"launcher.spares": -1})
    assert err.message.startswith("launcher.spares = -1 (from the command line) is invalid")
    assert "expected an integer >= 0" in err.message


def test_choice_lists_the_valid_values():
    err = config_error(env={"NVRX_HEALTH__GPU_BACKEND": "cuda"})
    assert "expected one of 'nvml', 'sim', 'none'" in err.message


def test_a_bad_file_value_is_an_error_even_when_env_overrides_it(tmp_path):
    path = write(tmp_path, '[cluster]\nnodes = "many"\n')
    assert str(path) in config_error(path=path, env={"NVRX_CLUSTER__NODES": "4"}).message


@pytest.mark.parametrize(
    ("key", "value", "reason"),
    [
        ("agent.socket", "/run/nvrx/agent-%n.sock", "must contain %j"),
        ("agent.socket", "/run/nvrx/%j/%x.sock", "unknown placeholder %x"),
        ("agent.socket", "run/%j.sock", "must be an absolute path"),
        ("agent.bb_dir", "/dev/shm/%%j", "must contain %j"),
        ("cluster.state_dir", "relative/dir", "must be an absolute path"),
        ("launcher.run_dir", "{submit_dir}/runs", "must contain {job_id}"),
        ("launcher.run_dir", "{submit_dir}/{jobid}", "unknown placeholder {jobid}"),
        ("launcher.run_dir", "{submit_dir}/{job_id:>8}", "unknown placeholder {job_id}"),
        ("launcher.run_dir", "{submit_dir}/{job_id", "bad braces"),
        ("logging.level", "loud", "expected one of 'DEBUG'"),
    ],
)
def test_template_and_path_checks(key, value, reason):
    assert reason in config_error(overrides={key: value}).message


def test_templates_expand():
    c = load_config(env={}, overrides={"agent.bb_dir": "/nvme/%j/%n/100%%"}).config
    assert c.agent.socket_path("42", "n3") == "/run/nvrx/42/agent-n3.sock"
    assert c.agent.bb_path("42", "n3") == "/nvme/42/n3/100%"
    assert c.launcher.run_path("/home/u/exp", "42") == "/home/u/exp/nvrx-runs/42"


def test_cross_field_port_clash_names_the_section_and_sources():
    err = config_error(env={"NVRX_CLUSTER__CTLD_PORT": "16902"})
    assert err.message == (
        "[cluster] is inconsistent: ctld_port 16902 falls inside the slurmd ports 16901..16904 "
        "(set: cluster.ctld_port from env:NVRX_CLUSTER__CTLD_PORT)"
    )
    assert "run past 65535" in config_error(overrides={"cluster.slurmd_port_base": 65534}).message


# ---------------------------------------------------------------- files


def test_toml_syntax_error_gives_file_and_line(tmp_path):
    path = write(tmp_path, "[cluster]\n\nnodes = = 8\n")
    err = config_error(path=path)
    assert err.message.startswith(f"config file {path} is not valid TOML:")
    assert "line 3" in err.message


def test_explicit_missing_file_is_an_error(tmp_path):
    missing = tmp_path / "nope.toml"
    assert config_error(path=missing).message == f"config file {missing} (from --config) does not exist"
    err = config_error(env={"NVRX_CONFIG": str(missing)})
    assert err.message == f"config file {missing} (from NVRX_CONFIG) does not exist"


def test_directory_and_non_utf8_files(tmp_path):
    assert config_error(path=tmp_path).message.startswith(f"cannot read config file {tmp_path}")
    path = tmp_path / "latin1.toml"
    path.write_bytes(b"# caf\xe9\n")
    assert config_error(path=path).message == f"config file {path} is not UTF-8 text (byte 5)"


def test_parse_overrides_rejects_items_without_equals():
    assert parse_overrides(["a.b=c=d"]) == {"a.b": "c=d"}
    with pytest.raises(ConfigError, match=r"--set 'cluster.nodes' is not key=value"):
        parse_overrides(["cluster.nodes"])


# ---------------------------------------------------------------- docs


def _doc_default(value) -> str:
    if value is None:
        return "unset"
    shown = {True: "true", False: "false", (): "[]"}.get(value, value) if isinstance(value, (bool, tuple)) else value
    return f"`{shown}`"


def test_docs_table_is_the_config_table_key_for_key():
    rows = [line for line in DOCS.read_text().splitlines() if re.match(r"\| `[a-z_]+\.[a-z_]+` \|", line)]
    documented = [row.split("`")[1] for row in rows]
    assert documented == config_keys()  # every key, no key that does not exist, in table order
    for key, row in zip(documented, rows, strict=True):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[2] == _doc_default(default_value(key)), (key, cells[2])
        assert cells[3] == f"`{env_var_name(key)}`", key
