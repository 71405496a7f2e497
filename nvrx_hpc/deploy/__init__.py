"""Site mode on a real cluster: `nvrx-hpc site install` (plugin, plugstack entry, Prolog/Epilog, config) and
`nvrx-hpc site check` (is this node set up, and does everything agree). See docs/site-install.md.

Sits above slurm and health (it builds the plugin and asks NVML) and below cli; imports no launcher.
"""

from nvrx_hpc.deploy.check import CheckLine, Status, run_checks
from nvrx_hpc.deploy.install import InstallReport, install, uninstall
from nvrx_hpc.deploy.paths import SitePaths

__all__ = ["CheckLine", "InstallReport", "SitePaths", "Status", "install", "run_checks", "uninstall"]
