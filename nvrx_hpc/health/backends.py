"""Choosing the GPU backend: always explicit, never a silent fallback.

The name is the config key `health.gpu_backend` (`NVRX_HEALTH__GPU_BACKEND`, the site TOML, a flag;
default `nvml`; the old `NVRX_GPU_BACKEND` still reads, below the new name, with a warning):

| name | what the GPU checks read |
|---|---|
| `nvml` | the real GPUs through NVML; without a GPU/driver they report `skip` with "no GPU/NVML: ..." |
| `sim`  | simulated GPUs with the faults injected for this node under `<cluster.state_dir>/gpu-faults/` |
| `none` | nothing: every GPU check reports `skip` ("GPU checks are off") |
"""

from __future__ import annotations

from pathlib import Path
from typing import NoReturn

from nvrx_hpc.core.config import NvrxConfig
from nvrx_hpc.core.config_model import SIM_GPU_FAULTS_DIR
from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.health.api import GpuBackend, GpuUnavailable

__all__ = ["GPU_BACKENDS", "NoGpuBackend", "open_gpu_backend", "sim_fault_dir"]

GPU_BACKENDS = ("nvml", "sim", "none")


def sim_fault_dir(config: NvrxConfig) -> Path:
    """Where the simulated backend reads injected faults: the dev cluster's `gpu-faults` directory."""
    return Path(config.cluster.state_dir) / SIM_GPU_FAULTS_DIR


class NoGpuBackend:
    """`health.gpu_backend = none`: every GPU reading raises GpuUnavailable, so GPU checks report skip."""

    name = "none"

    def describe(self) -> str:
        return "none (GPU checks are off)"

    def _off(self, *args: object) -> NoReturn:
        raise GpuUnavailable("GPU checks are off (health.gpu_backend = none)")

    device_count = expected_count = identity = ecc = remapped_rows = retired_pages = _off
    nvlinks = pcie = clock_event_reasons = temperature_c = processes = memory_used_mib = _off
    recovery_action = recent_xids = _off

    def xid_source(self) -> None:
        return None

    def close(self) -> None:
        pass


def open_gpu_backend(name: str, *, node: str, config: NvrxConfig) -> GpuBackend:
    """The backend called `name` for `node`. Opening is cheap: NVML loads on first use."""
    if name == "nvml":
        from nvrx_hpc.health.gpu_nvml import NvmlBackend

        return NvmlBackend()
    if name == "sim":
        from nvrx_hpc.health.gpu_sim import SimBackend

        return SimBackend(node, sim_fault_dir(config))
    if name == "none":
        return NoGpuBackend()
    raise ConfigError(f"unknown GPU backend {name!r}; expected one of {', '.join(GPU_BACKENDS)}")
