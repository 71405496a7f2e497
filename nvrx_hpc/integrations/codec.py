"""Framework state (a Lightning checkpoint dict) as a tree `nvrx_hpc.ckpt.tree` can store, and back: no pickle.

`nvrx_hpc.ckpt` stores tensors and plain values (None, bool, int, float, str, bytes) in dicts with str/int keys,
lists and tuples. A framework's checkpoint holds a few other Python values; each becomes a one-key dict
`{"__nvrx__": [kind, payload]}` of plain values, which `decode` turns back:

| value | stored as |
|---|---|
| dict with other keys (tuples, floats, bools), or with the key `__nvrx__` | `["dict", [[key, value], ...]]` |
| set, frozenset | `["set" / "frozenset", [items]]` |
| pathlib path | `["path", str]` |
| int beyond 64 bits | `["bigint", str]` |
| torch.dtype, torch.device | `["dtype", "float32"]`, `["device", "cuda:0"]` |
| numpy array (not object dtype), numpy scalar | `["ndarray", tensor]`, `["npscalar", [dtype, value]]` |
| argparse.Namespace | `["namespace", {attributes}]` |
| enum member | its value (the class is not recorded: restoring it would mean importing a name from the file) |

Nothing decoded names a class, module or function: loading a checkpoint never imports or calls code it names.
Any other object is refused with the path where it sits (CheckpointError), except under the keys in `lossy`
(a checkpoint's hyperparameters, which a resume does not read): there it is kept as `["repr", repr(obj)]`
and decodes to that string, with one warning.
"""

from __future__ import annotations

import argparse
import enum
import logging
import pathlib
from collections.abc import Collection
from typing import Any

import torch

from nvrx_hpc.ckpt.tree import MAX_DEPTH
from nvrx_hpc.core.errors import CheckpointError

__all__ = ["encode", "decode", "TAG"]

log = logging.getLogger(__name__)

TAG = "__nvrx__"
_PLAIN = (type(None), bool, int, float, str, bytes)
_INT64 = (-(2**63), 2**64 - 1)


def _where(path: tuple) -> str:
    return "checkpoint" + "".join(f"[{p!r}]" for p in path)


def _plain_key(key: Any) -> bool:
    return isinstance(key, (str, int)) and not isinstance(key, bool) and key != TAG


def encode(value: Any, *, lossy: Collection[str] = ()) -> Any:
    """`value` with every non-storable value replaced by its tagged form (tensors are referenced, not copied).

    Args:
        lossy: top-level keys whose unknown objects are kept as their repr (with a warning) instead of refused.

    Raises:
        CheckpointError: an object that has no safe form, naming where it sits.
    """
    kept: list[str] = []

    def walk(node: Any, path: tuple, depth: int, loose: bool) -> Any:
        if depth > MAX_DEPTH:
            raise CheckpointError(f"{_where(path)} is nested deeper than {MAX_DEPTH} levels",
                                  hint="is there a cycle in the checkpoint?")
        if isinstance(node, torch.Tensor):
            return node
        if isinstance(node, enum.Enum):  # before the plain types: an IntEnum is an int
            return walk(node.value, path, depth + 1, loose)
        if isinstance(node, _PLAIN):
            if isinstance(node, int) and not isinstance(node, bool) and not _INT64[0] <= node <= _INT64[1]:
                return {TAG: ["bigint", str(node)]}
            return node
        if isinstance(node, dict):
            def inner(key: Any) -> bool:
                return loose or (depth == 0 and isinstance(key, str) and key in lossy)

            if all(_plain_key(k) for k in node):
                return {k: walk(v, (*path, k), depth + 1, inner(k)) for k, v in node.items()}
            pairs = [[walk(k, (*path, "<key>"), depth + 1, loose), walk(v, (*path, k), depth + 1, inner(k))]
                     for k, v in node.items()]
            return {TAG: ["dict", pairs]}
        if isinstance(node, list):
            return [walk(v, (*path, i), depth + 1, loose) for i, v in enumerate(node)]
        if isinstance(node, tuple):
            return tuple(walk(v, (*path, i), depth + 1, loose) for i, v in enumerate(node))
        if isinstance(node, (set, frozenset)):
            kind = "set" if isinstance(node, set) else "frozenset"
            return {TAG: [kind, [walk(v, (*path, "<item>"), depth + 1, loose) for v in node]]}
        if isinstance(node, pathlib.PurePath):
            return {TAG: ["path", str(node)]}
        if isinstance(node, torch.dtype):
            return {TAG: ["dtype", str(node).removeprefix("torch.")]}
        if isinstance(node, torch.device):
            return {TAG: ["device", str(node)]}
        if isinstance(node, argparse.Namespace):
            return {TAG: ["namespace", walk(vars(node), path, depth + 1, loose)]}
        numpy = _numpy_form(node)
        if numpy is not None:
            return numpy
        if loose:
            kept.append(_where(path))
            return {TAG: ["repr", repr(node)]}
        raise CheckpointError(
            f"cannot checkpoint a {type(node).__module__}.{type(node).__name__} at {_where(path)}",
            hint="keep tensors, numbers, strings, bytes, dicts, lists, tuples, sets, paths and numpy arrays in the "
            "checkpoint (no pickled objects); convert others in on_save_checkpoint",
        )

    out = walk(value, (), 0, False)
    if kept:
        log.warning("checkpoint: %d value(s) with no safe form kept as their repr (restored as str): %s",
                    len(kept), ", ".join(kept[:5]))
    return out


def _numpy_form(node: Any) -> dict | None:
    module = type(node).__module__
    if not module.startswith("numpy"):
        return None
    import numpy as np

    if isinstance(node, np.ndarray) and node.dtype != object:
        return {TAG: ["ndarray", torch.from_numpy(np.ascontiguousarray(node).copy())]}
    if isinstance(node, np.generic) and node.dtype != object:
        return {TAG: ["npscalar", [node.dtype.str, node.item()]]}
    return None


def decode(value: Any) -> Any:
    """The inverse of `encode` on what `nvrx_hpc.ckpt` restored (lists may come back for tuples: kept as is).

    Raises:
        CheckpointError: a tag this version does not know, or a malformed one.
    """
    if isinstance(value, dict):
        if len(value) == 1 and TAG in value:
            return _untag(value[TAG])
        return {k: decode(v) for k, v in value.items()}
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, tuple):
        return tuple(decode(v) for v in value)
    return value


def _untag(body: Any) -> Any:
    if not isinstance(body, (list, tuple)) or len(body) != 2 or not isinstance(body[0], str):
        raise CheckpointError(f"malformed tagged value {body!r:.80} in checkpoint", hint="the checkpoint is corrupt")
    kind, payload = body
    if kind == "dict":
        return {_hashable(decode(k)): decode(v) for k, v in payload}
    if kind in ("set", "frozenset"):
        items = [_hashable(decode(v)) for v in payload]
        return set(items) if kind == "set" else frozenset(items)
    if kind == "path":
        return pathlib.Path(payload)
    if kind == "bigint":
        return int(payload)
    if kind == "dtype":
        from nvrx_hpc.ckpt.tree import dtype_from_name

        return dtype_from_name(payload)
    if kind == "device":
        return torch.device(payload)
    if kind == "namespace":
        return argparse.Namespace(**decode(payload))
    if kind == "ndarray":
        return payload.numpy()
    if kind == "npscalar":
        import numpy as np

        return np.dtype(payload[0]).type(payload[1])
    if kind == "repr":
        return str(payload)
    raise CheckpointError(f"unknown tagged value {kind!r} in checkpoint", hint="written by a newer nvrx-hpc?")


def _hashable(value: Any) -> Any:
    """Restored lists stand where tuples were (msgpack has one array type): a key or set item needs a tuple."""
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    return value
