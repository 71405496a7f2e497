"""The text of each file site install writes, and the slurm.conf lines it asks the admin to add. Pure functions."""

from __future__ import annotations

import shlex
from collections.abc import Mapping

from pydantic import BaseModel

from nvrx_hpc.core.config import NvrxConfig
from nvrx_hpc.deploy.paths import SitePaths

__all__ = ["hook_wrapper", "plugstack_entry", "plugstack_include", "commented_config", "slurm_conf_lines"]


def hook_wrapper(kind: str, python: str, paths: SitePaths, version: str) -> str:
    """Slurm's Prolog=/Epilog= take a path without arguments: a wrapper runs `python -m nvrx_hpc <kind>`.

    The interpreter is absolute: slurmd runs the hooks as root with a minimal PATH.
    """
    env = {"NVRX_CONFIG": str(paths.config)}
    if paths.hook_log is not None:
        env["NVRX_HEALTH__HOOK_LOG"] = str(paths.hook_log)
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (
        "#!/bin/sh\n"
        f"# Written by `nvrx-hpc site install` (nvrx-hpc {version}); slurm.conf: "
        f"{kind.capitalize()}={paths.prolog if kind == 'prolog' else paths.epilog}\n"
        "# It fails open: only a health check that judged this node fatal makes it exit non-zero.\n"
        f"export {exports}\n"
        f"exec {shlex.quote(python)} -m nvrx_hpc {kind}\n"
    )


def plugstack_entry(paths: SitePaths, config: NvrxConfig, version: str) -> str:
    """plugstack.conf.d/nvrx.conf: the plugin with the same socket and burst buffer as the agent's config."""
    args = [
        f"agent_socket={config.agent.socket}",
        f"bb_dir={config.agent.bb_dir}",
        "timeout_ms=500",
        "default=off",
    ]
    return (
        f"# Written by `nvrx-hpc site install` (nvrx-hpc {version}). Keys: docs/spank.md.\n"
        "# `required`: a plugin Slurm cannot load stops srun loudly (rebuild after a Slurm upgrade:\n"
        "# `nvrx-hpc site install`); at run time the plugin fails open by itself.\n"
        f"required {paths.plugin} {' '.join(args)}\n"
    )


def plugstack_include(paths: SitePaths) -> str:
    return f"include {paths.plugstack_dir}/*.conf\n"


def _toml_value(value: object) -> str:
    if value is None:  # TOML has no null: unset by default
        return '""'
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + "}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def commented_config(version: str) -> str:
    """/etc/nvrx-hpc/config.toml with every key commented out at its default, and what it means."""
    lines = [
        f"# nvrx-hpc site configuration, written by `nvrx-hpc site install` (nvrx-hpc {version}).",
        "# Every key is shown at its default, commented out; uncomment to change it. Precedence:",
        "# defaults < this file < NVRX_<SECTION>__<KEY> environment < command-line flags.",
        "# `nvrx-hpc config check` validates it; docs/config.md describes every key.",
        "# agent.socket and agent.bb_dir must match the plugin's agent_socket and bb_dir",
        "# (plugstack.conf.d/nvrx.conf): rerun `nvrx-hpc site install` after changing them.",
    ]
    defaults = NvrxConfig()
    for section in NvrxConfig.model_fields:
        model: BaseModel = getattr(defaults, section)
        doc = (type(model).__doc__ or "").strip().splitlines()[0]
        lines += ["", f"[{section}]  # {doc}"]
        for name, field in type(model).model_fields.items():
            value = getattr(model, name)
            unset = "(unset by default) " if value is None else ""
            lines.append(f"# {name} = {_toml_value(value)}  # {unset}{field.description or ''}".rstrip())
    return "\n".join(lines) + "\n"


def slurm_conf_lines(paths: SitePaths, current: Mapping[str, str]) -> list[str]:
    """The slurm.conf lines still to add, given `scontrol show config` (empty when Slurm did not answer)."""
    wanted = {
        "Prolog": str(paths.prolog),
        "Epilog": str(paths.epilog),
        "PrologFlags": "Alloc",
        "PrologEpilogTimeout": "60",
        "SchedulerParameters": "nohold_on_prolog_fail",
    }
    if paths.prefix is not None:
        wanted["PlugStackConfig"] = str(paths.plugstack_conf)
    lists = ("PrologFlags", "SchedulerParameters")  # comma lists: add ours to what is there
    missing = []
    for key, value in wanted.items():
        have = current.get(key, "").strip()
        have = "" if have in ("(null)", "None") else have
        if key in lists:
            if value.lower() not in have.lower().split(","):
                missing.append(f"{key}={have},{value}" if have else f"{key}={value}")
        elif key == "PrologEpilogTimeout":
            if have in ("", "65534"):  # 65534: Slurm's "not set"
                missing.append(f"{key}={value}")
        elif have != value:
            missing.append(f"{key}={value}")
    return missing
