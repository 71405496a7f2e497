"""Settings of the checkpoint layer, given to `AsyncCheckpointer` as keywords or an object.

The tunables are the `[ckpt]` section of the configuration (`NVRX_CKPT__<FIELD>`, the site TOML);
keywords given in code win. Environment variables read besides: `NVRX_BB_DIR` (set by the SPANK plugin)
when `bb_dir` is not given, and `NVRX_FAILURE_DOMAIN`, then `SLURMD_NODENAME`, then `NVRX_NODE`, then the
host name, when `failure_domain` is not given.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from pydantic import Field, ValidationError, field_validator

from nvrx_hpc.ckpt.api import Scheme
from nvrx_hpc.core.config import CkptConfig, load_config
from nvrx_hpc.core.errors import CheckpointError

__all__ = ["CheckpointSettings", "default_failure_domain"]

_DOMAIN_ENV = ("NVRX_FAILURE_DOMAIN", "SLURMD_NODENAME", "NVRX_NODE")


def default_failure_domain(env: Mapping[str, str] = os.environ) -> str:
    """The failure domain of this process: NVRX_FAILURE_DOMAIN, SLURMD_NODENAME, NVRX_NODE, else the host name."""
    for name in _DOMAIN_ENV:
        if env.get(name):
            return env[name]
    return socket.gethostname()


class CheckpointSettings(CkptConfig):
    """Everything `AsyncCheckpointer` can be told: the `[ckpt]` keys of the configuration (their defaults,
    and the site's values, come from there), plus where this rank's burst buffer is and what fails with it."""

    bb_dir: str = Field(
        description="Node-local burst-buffer directory; `{domain}` is replaced by the failure domain. "
        "Default: $NVRX_BB_DIR."
    )
    failure_domain: str = Field(
        default_factory=default_failure_domain,
        description="What fails together with this rank (default: its node, from SLURMD_NODENAME).",
    )

    @field_validator("scheme")
    @classmethod
    def _as_scheme(cls, value: str) -> Scheme:
        return Scheme(value)

    @field_validator("bb_dir")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not os.path.isabs(value):
            raise ValueError(f"must be an absolute path, got {value!r}")
        return value

    @field_validator("failure_domain")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not value or "/" in value or value.startswith("."):
            raise ValueError(f"must be a plain name without '/', got {value!r}")
        return value

    @classmethod
    def from_config(cls, config: CkptConfig | None = None, **values: object) -> CheckpointSettings:
        """Keywords (None: not given) over `config` (default: the `[ckpt]` section of `load_config()`);
        errors become CheckpointError naming the field."""
        base = (config or load_config().config.ckpt).model_dump()
        given = {**base, **{k: v for k, v in values.items() if v is not None}}
        if "bb_dir" not in given and os.environ.get("NVRX_BB_DIR"):
            given["bb_dir"] = os.environ["NVRX_BB_DIR"]
        if "bb_dir" not in given:
            raise CheckpointError(
                "no burst-buffer directory: bb_dir was not given and NVRX_BB_DIR is not set",
                hint="pass AsyncCheckpointer(bb_dir='/dev/shm/nvrx/{domain}', ...) or run under `srun --nvrx`",
            )
        try:
            return cls(**given)
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            name = ".".join(str(p) for p in first["loc"]) or "settings"
            value = given.get(name, "(missing)")
            raise CheckpointError(
                f"checkpoint setting {name} = {value!r} is invalid: {first['msg']}",
                hint=f"{name}: {cls.model_fields[name].description}" if name in cls.model_fields else None,
            ) from None

    def bb_path(self) -> str:
        """The burst-buffer directory of this rank, `{domain}` filled in."""
        return self.bb_dir.replace("{domain}", self.failure_domain)
