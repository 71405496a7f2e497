"""Attribution settings: the `[attribution]` section of the one configuration (`core/config_model.py`).

Resolved like every key: defaults < config file < `NVRX_ATTRIBUTION__<FIELD>` < flags. The old names
(`NVRX_ATTR_<FIELD>`, the file `$NVRX_ATTR_CONFIG` or /etc/nvrx-hpc/attribution.toml) still read, below
the new ones, with a deprecation warning. Lists (`post`) take commas in the environment.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from nvrx_hpc.core.config import AttributionConfig, load_config

__all__ = ["AttributionSettings", "load_settings"]

AttributionSettings = AttributionConfig


def load_settings(
    env: Mapping[str, str] = os.environ,
    overrides: Mapping[str, Any] | None = None,
    path: str | os.PathLike[str] | None = None,
) -> AttributionSettings:
    """The effective attribution settings; `overrides` are flags by field name (None: not given), `path`
    the config file (default: $NVRX_CONFIG, else /etc/nvrx-hpc/config.toml).

    Raises:
        ConfigError: an unknown key or variable, or a bad value; the message names it and where it came from.
    """
    flags = {f"attribution.{k}": v for k, v in (overrides or {}).items() if v is not None}
    return load_config(path, env, flags).config.attribution
