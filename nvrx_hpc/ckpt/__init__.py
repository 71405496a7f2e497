"""nvrx_hpc.ckpt: asynchronous checkpoints to node-local burst buffers, protected across nodes, committed atomically.

    from nvrx_hpc.ckpt import AsyncCheckpointer
    ckpt = AsyncCheckpointer("/dev/shm/nvrx/{domain}", "/lustre/run/ckpt", scheme="partner", comm="torch")
    step = ckpt.load(state) or 0          # newest version that verifies, from partners if a node is gone
    handle = ckpt.save(state, step)       # returns once the state is in host memory
    ckpt.close()

Heavy modules (torch, h5py, mpi4py) load on first use of the names below, so the CLI stays quick.
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

__all__ = [
    "AsyncCheckpointer",
    "SaveHandle",
    "CheckpointSettings",
    "Scheme",
    "SaveStats",
    "RestoreStats",
    "Transport",
    "LocalTransport",
    "MpiTransport",
    "TorchTransport",
    "scavenge",
    "DcpWriter",
    "DcpReader",
    "dcp_drain",
]

_WHERE = {
    "AsyncCheckpointer": "checkpointer",
    "SaveHandle": "checkpointer",
    "CheckpointSettings": "settings",
    "Scheme": "api",
    "SaveStats": "api",
    "RestoreStats": "api",
    "Transport": "api",
    "LocalTransport": "transport",
    "MpiTransport": "transport",
    "TorchTransport": "transport",
    "scavenge": "drain",
    "DcpWriter": "dcp",
    "DcpReader": "dcp",
    "dcp_drain": "dcp",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"nvrx_hpc.ckpt.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'nvrx_hpc.ckpt' has no attribute {name!r}")
