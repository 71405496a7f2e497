"""One call that runs health checks on this node: pick the backend, build the context, run, close.

Used by `nvrx-hpc health`, the Prolog/Epilog gate and the agent's `HealthMonitor`.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterable, Mapping

from nvrx_hpc.core.config import NvrxConfig
from nvrx_hpc.health.api import GpuBackend, HealthReport, Level
from nvrx_hpc.health.backends import open_gpu_backend
from nvrx_hpc.health.policy import HealthPolicy
from nvrx_hpc.health.registry import CheckContext, CounterHistory, select_checks
from nvrx_hpc.health.runner import run_checks

__all__ = ["node_name", "run_health"]


def node_name(env: Mapping[str, str] = os.environ) -> str:
    """This node's Slurm name: $SLURMD_NODENAME (Prolog, Epilog, steps), $NVRX_NODE, else the short hostname."""
    for var in ("SLURMD_NODENAME", "NVRX_NODE"):
        if env.get(var):
            return env[var]
    return socket.gethostname().split(".")[0]


def run_health(
    config: NvrxConfig,
    *,
    node: str,
    level: Level,
    policy: HealthPolicy,
    env: Mapping[str, str] = os.environ,
    checks: Iterable[str] | None = None,
    budget_s: float | None = None,
    job_id: str | None = None,
    gpu: GpuBackend | None = None,
    counters: CounterHistory | None = None,
    inflight: dict[str, threading.Thread] | None = None,
) -> HealthReport:
    """Run the checks of `level` (or exactly `checks`) on `node` within `budget_s` seconds.

    `gpu`: a backend the caller owns (kept open); otherwise one is opened from the config
    (`health.gpu_backend`) and closed afterwards, unless a check still hangs inside NVML.

    Raises:
        HealthPolicyError: an unknown check name.
    """
    selected = select_checks(level, checks)
    own = gpu is None
    if gpu is None:
        gpu = open_gpu_backend(config.health.gpu_backend, node=node, config=config)
    ctx = CheckContext(
        node=node,
        gpu=gpu,
        policy=policy,
        level=level,
        bb_dir_template=config.agent.bb_dir,
        counters=counters if counters is not None else CounterHistory(),
        job_id=job_id,
    )
    report = None
    try:
        report = run_checks(selected, ctx, budget_s=budget_s, backend=gpu.name, inflight=inflight)
        return report
    finally:
        # Closing NVML under a thread still inside an NVML call is unsafe; the process exit cleans up.
        if own and (report is None or not report.timed_out or gpu.name != "nvml"):
            gpu.close()
