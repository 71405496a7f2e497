"""Configuration: one typed table, resolved as defaults < site TOML < `NVRX_<SECTION>__<FIELD>` env < flags.

The table itself is `core/config_model.py`. Every key, its default, its environment variable and every
error are documented in docs/config.md (a test holds the page to the table). `load_config()` returns
the effective `NvrxConfig` plus, for each dotted key, where its value came from. Nothing here prints;
bad input raises `ConfigError` naming the key, the value, its source and what was expected.

Old names still read, with a logged deprecation warning, below their new ones: `NVRX_GPU_BACKEND`
(`NVRX_HEALTH__GPU_BACKEND`), `NVRX_ATTR_<FIELD>` (`NVRX_ATTRIBUTION__<FIELD>`) and the attribution
file `$NVRX_ATTR_CONFIG` or /etc/nvrx-hpc/attribution.toml (now `[attribution]` of the config file).
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
from pydantic import TypeAdapter, ValidationError
from pydantic.fields import FieldInfo

from nvrx_hpc.core.config_model import (
    AgentConfig,
    AttributionConfig,
    CkptConfig,
    ClusterConfig,
    HealthConfig,
    LauncherConfig,
    LoggingConfig,
    NvrxConfig,
    SlurmConfig,
    _Section,
)
from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.templates import absolute_path as _absolute
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
    "AttributionConfig",
    "CkptConfig",
    "LoggingConfig",
    "NvrxConfig",
    "ResolvedConfig",
    "config_keys",
    "default_value",
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
        "NVRX_TOKEN_FILE",
        "NVRX_WORKER_PID",
        "NVRX_FAILURE_DOMAIN",
        "NVRX_CKPT_KEY_FILE",
    }
)

# Old names, read below the new ones with a deprecation warning (NVRX_ATTR_<FIELD> is attribution.<field>).
_ENV_ALIASES = {
    "NVRX_GPU_BACKEND": "health.gpu_backend",
    "NVRX_HEALTH_POLICY": "health.policy_file",
    "NVRX_HOOK_LOG": "health.hook_log",
}
_ATTR_ALIAS_PREFIX = "NVRX_ATTR_"
_LEGACY_ATTR_FILE_ENV = "NVRX_ATTR_CONFIG"
_LEGACY_ATTR_FILE = Path("/etc/nvrx-hpc/attribution.toml")
_warned: set[str] = set()


def _deprecated(old: str, new: str) -> None:
    # Once per process (the config is loaded more than once), and only once someone can see it.
    if old not in _warned and log.isEnabledFor(logging.WARNING):
        _warned.add(old)
        log.warning("%s is deprecated and will be removed; use %s (see docs/config.md)", old, new)


_STRING_KINDS = {  # first match wins
    _percent_template: "an absolute path holding %j (and optionally %n, %%)",
    _absolute: "an absolute path",
    _format_template: "a path holding {job_id} (and optionally {submit_dir})",
}


def _section_models() -> dict[str, type[_Section]]:
    return {name: info.annotation for name, info in NvrxConfig.model_fields.items()}  # type: ignore[misc]


_SECTIONS = _section_models()
_DEFAULTS = NvrxConfig()
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
    aliases, env_items = _env_items(env)
    layers = [_legacy_attribution_file(env), file_items or [], aliases, env_items, _override_items(overrides or {})]
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
    table = _read_table(file, explicit)
    if table is None:
        return None
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


def _legacy_attribution_file(env: Mapping[str, str]) -> list[_Raw]:
    """The old attribution file (flat keys, or under [attribution]); a missing default file is no layer."""
    explicit = env.get(_LEGACY_ATTR_FILE_ENV)
    file = Path(explicit) if explicit else _LEGACY_ATTR_FILE
    table = _read_table(file, _LEGACY_ATTR_FILE_ENV if explicit else None) or {}
    if isinstance(table.get("attribution"), dict):
        table = table["attribution"]
    if table:
        _deprecated(str(file), f"[attribution] in {DEFAULT_CONFIG_PATH}")
    items = []
    for field, value in table.items():
        key = f"attribution.{field}"
        if key not in _KEYS:
            raise _unknown_key(key, f"in {file}", _suggest_key(key))
        items.append(_Raw(key, value, f"file:{file}", f"from {file}", from_text=False))
    return items


def _read_table(file: Path, explicit: str | None) -> dict[str, Any] | None:
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
    return table


def _env_items(env: Mapping[str, str]) -> tuple[list[_Raw], list[_Raw]]:
    """(items from deprecated names, items from NVRX_<SECTION>__<FIELD>), each a layer of its own."""
    items, aliases = [], []
    env_names = [env_var_name(k) for k in _KEYS]
    for name in sorted(env):
        if not name.startswith(_ENV_PREFIX) or name in RUNTIME_ENV_VARS:
            continue
        alias = _alias_key(name)
        if alias is not None:
            new = env_var_name(alias)
            _deprecated(name, new if new not in env else f"{new} (set too: it wins)")
            aliases.append(_Raw(alias, env[name], f"env:{name}", f"from environment variable {name}", True))
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
    return aliases, items


def _alias_key(name: str) -> str | None:
    """The key an old variable name stands for; None when `name` is not an old name."""
    if name in _ENV_ALIASES:
        return _ENV_ALIASES[name]
    if not name.startswith(_ATTR_ALIAS_PREFIX) or name == _LEGACY_ATTR_FILE_ENV:
        return None
    key = "attribution." + name[len(_ATTR_ALIAS_PREFIX) :].lower()
    if key not in _KEYS:
        raise ConfigError(
            f"unknown attribution variable {name}",
            hint="use NVRX_ATTRIBUTION__<FIELD>; `nvrx-hpc config show` lists the attribution.* keys",
        )
    return key


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
    origin = getattr(_field(raw.key).annotation, "__origin__", None)
    try:
        if raw.from_text and origin in (tuple, dict):  # "a,b" and "name=1,other=2"
            parts = [p.strip() for p in raw.value.split(",") if p.strip()]
            items = tuple(parts) if origin is tuple else dict(_pair(p) for p in parts)
            return adapter.validate_python(items)
        if raw.from_text:
            return adapter.validate_strings(raw.value.strip(), strict=True)
        value = tuple(raw.value) if origin is tuple and isinstance(raw.value, list) else raw.value  # a TOML array
        return adapter.validate_python(value, strict=True)
    except (ValidationError, ValueError) as exc:
        reason = _reason(exc) if isinstance(exc, ValidationError) else str(exc)
        raise ConfigError(
            f"{raw.key} = {raw.value!r} ({raw.where}) is invalid: {reason}; expected {_expected(raw.key)}",
            hint=f"{raw.key}: {_field(raw.key).description} Default {default_value(raw.key)!r}; "
            "see docs/config.md",
        ) from None


def default_value(key: str) -> Any:
    """The default of a dotted key."""
    section, _, field = key.partition(".")
    return getattr(getattr(_DEFAULTS, section), field)


def _pair(item: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name.strip():
        raise ValueError(f"{item!r} is not NAME=VALUE")
    return name.strip(), value.strip()


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
    origin = getattr(ann, "__origin__", None)
    if origin is tuple:
        return "a list of " + ", ".join(repr(a) for a in ann.__args__[0].__args__) + " (env: comma-separated)"
    if origin is dict:
        return "a table of NAME = seconds > 0 (env: NAME=SECONDS,...)"
    metadata = list(info.metadata)
    if type(None) in getattr(ann, "__args__", ()):  # optional: unset by default
        ann = next(a for a in ann.__args__ if a is not type(None))  # type: ignore[union-attr]
        metadata += getattr(ann, "__metadata__", [])
        ann = getattr(ann, "__origin__", ann)
    kinds = {int: "an integer", float: "a number", str: "a string", bool: "true or false"}
    kind = kinds.get(ann, str(ann))  # type: ignore[call-overload]
    checks = [getattr(meta, "func", None) for meta in metadata]
    for check, words in _STRING_KINDS.items():
        if check in checks:
            kind = words
            break
    bounds = []
    for meta in metadata:
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
