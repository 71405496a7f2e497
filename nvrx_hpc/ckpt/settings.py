"""Settings of the checkpoint layer: one typed table, given to `AsyncCheckpointer` as keywords or an object.

These live here rather than in `core/config.py` (which has no `ckpt` section yet). Environment variables
read: `NVRX_BB_DIR` (set by the SPANK plugin) when `bb_dir` is not given, and `NVRX_FAILURE_DOMAIN`,
then `SLURMD_NODENAME`, then `NVRX_NODE`, then the host name, when `failure_domain` is not given.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from nvrx_hpc.ckpt.api import Scheme
from nvrx_hpc.core.errors import CheckpointError

__all__ = ["CheckpointSettings", "default_failure_domain"]

_DOMAIN_ENV = ("NVRX_FAILURE_DOMAIN", "SLURMD_NODENAME", "NVRX_NODE")


def default_failure_domain(env: Mapping[str, str] = os.environ) -> str:
    """The failure domain of this process: NVRX_FAILURE_DOMAIN, SLURMD_NODENAME, NVRX_NODE, else the host name."""
    for name in _DOMAIN_ENV:
        if env.get(name):
            return env[name]
    return socket.gethostname()


class CheckpointSettings(BaseModel):
    """Everything `AsyncCheckpointer` can be told. Every field but `bb_dir` has a default."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bb_dir: str = Field(
        description="Node-local burst-buffer directory; `{domain}` is replaced by the failure domain. "
        "Default: $NVRX_BB_DIR."
    )
    shared_dir: str | None = Field(None, description="Shared (parallel) file system directory for drained versions.")
    scheme: Scheme = Field(Scheme.PARTNER, description="Redundancy: none, partner or xor.")
    failure_domain: str = Field(
        default_factory=default_failure_domain,
        description="What fails together with this rank (default: its node, from SLURMD_NODENAME).",
    )
    set_size: int = Field(8, ge=2, le=1024, description="XOR: failure domains per parity set (at least).")
    keep: int = Field(2, ge=1, le=1000, description="Committed versions kept in the burst buffer.")
    drain_every: int = Field(0, ge=0, description="Copy every M-th committed version to shared_dir (0: never).")
    drain_bandwidth_mib_s: float = Field(0.0, ge=0, description="Cap per rank for draining, MiB/s (0: none).")
    drain_keep: int = Field(0, ge=0, description="Versions kept in shared_dir (0: all).")
    chunk_mib: int = Field(64, ge=1, le=1024, description="Size of one transport message and one write, MiB.")
    wait_timeout_s: float = Field(3600.0, gt=0, description="Longest `wait()` before it raises CheckpointError.")
    reprotect: bool = Field(True, description="After a restore that used replicas, protect it again at once.")

    @field_validator("bb_dir", "shared_dir")
    @classmethod
    def _absolute(cls, value: str | None) -> str | None:
        if value is not None and not os.path.isabs(value):
            raise ValueError(f"must be an absolute path, got {value!r}")
        return value

    @field_validator("failure_domain")
    @classmethod
    def _plain_name(cls, value: str) -> str:
        if not value or "/" in value or value.startswith("."):
            raise ValueError(f"must be a plain name without '/', got {value!r}")
        return value

    @classmethod
    def build(cls, **values: object) -> CheckpointSettings:
        """Validate keywords (None means "use the default"); errors become CheckpointError naming the field."""
        given = {k: v for k, v in values.items() if v is not None}
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
