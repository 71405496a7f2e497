"""nvrx_hpc.straggler: slow ranks found from the section timings the worker API already sends.

Ranks time their named sections (`nvrx_hpc.worker.section`); the node agents sum the durations per
rank and report them with their status every second (`ag.status`); the launcher scores each rank per window against the
job's median and its own best (`detector`), and publishes flags in status.json, events.jsonl and the
agents' Prometheus metrics. `control` holds the settings changed while a job runs. No collective is
added to the training. docs/straggler.md.
"""

from nvrx_hpc.straggler.control import CONTROL_FILE, read_control, write_control
from nvrx_hpc.straggler.detector import RankScore, StragglerDetector, StragglerSettings

__all__ = ["StragglerSettings", "StragglerDetector", "RankScore", "CONTROL_FILE", "read_control", "write_control"]
