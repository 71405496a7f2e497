"""One exception hierarchy: every error carries a hint and the exit code the CLI should use."""

from __future__ import annotations

from collections.abc import Sequence

from nvrx_hpc.core.exit_codes import ExitCode

__all__ = [
    "NvrxError",
    "ConfigError",
    "ProtocolError",
    "AuthError",
    "PeerUnreachable",
    "SlurmError",
    "SlurmCommandError",
    "SlurmParseError",
    "SlurmTimeout",
    "SlurmNotInstalled",
    "ClusterError",
    "CheckpointError",
    "AttributionError",
    "HealthError",
]


class NvrxError(Exception):
    """Base of all nvrx-hpc errors. `hint` says what to do next; `exit_code` is what the CLI exits with."""

    exit_code: ExitCode = ExitCode.INTERNAL

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return self.message if not self.hint else f"{self.message}\nhint: {self.hint}"


class ConfigError(NvrxError):
    """A configuration key or value is wrong (site TOML, NVRX_* environment, or a flag)."""

    exit_code = ExitCode.USAGE


class ProtocolError(NvrxError):
    """A wire frame was rejected: bad length, version, MAC, or payload."""

    exit_code = ExitCode.USAGE


class AuthError(ProtocolError):
    """A peer's frame failed its MAC check: it holds another token, or the frame was altered. Not a usage error."""

    exit_code = ExitCode.AUTH


class PeerUnreachable(NvrxError):
    """Another nvrx-hpc process (the launcher, an agent, the service) does not answer at its address."""

    exit_code = ExitCode.UNAVAILABLE


class SlurmError(NvrxError):
    """Something went wrong talking to Slurm."""

    exit_code = ExitCode.UNAVAILABLE


class SlurmNotInstalled(SlurmError):
    """A Slurm or munge program is not on PATH."""


class SlurmCommandError(SlurmError):
    """A Slurm command exited non-zero."""

    def __init__(self, argv: Sequence[str], returncode: int, stderr: str, *, hint: str | None = None) -> None:
        tail = stderr.strip().splitlines()[-5:]
        detail = "; ".join(tail) if tail else "no output on stderr"
        super().__init__(f"{' '.join(argv)} exited {returncode}: {detail}", hint=hint)
        self.argv = list(argv)
        self.returncode = returncode
        self.stderr = stderr


class SlurmTimeout(SlurmError):
    """A Slurm command did not answer in time."""

    def __init__(self, argv: Sequence[str], timeout: float) -> None:
        super().__init__(
            f"{argv[0]} timed out after {timeout:g} s (argv: {' '.join(argv)})",
            hint="is slurmctld up? Try `nvrx-hpc cluster status`.",
        )
        self.argv = list(argv)
        self.timeout = timeout


class SlurmParseError(SlurmError):
    """Slurm printed something we could not parse."""

    def __init__(self, what: str, text: str) -> None:
        snippet = text if len(text) <= 200 else text[:200] + "..."
        super().__init__(
            f"could not parse {what}: {snippet!r}",
            hint="this Slurm version may print a shape we do not know; please report it with the output",
        )
        self.text = text


class ClusterError(NvrxError):
    """The local development cluster could not be brought up, inspected or stopped."""

    exit_code = ExitCode.UNAVAILABLE


class AttributionError(NvrxError):
    """Attribution input (a run directory, a log, a flight-recorder dump, a report) is missing or unreadable."""

    exit_code = ExitCode.USAGE


class CheckpointError(NvrxError):
    """A checkpoint could not be saved, committed, verified or restored (burst buffer full, bad shard, lost node)."""

    exit_code = ExitCode.UNAVAILABLE

    def __init__(self, message: str, *, hint: str | None = None, step: int | None = None) -> None:
        super().__init__(message, hint=hint)
        self.step = step


class HealthError(NvrxError):
    """A health check, the health policy or a GPU backend cannot do what was asked (no NVML, bad policy, ...)."""

    exit_code = ExitCode.UNAVAILABLE
