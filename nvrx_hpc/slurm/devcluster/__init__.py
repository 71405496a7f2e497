"""A real Slurm cluster on this one host: munge, slurmctld and N `slurmd -N <name>` daemons.

Used by `nvrx-hpc cluster up|down|status|env`, the tests and the demo. Everything it writes lives
under one state directory with its own ports, so it never clashes with another Slurm on the machine.
"""

from nvrx_hpc.slurm.devcluster.cluster import ClusterStatus, DaemonStatus, DevCluster
from nvrx_hpc.slurm.devcluster.layout import DevClusterSpec, Layout

__all__ = ["ClusterStatus", "DaemonStatus", "DevCluster", "DevClusterSpec", "Layout"]
