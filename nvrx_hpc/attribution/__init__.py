"""Attribution: after a failure, say what failed, where (node, rank, GPU), whether a restart can help,
and post it. Reads only a job's run directory (plus, optionally, what Slurm says about the job).

The restart loop calls `analyze_run(run_dir)` and acts on `report.verdict.action` (retry, exclude the
nodes in `report.verdict.exclude_nodes` and retry, or stop). `nvrx-hpc attribute` and the Epilog
trigger (`trigger.trigger_from_epilog`) use the same function and also write and post the report.
See docs/attribution.md.
"""

from nvrx_hpc.attribution.analyze import Report, analyze, analyze_run
from nvrx_hpc.attribution.api import Action, Category, Culprit, Verdict

__all__ = ["analyze", "analyze_run", "Report", "Verdict", "Category", "Action", "Culprit"]
