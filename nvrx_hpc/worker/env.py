"""What a training rank learns from the environment the launcher gave it (`WorkerEnv.from_env`)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["WorkerEnv", "ENV_SOCKET", "ENV_TOKEN_FILE", "ENV_RUN_DIR", "ENV_RESTART"]

log = logging.getLogger(__name__)

ENV_SOCKET = "NVRX_AGENT_SOCKET"
ENV_TOKEN_FILE = "NVRX_TOKEN_FILE"
ENV_RUN_DIR = "NVRX_RUN_DIR"
ENV_RESTART = "NVRX_RESTART_COUNT"

# field -> variables tried in order (the launcher sets the first; srun alone sets the second)
_INT_FIELDS = {
    "rank": ("RANK", "SLURM_PROCID"),
    "local_rank": ("LOCAL_RANK", "SLURM_LOCALID"),
    "restart": (ENV_RESTART,),
}


@dataclass(frozen=True)
class WorkerEnv:
    """The worker API's view of one rank. `socket` None means no agent: every call is a no-op."""

    socket: str | None
    token_file: str | None
    run_dir: str | None
    rank: int
    local_rank: int
    restart: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> WorkerEnv | None:
        """The rank's settings, or None when the worker API must stay off.

        Off when NVRX_AGENT_SOCKET is unset or empty, and (with a warning) when the rank cannot be
        told: a training script must never fail because of its monitoring.
        """
        env = os.environ if env is None else env
        socket = env.get(ENV_SOCKET) or None
        if socket is None:
            return None
        values: dict[str, int] = {}
        for field, names in _INT_FIELDS.items():
            name = next((n for n in names if env.get(n, "").strip()), None)
            if name is None:
                if field == "rank":
                    log.warning(
                        "[worker] %s is set but neither RANK nor SLURM_PROCID is; heartbeats are off "
                        "(start the training with `nvrx-hpc run`, which sets RANK)",
                        ENV_SOCKET,
                    )
                    return None
                values[field] = 0
                continue
            try:
                values[field] = int(env[name])
            except ValueError:
                log.warning("[worker] %s=%r is not an integer; heartbeats are off", name, env[name])
                return None
        return cls(
            socket=socket,
            token_file=env.get(ENV_TOKEN_FILE) or None,
            run_dir=env.get(ENV_RUN_DIR) or None,
            **values,
        )

    def stacks_path(self) -> str | None:
        """`<run_dir>/stacks/rank-<R>.restart-<K>.txt`, or None without a run directory."""
        if not self.run_dir:
            return None
        return os.path.join(self.run_dir, "stacks", f"rank-{self.rank}.restart-{self.restart}.txt")

    def fr_path(self) -> str | None:
        """`<run_dir>/fr/rank-<R>.restart-<K>.pkl`, or None without a run directory."""
        if not self.run_dir:
            return None
        return os.path.join(self.run_dir, "fr", f"rank-{self.rank}.restart-{self.restart}.pkl")
