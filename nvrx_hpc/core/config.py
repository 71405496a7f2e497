"""Configuration: one typed table, resolved as defaults < site TOML < `NVRX_<SECTION>__<FIELD>` env < flags.

Every key, its default, its environment variable and every error are documented in docs/config.md.
`load_config()` returns the effective `NvrxConfig` plus, for each dotted key, where its value came from.
Nothing here prints; bad input raises `ConfigError` naming the key, the value, its source and what
was expected.
"""

from __future__ import annotations

import difflib
import logging
import os
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import annotated_types
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    model_validator,
)
from pydantic.fields import FieldInfo

from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.templates import absolute_path as _absolute
from nvrx_hpc.core.templates import expand_percent as _expand_percent
from nvrx_hpc.core.templates import percent_template as _percent_template
from nvrx_hpc.core.templates import run_dir_template as _format_template

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the project runs on 3.11; tomli is the same parser
    import tomli as tomllib

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "CONFIG_PATH_ENV",
    "RUNTIME_ENV_VARS",
    "ClusterConfig",
    "SlurmConfig",
    "AgentConfig",
    "LauncherConfig",
    "HealthConfig",
    "LoggingConfig",
    "NvrxConfig",
    "ResolvedConfig",
    "config_keys",
    "env_var_name",
    "parse_overrides",
    "load_config",
]

log = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = Path("/etc/nvrx-hpc/config.toml")
CONFIG_PATH_ENV = "NVRX_CONFIG"
_ENV_PREFIX = "NVRX_"
_ENV_SEP = "__"

# NVRX_* variables that nvrx-hpc processes set or read at run time; they are never configuration.
RUNTIME_ENV_VARS = frozenset(
    {
        "NVRX_CONFIG",
        "NVRX_DEBUG",
        "NVRX_TRACEBACK",
        "NVRX_AGENT_SOCKET",
        "NVRX_BB_DIR",
        "NVRX_NODE",
        "NVRX_RUN_DIR",
        "NVRX_RESTART_COUNT",
        "NVRX_GPU_BACKEND",
    }
)


_STRING_KINDS = {  # first match wins
    _percent_template: "an absolute path holding %j (and optionally %n, %%)",
    _absolute: "an absolute path",
    _format_template: "a path holding {job_id} (and optionally {submit_dir})",
}


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


AbsolutePath = Annotated[str, AfterValidator(_absolute)]
PercentTemplate = Annotated[str, AfterValidator(_absolute), AfterValidator(_percent_template)]
RunDirTemplate = Annotated[str, AfterValidator(_format_template)]
LogLevel = Annotated[Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"], BeforeValidator(_upper)]
Port = Annotated[int, Field(ge=1024, le=65535)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]


# ---------------------------------------------------------------- the table


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ClusterConfig(_Section):
    """The local development cluster started by `nvrx-hpc cluster up`."""

    state_dir: AbsolutePath = Field("/tmp/nvrx-cluster", description="Holds slurm.conf, logs and state.")
    nodes: int = Field(4, ge=1, le=64, description="Number of virtual nodes (one slurmd each).")
    cpus_per_node: int = Field(2, ge=1, le=1024, description="CPUs each virtual node advertises.")
    ctld_port: Port = Field(16817, description="TCP port of slurmctld.")
    slurmd_port_base: Port = Field(16901, description="First slurmd port; nodes use base, base+1, ...")

    @model_validator(mode="after")
    def _ports_do_not_collide(self) -> ClusterConfig:
        last = self.slurmd_port_base + self.nodes - 1
        if last > 65535:
            raise ValueError(f"slurmd ports {self.slurmd_port_base}..{last} run past 65535")
        if self.slurmd_port_base <= self.ctld_port <= last:
            raise ValueError(
                f"ctld_port {self.ctld_port} falls inside the slurmd ports {self.slurmd_port_base}..{last}"
            )
        return self


class SlurmConfig(_Section):
    """How nvrx-hpc talks to Slurm."""

    backend: Literal["cli", "pyslurm"] = Field("cli", description="cli: Slurm's commands; pyslurm: its API.")
    command_timeout_s: Seconds = Field(10.0, description="Deadline for one Slurm command, in seconds.")


class AgentConfig(_Section):
    """The node agent (one per node per job)."""

    socket: PercentTemplate = Field(
        "/run/nvrx/%j/agent-%n.sock", description="Unix socket of the agent; %j job id, %n node name."
    )
    bb_dir: PercentTemplate = Field("/dev/shm/nvrx/%j", description="Node-local burst buffer; %j, %n.")
    record_dir: AbsolutePath = Field(
        "/run/nvrx-hpc/agents", description="Root-only directory of the site agents' pid records and logs."
    )
    heartbeat_timeout_s: Seconds = Field(60.0, description="A rank silent this long after a beat is hung.")
    initial_timeout_s: Seconds = Field(600.0, description="Deadline for a rank's first heartbeat.")

    def socket_path(self, job_id: str, node: str) -> str:
        """The socket path for one job on one node."""
        return _expand_percent(self.socket, job_id, node)

    def bb_path(self, job_id: str, node: str) -> str:
        """The burst-buffer directory for one job on one node."""
        return _expand_percent(self.bb_dir, job_id, node)


class LauncherConfig(_Section):
    """The in-allocation restart coordinator (`nvrx-hpc run`)."""

    spares: int = Field(0, ge=0, description="Nodes of the allocation held back to replace failed ones.")
    max_restarts: int = Field(3, ge=0, description="In-allocation restarts before giving up.")
    run_dir: RunDirTemplate = Field(
        "{submit_dir}/nvrx-runs/{job_id}", description="Run dir on shared storage."
    )

    def run_path(self, submit_dir: str, job_id: str) -> str:
        """The run directory of one job."""
        return self.run_dir.format(submit_dir=submit_dir, job_id=job_id)


class HealthConfig(_Section):
    """GPU and host health checks (Prolog, Epilog, agent health loop)."""

    gpu_backend: Literal["nvml", "sim", "none"] = Field(
        "nvml", description="nvml: real; sim: simulated; none."
    )
    prolog_budget_s: Seconds = Field(10.0, description="Time the Prolog health gate may spend.")


class LoggingConfig(_Section):
    """Operator logs (stderr)."""

    level: LogLevel = Field("WARNING", description="DEBUG, INFO, WARNING, ERROR or CRITICAL (any case).")


class NvrxConfig(_Section):
    """The whole configuration; every field has a default, so `NvrxConfig()` is valid."""

    cluster: ClusterConfig = Field(default_factory=ClusterConfig)
    slurm: SlurmConfig = Field(default_factory=SlurmConfig)
    agent: AgentConfig = Field(default_factory=AgentConfig)
    launcher: LauncherConfig = Field(default_factory=LauncherConfig)
    health: HealthConfig = Field(default_factory=HealthConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)


def _section_models() -> dict[str, type[_Section]]:
    return {name: info.annotation for name, info in NvrxConfig.model_fields.items()}  # type: ignore[misc]


_SECTIONS = _section_models()
_KEYS = [f"{s}.{f}" for s, model in _SECTIONS.items() for f in model.model_fields]
_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def config_keys() -> list[str]:
    """Every dotted key, in table order ("cluster.state_dir", ..., "logging.level")."""
    return list(_KEYS)


def env_var_name(key: str) -> str:
    """The environment variable of a dotted key: "cluster.nodes" -> "NVRX_CLUSTER__NODES"."""
    section, _, field = key.partition(".")
    return f"{_ENV_PREFIX}{section.upper()}{_ENV_SEP}{field.upper()}"


@dataclass(frozen=True)
class ResolvedConfig:
    """The effective config, where each value came from, and the TOML file read (None: none)."""

    config: NvrxConfig
    sources: dict[str, str]
    file: Path | None = None

    def value(self, key: str) -> Any:
        section, _, field = key.partition(".")
        return getattr(getattr(self.config, section), field)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """{"cluster.nodes": {"value": 4, "source": "default"}, ...} in table order."""
        return {key: {"value": self.value(key), "source": self.sources[key]} for key in _KEYS}


def parse_overrides(items: Iterable[str]) -> dict[str, str]:
    """Turn `--set key=value` items into an overrides dict; the values stay strings."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(
                f"--set {item!r} is not key=value",
                hint="write it as --set cluster.nodes=8 (a dotted key, '=', the value)",
            )
        out[key.strip()] = value
    return out


# ---------------------------------------------------------------- resolution


@dataclass(frozen=True)
class _Raw:
    key: str
    value: Any
    source: str  # the form stored in ResolvedConfig.sources
    where: str  # the same, as words for a message
    from_text: bool  # env and --set values are strings to parse; TOML values are typed


def load_config(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] = os.environ,
    overrides: Mapping[str, Any] | None = None,
) -> ResolvedConfig:
    """Resolve defaults < TOML file < NVRX_<SECTION>__<FIELD> env < overrides ({"cluster.nodes": 8}).

    The file is `path` if given, else $NVRX_CONFIG, else DEFAULT_CONFIG_PATH; only the default may be missing.

    Raises:
        ConfigError: unknown key, bad value, unreadable or malformed file; the message names key and source.
    """
    if path is not None:
        file, explicit = Path(path), "--config"
    elif env.get(CONFIG_PATH_ENV):
        file, explicit = Path(env[CONFIG_PATH_ENV]), CONFIG_PATH_ENV
    else:
        file, explicit = DEFAULT_CONFIG_PATH, None
    file_items = _read_file(file, explicit)
    used_file = file if file_items is not None else None

    values: dict[str, Any] = {}
    sources = dict.fromkeys(_KEYS, "default")
    layers = [file_items or [], _env_items(env), _override_items(overrides or {})]
    for layer in layers:
        for raw in layer:
            values[raw.key] = _validate(raw)
            sources[raw.key] = raw.source

    nested: dict[str, dict[str, Any]] = {s: {} for s in _SECTIONS}
    for key, value in values.items():
        section, _, field = key.partition(".")
        nested[section][field] = value
    try:
        config = NvrxConfig.model_validate(nested)
    except ValidationError as exc:
        raise _cross_field_error(exc, sources) from None
    return ResolvedConfig(config=config, sources=sources, file=used_file)


def _read_file(file: Path, explicit: str | None) -> list[_Raw] | None:
    try:
        data = file.read_bytes()
    except FileNotFoundError:
        if explicit is None:
            return None
        raise ConfigError(
            f"config file {file} (from {explicit}) does not exist",
            hint=f"check the path, or unset {CONFIG_PATH_ENV} / drop --config to use only the defaults",
        ) from None
    except OSError as exc:
        raise ConfigError(
            f"cannot read config file {file}: {exc.strerror or exc}",
            hint="check the path and its permissions",
        ) from None
    try:
        table = tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {file} is not UTF-8 text (byte {exc.start})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(
            f"config file {file} is not valid TOML: {exc}", hint="fix the syntax at the line and column shown"
        ) from None
    where = f"in {file}"
    items = []
    for section, body in table.items():
        if not isinstance(body, dict):
            raise _unknown_key(section, where, _suggest_file_key(section))
        for field, value in body.items():
            key = f"{section}.{field}"
            if key not in _KEYS:
                raise _unknown_key(key, where, _suggest_key(key))
            items.append(_Raw(key, value, f"file:{file}", f"from {file}", from_text=False))
    return items


def _env_items(env: Mapping[str, str]) -> list[_Raw]:
    items = []
    env_names = [env_var_name(k) for k in _KEYS]
    for name in sorted(env):
        if not name.startswith(_ENV_PREFIX) or name in RUNTIME_ENV_VARS:
            continue
        rest = name[len(_ENV_PREFIX) :]
        if _ENV_SEP not in rest:
            single = [k for k in _KEYS if k.replace(".", "_") == rest.lower()]
            if single:
                log.warning("%s is not read as config; did you mean %s?", name, env_var_name(single[0]))
            continue
        section, _, field = rest.partition(_ENV_SEP)
        key = f"{section.lower()}.{field.lower()}"
        if key not in _KEYS:
            match = difflib.get_close_matches(name.upper(), env_names, n=1, cutoff=0.6)
            raise _unknown_key(name, "in the environment", repr(match[0]) if match else None, env=True)
        items.append(_Raw(key, env[name], f"env:{name}", f"from environment variable {name}", from_text=True))
    return items


def _override_items(overrides: Mapping[str, Any]) -> list[_Raw]:
    items = []
    for key, value in overrides.items():
        if key not in _KEYS:
            raise _unknown_key(key, "on the command line", _suggest_key(key))
        items.append(_Raw(key, value, "flag", "from the command line", from_text=isinstance(value, str)))
    return items


def _adapter(key: str) -> TypeAdapter[Any]:
    if key not in _ADAPTERS:
        section, _, field = key.partition(".")
        info = _SECTIONS[section].model_fields[field]
        ann = Annotated[tuple([info.annotation, *info.metadata])] if info.metadata else info.annotation
        _ADAPTERS[key] = TypeAdapter(ann)
    return _ADAPTERS[key]


def _validate(raw: _Raw) -> Any:
    adapter = _adapter(raw.key)
    try:
        if raw.from_text:
            return adapter.validate_strings(raw.value.strip(), strict=True)
        return adapter.validate_python(raw.value, strict=True)
    except ValidationError as exc:
        reason = _reason(exc)
        raise ConfigError(
            f"{raw.key} = {raw.value!r} ({raw.where}) is invalid: {reason}; expected {_expected(raw.key)}",
            hint=f"{raw.key}: {_field(raw.key).description} Default {_field(raw.key).default!r}; "
            "see docs/config.md",
        ) from None


def _reason(exc: ValidationError) -> str:
    msg = exc.errors(include_url=False)[0]["msg"].removeprefix("Value error, ")
    return msg[:1].lower() + msg[1:]


def _field(key: str) -> FieldInfo:
    section, _, field = key.partition(".")
    return _SECTIONS[section].model_fields[field]


def _expected(key: str) -> str:
    """Words for what a key takes, e.g. "an integer >= 1 and <= 64"."""
    info = _field(key)
    ann = info.annotation
    if getattr(ann, "__origin__", None) is Literal:
        return "one of " + ", ".join(repr(a) for a in ann.__args__)  # type: ignore[union-attr]
    kind = {int: "an integer", float: "a number", str: "a string"}.get(ann, str(ann))  # type: ignore[call-overload]
    checks = [getattr(meta, "func", None) for meta in info.metadata]
    for check, words in _STRING_KINDS.items():
        if check in checks:
            kind = words
            break
    bounds = []
    for meta in info.metadata:
        for attr, op in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
            if isinstance(meta, getattr(annotated_types, attr.capitalize())):
                bounds.append(f"{op} {getattr(meta, attr)}")
    return kind + (" " + " and ".join(bounds) if bounds else "")


def _suggest_key(key: str) -> str | None:
    """The closest dotted key: the same field in another section, else the nearest spelling."""
    field = key.rpartition(".")[2]
    same_field = [k for k in _KEYS if k.endswith("." + field)]
    match = same_field or difflib.get_close_matches(key, _KEYS, n=1, cutoff=0.6)
    return repr(match[0]) if match else None


def _suggest_file_key(name: str) -> str | None:
    """A top-level key that is not a [section]: maybe a field written outside its table."""
    owners = [k for k in _KEYS if k.endswith("." + name)]
    if owners:
        section, _, field = owners[0].partition(".")
        return f"{field!r} under [{section}]"
    match = difflib.get_close_matches(name, list(_SECTIONS), n=1, cutoff=0.6)
    return f"[{match[0]}]" if match else None


def _unknown_key(key: str, where: str, suggestion: str | None, env: bool = False) -> ConfigError:
    what = "variable" if env else "key"
    message = f"unknown config {what} {key!r} {where}"
    if suggestion:
        message += f"; did you mean {suggestion}?"
    if env:
        hint = "config variables are NVRX_<SECTION>__<FIELD> (two underscores); see docs/config.md"
    else:
        hint = "`nvrx-hpc config show` lists every key; see docs/config.md"
    return ConfigError(message, hint=hint)


def _cross_field_error(exc: ValidationError, sources: dict[str, str]) -> ConfigError:
    err = exc.errors(include_url=False)[0]
    section = str(err["loc"][0]) if err["loc"] else "config"
    set_here = [
        f"{k} from {sources[k]}" for k in _KEYS if k.startswith(section + ".") and sources[k] != "default"
    ]
    detail = f" (set: {', '.join(set_here)})" if set_here else ""
    return ConfigError(
        f"[{section}] is inconsistent: {_reason(exc)}{detail}",
        hint=f"change one of the [{section}] values named above (see docs/config.md)",
    )
