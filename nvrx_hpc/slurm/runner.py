"""The one door to Slurm's command-line tools: argv lists, a mandatory timeout, an explicit environment."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from nvrx_hpc.core.errors import SlurmCommandError, SlurmNotInstalled, SlurmTimeout

__all__ = ["CommandRunner", "CompletedCommand", "DEBIAN_PACKAGE_OF"]

log = logging.getLogger(__name__)

# Which Debian package brings each program, for "not installed" messages.
DEBIAN_PACKAGE_OF = {
    "sinfo": "slurm-client",
    "squeue": "slurm-client",
    "scontrol": "slurm-client",
    "srun": "slurm-client",
    "sbatch": "slurm-client",
    "scancel": "slurm-client",
    "slurmctld": "slurmctld",
    "slurmd": "slurmd",
    "munged": "munge",
    "munge": "munge",
    "unmunge": "munge",
}


@dataclass(frozen=True)
class CompletedCommand:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str


class CommandRunner:
    """Runs one Slurm command and returns its output, or raises a SlurmError that names argv and stderr.

    `env` is merged over the current environment (None: inherit it as is). Tests and the dev cluster
    pass `{"SLURM_CONF": ...}` so that they never touch another Slurm on the machine.
    """

    def __init__(self, env: Mapping[str, str] | None = None, default_timeout: float = 10.0) -> None:
        self._env = None if env is None else {**os.environ, **env}
        self.default_timeout = default_timeout

    @property
    def env(self) -> dict[str, str]:
        return dict(os.environ if self._env is None else self._env)

    def which(self, program: str) -> str:
        path = shutil.which(program, path=self.env.get("PATH"))
        if path is None:
            package = DEBIAN_PACKAGE_OF.get(program, "slurm-wlm")
            raise SlurmNotInstalled(
                f"{program} is not installed (not found on PATH)",
                hint=f"install the Debian package {package}: apt-get install {package}",
            )
        return path

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        check: bool = True,
        input_text: str | None = None,
    ) -> CompletedCommand:
        if isinstance(argv, str):  # a shell string would be split wrongly and invites injection
            raise TypeError("CommandRunner.run takes an argv list, not a string")
        argv = [str(a) for a in argv]
        argv[0] = self.which(argv[0]) if "/" not in argv[0] else argv[0]
        limit = self.default_timeout if timeout is None else timeout
        log.debug("running %s (timeout %g s)", argv, limit)
        try:
            proc = subprocess.run(
                argv,
                input=input_text,
                capture_output=True,
                text=True,
                timeout=limit,
                env=self._env,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise SlurmTimeout([os.path.basename(argv[0]), *argv[1:]], limit) from exc
        done = CompletedCommand(tuple(argv), proc.returncode, proc.stdout, proc.stderr)
        if check and proc.returncode != 0:
            hint = None
            if "Could not establish a configuration source" in proc.stderr:
                hint = 'Slurm found no slurm.conf: set SLURM_CONF (dev cluster: eval "$(nvrx-hpc cluster env)")'
            raise SlurmCommandError([os.path.basename(argv[0]), *argv[1:]], proc.returncode, proc.stderr, hint=hint)
        return done
