"""Attribution settings: one typed table, resolved as defaults < TOML file < `NVRX_ATTR_<FIELD>` env < flags.

The file is `$NVRX_ATTR_CONFIG` or /etc/nvrx-hpc/attribution.toml (flat `key = value`, or the same
keys under `[attribution]`); a missing default file is fine. The variables use a single underscore
(`NVRX_ATTR_WEBHOOK_URL`) so that the core config, which owns `NVRX_<SECTION>__<FIELD>`, never sees
them. Lists (`post`) take commas in the environment: `NVRX_ATTR_POST=file,webhook`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nvrx_hpc.core.errors import ConfigError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["AttributionSettings", "load_settings", "DEFAULT_SETTINGS_PATH", "SETTINGS_PATH_ENV", "ENV_PREFIX"]

DEFAULT_SETTINGS_PATH = Path("/etc/nvrx-hpc/attribution.toml")
SETTINGS_PATH_ENV = "NVRX_ATTR_CONFIG"
ENV_PREFIX = "NVRX_ATTR_"

Backend = Literal["file", "webhook", "slack", "slurm_comment", "service"]


class AttributionSettings(BaseModel):
    """Every attribution setting, with its default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    post: tuple[Backend, ...] = Field((), description="Posting backends run after each analysis, in order.")
    engine: Literal["auto", "hyperscan", "re2", "grep", "python"] = Field("auto", description="Log scan engine.")
    file_path: str | None = Field(None, description="file backend: a JSON-lines file; one summary per report.")
    webhook_url: str | None = Field(None, description="webhook backend: URL that receives report.json (POST).")
    webhook_token: str | None = Field(None, description="webhook backend: sent as `Authorization: Bearer`.")
    slack_url: str | None = Field(None, description="slack backend: a Slack-compatible incoming-webhook URL.")
    service_url: str | None = Field(None, description="service backend and --server: the `nvrx-hpc serve` URL.")
    service_token: str | None = Field(None, description="Token for the service (or service_token_file).")
    service_token_file: str | None = Field(None, description="File holding the service token (first line).")
    post_timeout_s: float = Field(5.0, gt=0, le=120, description="Deadline of one HTTP attempt, seconds.")
    post_retries: int = Field(3, ge=0, le=10, description="Retries of a failed HTTP attempt (5xx, 429, network).")
    post_backoff_s: float = Field(0.5, ge=0, le=60, description="First retry delay; doubles each retry.")
    epilog_enabled: bool = Field(True, description="Whether `nvrx-hpc epilog` starts an analysis for failed jobs.")
    epilog_budget_s: float = Field(120.0, gt=0, le=3600, description="Wall-time budget of the Epilog's analysis.")
    epilog_slurm_timeout_s: float = Field(5.0, gt=0, le=60, description="Deadline of the Epilog's scontrol call.")
    serve_host: str = Field("127.0.0.1", description="Address `nvrx-hpc serve` binds.")
    serve_port: int = Field(8731, ge=1, le=65535, description="Port `nvrx-hpc serve` binds.")
    serve_db: str = Field("/var/lib/nvrx-hpc/attribution.sqlite", description="SQLite database of the service.")
    serve_max_body_bytes: int = Field(4 * 1024 * 1024, ge=1024, description="Largest request body accepted.")
    drain_after: int = Field(3, ge=1, description="Culprit this many times within drain_window_days: drain.")
    drain_window_days: float = Field(7.0, gt=0, description="Window of the node history for draining advice.")

    def token(self) -> str | None:
        """The service token from `service_token` or the first line of `service_token_file`.

        Raises:
            ConfigError: the token file cannot be read.
        """
        if self.service_token:
            return self.service_token
        if self.service_token_file:
            try:
                return Path(self.service_token_file).read_text(encoding="utf-8").splitlines()[0].strip()
            except (OSError, IndexError) as exc:
                raise ConfigError(
                    f"cannot read the service token from {self.service_token_file}: {exc}",
                    hint="write the token on the first line of that file, readable by this user",
                ) from None
        return None


def _fields() -> dict[str, Any]:
    return AttributionSettings.model_fields


def _file_values(env: Mapping[str, str], path: str | os.PathLike[str] | None) -> tuple[dict[str, Any], str]:
    explicit = path or env.get(SETTINGS_PATH_ENV)
    file = Path(explicit) if explicit else DEFAULT_SETTINGS_PATH
    try:
        table = tomllib.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        if explicit:
            raise ConfigError(
                f"attribution settings file {file} does not exist", hint=f"check {SETTINGS_PATH_ENV}"
            ) from None
        return {}, str(file)
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ConfigError(f"cannot read attribution settings {file}: {exc}", hint="fix the TOML syntax") from None
    if isinstance(table.get("attribution"), dict):
        table = table["attribution"]
    return table, str(file)


def load_settings(
    env: Mapping[str, str] = os.environ,
    overrides: Mapping[str, Any] | None = None,
    path: str | os.PathLike[str] | None = None,
) -> AttributionSettings:
    """Resolve the settings.

    Raises:
        ConfigError: an unknown key or variable, or a bad value; the message names it and where it came from.
    """
    values, file = _file_values(env, path)
    where = {k: f"in {file}" for k in values}
    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX) or name == SETTINGS_PATH_ENV:
            continue
        key = name[len(ENV_PREFIX) :].lower()
        if key not in _fields():
            raise ConfigError(
                f"unknown attribution variable {name}",
                hint="variables are NVRX_ATTR_<FIELD>; fields: " + ", ".join(sorted(_fields())),
            )
        values[key] = tuple(v.strip() for v in raw.split(",") if v.strip()) if key == "post" else raw
        where[key] = f"from {name}"
    for key, value in (overrides or {}).items():
        if value is not None:
            values[key] = value
            where[key] = "from the command line"
    unknown = sorted(set(values) - set(_fields()))
    if unknown:
        raise ConfigError(
            f"unknown attribution setting {unknown[0]!r} ({where.get(unknown[0], '')})",
            hint="settings: " + ", ".join(sorted(_fields())),
        )
    try:
        return AttributionSettings.model_validate(values)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        key = str(err["loc"][0]) if err["loc"] else "?"
        raise ConfigError(
            f"attribution setting {key} = {values.get(key)!r} ({where.get(key, 'default')}) is invalid: {err['msg']}",
            hint=f"{key}: {_fields()[key].description}" if key in _fields() else None,
        ) from None
