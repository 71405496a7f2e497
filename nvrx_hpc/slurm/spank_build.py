"""Building the SPANK plugin from the sources the package carries, and the Slurm versions it must match.

A SPANK plugin loads only into the Slurm major.minor whose `spank.h` it was compiled against, so a build
compares the headers' `SLURM_VERSION_NUMBER` with the installed Slurm first. The sources are read-only
package data (`nvrx_hpc.core.resources.spank_sources`); every build writes into its own directory
(`make O=DIR`). Used by `nvrx-hpc site install` and by `nvrx-hpc cluster up`.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from nvrx_hpc.core.errors import NvrxError, SlurmCommandError, SlurmError, SlurmTimeout
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.core.resources import spank_sources
from nvrx_hpc.slurm.api import SlurmVersion
from nvrx_hpc.slurm.parse_text import parse_version
from nvrx_hpc.slurm.runner import CommandRunner

__all__ = [
    "PLUGIN_NAME",
    "BuildError",
    "build_plugin",
    "header_version",
    "installed_slurm_version",
    "release",
    "require_same_release",
]

log = logging.getLogger(__name__)

PLUGIN_NAME = "nvrx_spank.so"
_HEADER_NUMBER = re.compile(r"^#define\s+SLURM_VERSION_NUMBER\s+(0x[0-9a-fA-F]+|\d+)\s*$", re.M)


class BuildError(NvrxError):
    """The plugin cannot be built here: no compiler or headers, or headers for another Slurm release."""

    exit_code = ExitCode.UNAVAILABLE


def release(version: SlurmVersion) -> str:
    """major.minor, what a plugin must match: "22.05"."""
    return f"{version.major}.{version.minor:02d}"


def header_version(include_dir: Path) -> SlurmVersion:
    """The Slurm version of the headers under `include_dir` (slurm/slurm_version.h); BuildError when absent."""
    header = include_dir / "slurm" / "slurm_version.h"
    spank_h = include_dir / "slurm" / "spank.h"
    if not spank_h.is_file() or not header.is_file():
        raise BuildError(
            f"no Slurm development headers under {include_dir} (need slurm/spank.h and slurm/slurm_version.h)",
            hint="install them: apt-get install libslurm-dev (Debian/Ubuntu), dnf install slurm-devel (RHEL); "
            "or pass --slurm-include DIR",
        )
    match = _HEADER_NUMBER.search(header.read_text(errors="replace"))
    if match is None:
        raise BuildError(f"{header} defines no SLURM_VERSION_NUMBER", hint="is this Slurm's own slurm_version.h?")
    number = int(match[1], 0)
    return SlurmVersion((number >> 16) & 0xFF, (number >> 8) & 0xFF, number & 0xFF)


def installed_slurm_version(runner: CommandRunner) -> tuple[SlurmVersion, str]:
    """The Slurm installed on this node and how it was learnt: `slurmd -V` (compute node), else `srun --version`."""
    errors = []
    for argv in (["slurmd", "-V"], ["srun", "--version"]):
        try:
            done = runner.run(argv, timeout=10)
        except SlurmError as exc:
            errors.append(exc.message)
            continue
        return parse_version(done.stdout or done.stderr), " ".join(argv)
    raise SlurmError(
        "cannot tell which Slurm runs here: " + "; ".join(errors),
        hint="run this on a Slurm node (slurmd or the client commands installed)",
    )


def require_same_release(headers: SlurmVersion, running: SlurmVersion, include_dir: Path) -> None:
    """A plugin built from other headers would be refused by Slurm's loader: stop before building it."""
    if release(headers) != release(running):
        raise BuildError(
            f"the Slurm headers under {include_dir} are {headers} but this node runs Slurm {running}; a SPANK "
            f"plugin built against {release(headers)} will not load into {release(running)}",
            hint=f"install the development headers of Slurm {release(running)} (the same packages as the "
            "daemons), or point --slurm-include at them",
        )


def build_plugin(
    out_dir: Path,
    *,
    version: str,
    runner: CommandRunner | None = None,
    include_dir: Path | None = None,
    werror: bool = False,
    timeout: float = 300.0,
) -> Path:
    """Compile the plugin from the packaged sources into `out_dir`; returns the .so path.

    `make` is incremental, so a second call with the same `out_dir` is quick. Raises BuildError with the
    compiler's last lines when the build fails.
    """
    runner = runner or CommandRunner()
    for tool in ("make", "gcc"):
        if shutil.which(tool, path=runner.env.get("PATH")) is None:
            raise BuildError(
                f"{tool} is not installed; the SPANK plugin is compiled on the node",
                hint="apt-get install make gcc libslurm-dev (Debian/Ubuntu)",
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    argv = ["make", "-s", "-C", str(spank_sources()), f"O={out_dir}", f"NVRX_VERSION={version}"]
    if werror:
        argv.append("WERROR=1")
    if include_dir is not None:
        argv.append(f"CFLAGS=-I{include_dir}")
    log.info("building the SPANK plugin: %s", argv)
    try:
        runner.run(argv, timeout=timeout)
    except SlurmCommandError as exc:
        raise BuildError(
            f"building the SPANK plugin failed: {exc.message}",
            hint="the compiler output above names the problem; missing <slurm/spank.h> means libslurm-dev",
        ) from None
    except SlurmTimeout:
        raise BuildError(f"building the SPANK plugin took over {timeout:g} s", hint="is the node overloaded?") from None
    plugin = out_dir / PLUGIN_NAME
    if not plugin.is_file():
        raise BuildError(f"make succeeded but {plugin} is missing", hint="check the Makefile's O= handling")
    return plugin
