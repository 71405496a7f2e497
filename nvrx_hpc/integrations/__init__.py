"""Integrations with training frameworks. Each module imports its framework; this package imports none.

- `nvrx_hpc.integrations.lightning`: PyTorch Lightning (`NvrxCallback`, `NvrxCheckpointIO`, `NvrxEnvironment`,
  `latest_ckpt_path`); needs `pip install 'nvrx-hpc[lightning]'`. See docs/lightning.md.
- `nvrx_hpc.integrations.codec`: framework state as plain data for `nvrx_hpc.ckpt` (no pickle).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = ["NvrxCallback", "NvrxCheckpointIO", "NvrxEnvironment", "latest_ckpt_path"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(import_module("nvrx_hpc.integrations.lightning"), name)
    raise AttributeError(f"module 'nvrx_hpc.integrations' has no attribute {name!r}")
