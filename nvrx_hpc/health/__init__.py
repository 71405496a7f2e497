"""Node health: GPU (NVML or simulated) and host checks, the Prolog/Epilog gate, drains, the agent's loop.

- `api`: verdicts, `CheckResult`, `HealthReport`, GPU readings, the `GpuBackend`/`XidSource` protocols, errors
- `policy` + `default_policy.toml`: the policy as data (fatal Xids, thresholds, repeat counts)
- `registry`, `checks_gpu`, `checks_host`, `checks_dcgm`: the checks; `runner`: parallel runs under a budget
- `gpu_nvml`, `gpu_sim` (+ `sim_faults`), `backends`: the GPU backends, chosen explicitly
- `xid`: kernel-log Xid parsing and following, the Xid tracker
- `service.run_health`: one call for a report; `gate`: Prolog/Epilog/recheck; `drain`: `nvrx:` ownership
- `monitor.HealthMonitor` and `metrics`: what the node agent embeds

Importing this package imports nothing else; import the submodule you need.
"""

__all__: list[str] = []
