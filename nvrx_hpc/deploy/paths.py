"""Where `nvrx-hpc site install` puts each file, with or without --prefix."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nvrx_hpc.core.config import default_value

__all__ = ["SitePaths", "MANIFEST_NAME"]

MANIFEST_NAME = "installed.json"


def _slurm_etc() -> Path:
    """Slurm's configuration directory: that of $SLURM_CONF, else /etc/slurm (Debian, RHEL)."""
    conf = os.environ.get("SLURM_CONF")
    return Path(conf).parent if conf else Path("/etc/slurm")


@dataclass(frozen=True)
class SitePaths:
    """Every path site install writes or reads. With a prefix every path lies under it, and the files
    written there name each other by their prefixed paths, so a staged tree is consistent by itself."""

    prefix: Path | None
    slurm_etc: Path

    @classmethod
    def build(cls, prefix: Path | None = None, slurm_etc: Path | None = None) -> SitePaths:
        return cls(prefix.absolute() if prefix else None, slurm_etc or _slurm_etc())

    def _at(self, path: str | Path) -> Path:
        path = Path(path)
        return self.prefix / path.relative_to("/") if self.prefix else path

    @property
    def etc(self) -> Path:
        """nvrx-hpc's own directory: config, hook wrappers, the manifest of what was installed."""
        return self._at("/etc/nvrx-hpc")

    @property
    def config(self) -> Path:
        return self.etc / "config.toml"

    @property
    def prolog(self) -> Path:
        return self.etc / "prolog"

    @property
    def epilog(self) -> Path:
        return self.etc / "epilog"

    @property
    def manifest(self) -> Path:
        return self.etc / MANIFEST_NAME

    @property
    def plugin(self) -> Path:
        # Outside Slurm's PluginDir on purpose: a Slurm upgrade never overwrites it, and plugstack names it in full.
        return self._at("/usr/local/lib/nvrx-hpc/nvrx_spank.so")

    @property
    def plugstack_conf(self) -> Path:
        return self._at(self.slurm_etc / "plugstack.conf")

    @property
    def plugstack_dir(self) -> Path:
        return self._at(self.slurm_etc / "plugstack.conf.d")

    @property
    def plugstack_entry(self) -> Path:
        return self.plugstack_dir / "nvrx.conf"

    @property
    def hook_log(self) -> Path | None:
        """Under a prefix the hooks log there too; otherwise the default (/var/log/nvrx-hpc/hooks.jsonl)."""
        return self._at(default_value("health.hook_log")) if self.prefix else None
