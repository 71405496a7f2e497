"""Host staging for `dcp.async_save` through DcpWriter: one host copy of the state, kept and refilled.

torch's default stager allocates a new host copy of the state on every `async_save` and frees it once the
save is written, so each save's copy also pays the kernel's first touch of every page (zeroing, page
faults): about as much again as the copy. Here the copy is kept per process, keyed by the state's structure
(keys, types, dtypes, shapes, DTensor and ShardedTensor specs), and the next save of the same structure
copies into it: the blocking part is the copy alone.

A kept copy is refilled only when nothing references the state dict that the previous save staged into it
(DCP's background save holds it until that save returned, its files written); otherwise, or for a new
structure, the save gets a fresh copy as with torch's stager. At most `_KEEP` copies are kept (the least
recently used goes); `drop_staging()` frees them.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.distributed._shard.sharded_tensor import ShardedTensor
from torch.distributed._state_dict_utils import _copy_state_dict, _create_cpu_state_dict
from torch.distributed.tensor import DTensor

__all__ = ["stage", "drop_staging"]

_KEEP = 2


class _Staged(dict):  # what a save gets: a plain dict that can be weakly referenced
    __slots__ = ("__weakref__",)


class _Copy:
    def __init__(self, signature: tuple, host: dict[str, Any]) -> None:
        self.signature, self.host = signature, host
        self.handed: Callable[[], Any] = lambda: None  # weakref to the last _Staged filled from `host`


_lock = threading.Lock()
_copies: list[_Copy] = []  # most recently used last


def _signature(obj: Any) -> Any:
    """Everything of `obj` that a kept copy takes over without copying it: structure, types, metadata."""
    if isinstance(obj, ShardedTensor):
        return ("S", obj.metadata(), tuple((s.metadata, s.tensor.dtype, s.tensor.device.type)
                                          for s in obj.local_shards()))
    if isinstance(obj, DTensor):
        local = obj._local_tensor
        return ("D", obj._spec, local.dtype, tuple(local.shape), local.device.type)
    if isinstance(obj, torch.Tensor):
        return ("T", type(obj), obj.dtype, tuple(obj.shape), obj.device.type)
    if isinstance(obj, dict):
        return ("d", tuple((k, _signature(v)) for k, v in obj.items()))
    if isinstance(obj, (list, tuple)):
        return (type(obj), tuple(_signature(v) for v in obj))
    return ("v", type(obj))  # plain values are taken from the state on each save


def _on_device(obj: Any) -> bool:
    if isinstance(obj, torch.Tensor):
        return obj.device.type != "cpu"
    if isinstance(obj, dict):
        return any(_on_device(v) for v in obj.values())
    if isinstance(obj, (list, tuple)):
        return any(_on_device(v) for v in obj)
    return False


def stage(state_dict: dict[str, Any]) -> dict[str, Any]:
    """A host copy of `state_dict` (as torch's BlockingAsyncStager.stage), in a kept copy where one is free."""
    signature = _signature(state_dict)
    with _lock:
        copy = next((c for c in reversed(_copies) if c.signature == signature and c.handed() is None), None)
        if copy is None:  # a new structure, or the previous save may still read its copy
            pin = torch.cuda.is_available() and _on_device(state_dict)
            copy = _Copy(signature, _create_cpu_state_dict(state_dict, pin_memory=pin))
        else:
            _copies.remove(copy)
        _copies.append(copy)
        del _copies[:-_KEEP]  # a dropped copy still being read lives on until its save lets go of it
        staged = _Staged(_copy_state_dict(state_dict, copy.host, type_check=False))  # blocking copies
        copy.handed = weakref.ref(staged)
    return staged


def drop_staging() -> None:
    """Free the kept host copies (each save after this allocates again)."""
    with _lock:
        _copies.clear()
