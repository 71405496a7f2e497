"""Build a `SlurmBackend` by name: `get_backend("cli")` (the default) or `get_backend("pyslurm")`."""

from __future__ import annotations

from typing import Literal

from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.slurm.api import SlurmBackend
from nvrx_hpc.slurm.runner import CommandRunner

__all__ = ["BACKEND_NAMES", "BackendName", "get_backend"]

BackendName = Literal["cli", "pyslurm"]
BACKEND_NAMES: tuple[str, ...] = ("cli", "pyslurm")


def get_backend(
    name: str = "cli", runner: CommandRunner | None = None, *, timeout: float | None = None, text_only: bool = False
) -> SlurmBackend:
    """The backend called `name` (config key `slurm.backend`).

    `runner` and `timeout` (seconds per command, config key `slurm.command_timeout_s`; default: the
    runner's) are for the CLI backend; `text_only` makes it read Slurm's text output without first asking
    which version is installed (one command where a deadline is tight, as in the Prolog).

    Raises:
        ConfigError: an unknown name (the message lists the valid ones).
        SlurmNotInstalled: "pyslurm" without the pyslurm package.
    """
    key = name.strip().lower()
    if key == "cli":
        from nvrx_hpc.slurm.cli_backend import CliBackend

        return CliBackend(runner, timeout=timeout, use_json=False if text_only else None)
    if key == "pyslurm":
        if runner is not None:
            raise ConfigError(
                "the pyslurm backend talks to slurmctld over RPC and takes no command runner",
                hint="pass runner only with name='cli'",
            )
        from nvrx_hpc.slurm.pyslurm_backend import PyslurmBackend

        return PyslurmBackend()
    raise ConfigError(
        f"unknown Slurm backend {name!r}; valid backends are {', '.join(BACKEND_NAMES)}",
        hint="the CLI backend ('cli') works with every Slurm from 21.08 on and needs nothing extra",
    )
