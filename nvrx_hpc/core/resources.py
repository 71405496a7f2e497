"""Files that travel inside the package (templates, the SPANK plugin's sources), found through importlib.resources.

Everything a command reads besides Python code lives under `nvrx_hpc/data/` and is listed as package
data in pyproject.toml, so a wheel installed anywhere finds it; nothing reads paths relative to a checkout.
In a checkout `nvrx_hpc/data/spank` is a symlink to the top-level `spank/`, where `make -C spank` builds.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from nvrx_hpc.core.errors import NvrxError

__all__ = ["data_path", "sbatch_template", "spank_sources", "SPANK_SOURCE_FILES"]

# What a plugin build needs; a wheel or sdist missing one of them is incomplete.
SPANK_SOURCE_FILES = ("Makefile", "nvrx_spank.lds", "nvrx_dispatch.c", "nvrx_common.h")


def data_path(*parts: str) -> Path:
    """The path of `nvrx_hpc/data/<parts>` on disk; raises NvrxError naming it when the install lacks it."""
    root = resources.files("nvrx_hpc").joinpath("data")
    target = root.joinpath(*parts)
    # The package is always installed as plain files (wheel or editable), never zipped: a real path exists.
    path = Path(str(target))
    if not path.exists():
        raise NvrxError(
            f"nvrx-hpc's package data {'/'.join(('data', *parts))} is missing (looked in {path})",
            hint="the installation is incomplete: reinstall nvrx-hpc from its wheel or sdist",
        )
    return path


def sbatch_template(name: str = "pytorch.sbatch.j2") -> Path:
    """A packaged sbatch template (docs/sbatch-template.md)."""
    return data_path("sbatch", name)


def spank_sources() -> Path:
    """The directory holding the SPANK plugin's C sources and Makefile (read-only; build with `make O=...`)."""
    directory = data_path("spank")
    missing = [name for name in SPANK_SOURCE_FILES if not (directory / name).is_file()]
    if missing:
        raise NvrxError(
            f"the SPANK plugin sources in {directory} lack {', '.join(missing)}",
            hint="the installation is incomplete: reinstall nvrx-hpc from its wheel or sdist",
        )
    return directory
