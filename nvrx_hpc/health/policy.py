"""The health policy: which Xids are fatal, counter thresholds, repeat counts, what each finding means.

The policy is data, not code. Its defaults live in the packaged `default_policy.toml` (the only place
they are written); a site overrides any key in a TOML file, merged key by key over the defaults:

1. the `path` given to `load_policy()` (`--policy` on the command line),
2. else the config key `health.policy_file` when it is set (`NVRX_HEALTH__POLICY_FILE`, the site TOML;
   the old `NVRX_HEALTH_POLICY` still reads): it must exist,
3. else its default, `/etc/nvrx-hpc/health-policy.toml`, when it exists,
4. else the packaged defaults alone.

Every section is a frozen pydantic model with `extra="forbid"`: an unknown key or a bad value raises
`HealthPolicyError` naming the key, the value, the file and the closest valid key.
"""

from __future__ import annotations

import difflib
import os
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nvrx_hpc.core.config import default_value, load_config
from nvrx_hpc.health.api import HealthPolicyError, Verdict

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = [
    "DEFAULT_POLICY_FILE",
    "SITE_POLICY_PATH",
    "POLICY_PATH_ENV",
    "Action",
    "HealthPolicy",
    "load_policy",
    "verdict_of",
]

DEFAULT_POLICY_FILE = Path(str(resources.files("nvrx_hpc.health").joinpath("default_policy.toml")))  # package data
SITE_POLICY_PATH = Path(default_value("health.policy_file"))
POLICY_PATH_ENV = "NVRX_HEALTH_POLICY"  # the old name of NVRX_HEALTH__POLICY_FILE, still read

Action = Literal["ignore", "warn", "fatal"]
NonNegInt = Field(ge=0)


def verdict_of(action: Action) -> Verdict:
    """The verdict an action word stands for: ignore -> ok, warn -> warn, fatal -> fatal."""
    return {"ignore": Verdict.OK, "warn": Verdict.WARN, "fatal": Verdict.FATAL}[action]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class GpuPolicy(_Section):
    expected_count: int = NonNegInt
    missing: Action
    nvml_missing_with_gpus: Action


class XidPolicy(_Section):
    fatal: frozenset[int]
    application: frozenset[int]
    application_repeat: int = Field(ge=1)
    window_s: float = Field(gt=0)
    unknown: Action

    def verdict(self, xid: int) -> Verdict:
        """The verdict of one occurrence (an application Xid becomes fatal only by repeating)."""
        if xid in self.fatal:
            return Verdict.FATAL
        if xid in self.application:
            return Verdict.WARN
        return verdict_of(self.unknown)


class EccPolicy(_Section):
    uncorrected_fatal: int = NonNegInt
    corrected_warn: int = NonNegInt


class RemappedRowsPolicy(_Section):
    pending: Action
    failed: Action


class RetiredPagesPolicy(_Section):
    pending: Action
    dbe_warn: int = NonNegInt


class RecoveryPolicy(_Section):
    required: Action


class NvLinkPolicy(_Section):
    link_down: Action
    growth_warn: int = Field(ge=1)
    repeat_fatal: int = Field(ge=1)
    sample_s: float = Field(ge=0)


class PciePolicy(_Section):
    width_below_max: Action
    gen_below_max: Action
    replay_growth_warn: int = Field(ge=1)
    replay_repeat_fatal: int = Field(ge=1)


class ClocksPolicy(_Section):
    hw_slowdown: Action
    sw_thermal: Action
    hw_thermal: Action
    power_brake: Action


class TemperaturePolicy(_Section):
    warn_c: int = NonNegInt
    fatal_c: int = NonNegInt


class ProcessesPolicy(_Section):
    leftover: Action
    memory_used_mib: int = NonNegInt


class HostPolicy(_Section):
    bb_min_free_gib: float = Field(ge=0)
    bb_unwritable: Action
    bb_low_space: Action
    shm_min_free_gib: float = Field(ge=0)
    shm_unwritable: Action
    shm_low_space: Action
    mem_min_available_pct: float = Field(ge=0, le=100)
    mem_low: Action
    required_mounts: tuple[str, ...]
    missing_mount: Action


class DcgmPolicy(_Section):
    level: int = Field(ge=1, le=4)
    timeout_s: float = Field(gt=0)
    failed: Action


class GatePolicy(_Section):
    timeout: Literal["error", "fatal"]
    epilog: Literal["always", "on_failure", "never"]
    undrain_on_pass: bool
    allow_user_off: bool


class HealthPolicy(_Section):
    """The whole policy. Build it with `load_policy()`; every field comes from a TOML file."""

    gpu: GpuPolicy
    xid: XidPolicy
    ecc: EccPolicy
    remapped_rows: RemappedRowsPolicy
    retired_pages: RetiredPagesPolicy
    recovery_action: RecoveryPolicy
    nvlink: NvLinkPolicy
    pcie: PciePolicy
    clocks: ClocksPolicy
    temperature: TemperaturePolicy
    processes: ProcessesPolicy
    host: HostPolicy
    dcgm: DcgmPolicy
    gate: GatePolicy
    source: tuple[str, ...] = ()

    @classmethod
    def default(cls) -> HealthPolicy:
        return load_policy(env={})


def _read(path: Path, why: str) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise HealthPolicyError(
            f"health policy file {path} ({why}) does not exist",
            hint=f"check the path, or leave health.policy_file at its default ({SITE_POLICY_PATH}, optional)",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise HealthPolicyError(f"cannot read health policy file {path}: {exc}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise HealthPolicyError(
            f"health policy file {path} is not valid TOML: {exc}", hint="fix the syntax at the line shown"
        ) from None


def _merge(base: dict[str, Any], over: Mapping[str, Any], where: str) -> dict[str, Any]:
    """`over` merged key by key over `base`; a key unknown to `base` is an error naming the closest one."""
    out = dict(base)
    for key, value in over.items():
        if key not in base:
            close = difflib.get_close_matches(str(key), list(base), n=1, cutoff=0.5)
            maybe = f"; did you mean {close[0]!r}?" if close else f"; valid keys: {', '.join(base)}"
            raise HealthPolicyError(
                f"unknown health policy key {key!r} {where}{maybe}",
                hint=f"the keys and their defaults are in {DEFAULT_POLICY_FILE} and docs/health.md",
            )
        if isinstance(base[key], dict):
            if not isinstance(value, Mapping):
                raise HealthPolicyError(f"health policy [{key}] {where} must be a table, got {value!r}")
            out[key] = _merge(base[key], value, f"{where} (in [{key}])")
        else:
            out[key] = value
    return out


def _coerce(data: dict[str, Any]) -> dict[str, Any]:
    """TOML has arrays and floats-as-ints; turn them into what the strict models expect."""
    out: dict[str, Any] = {}
    for section, body in data.items():
        if not isinstance(body, dict):
            out[section] = body
            continue
        fields = {}
        model = HealthPolicy.model_fields[section].annotation
        for key, value in body.items():
            ann = model.model_fields[key].annotation  # type: ignore[union-attr]
            if ann is float and isinstance(value, int) and not isinstance(value, bool):
                value = float(value)
            elif ann == frozenset[int] and isinstance(value, list):
                value = frozenset(value)
            elif ann == tuple[str, ...] and isinstance(value, list):
                value = tuple(value)
            fields[key] = value
        out[section] = fields
    return out


def _configured_policy(env: Mapping[str, str]) -> tuple[Path | None, str]:
    """The site file from `health.policy_file`: set anywhere, it must exist; at its default, only if it does."""
    resolved = load_config(env=env)
    site, source = Path(resolved.config.health.policy_file), resolved.sources["health.policy_file"]
    if source == "default":
        return (site, "site policy") if site.is_file() else (None, "")
    return site, f"health.policy_file ({source})"


def load_policy(
    path: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] = os.environ,
    overrides: Mapping[str, Any] | None = None,
) -> HealthPolicy:
    """The packaged defaults, then the site file (see the module docstring), then `overrides`.

    Raises:
        HealthPolicyError: a missing explicit file, bad TOML, an unknown key or a bad value.
    """
    data = _read(DEFAULT_POLICY_FILE, "packaged defaults")
    sources = [str(DEFAULT_POLICY_FILE)]
    site, what = (Path(path), "--policy") if path is not None else _configured_policy(env)
    if site is not None:
        data = _merge(data, _read(site, what), f"in {site}")
        sources.append(str(site))
    if overrides:
        data = _merge(data, overrides, "in the overrides")
        sources.append("overrides")
    where = "(policy read from " + ", then ".join(sources) + ")"
    try:
        return HealthPolicy.model_validate({**_coerce(data), "source": tuple(sources)})
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = ".".join(str(p) for p in err["loc"])
        raise HealthPolicyError(
            f"health policy {key} = {err.get('input')!r} {where} is invalid: {err['msg']}",
            hint=f"see the default and its comment in {DEFAULT_POLICY_FILE}",
        ) from None
