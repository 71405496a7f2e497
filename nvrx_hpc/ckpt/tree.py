"""State trees without pickle: nested dicts/lists/tuples of tensors and plain values, as a skeleton + tensors.

The skeleton is plain msgpack data: `{"t": i}` a tensor (index into the tensor list), `{"d": [[key, node],
...]}` a dict (str or int keys, order kept), `{"l": [...]}` a list, `{"u": [...]}` a tuple, `{"v": x}` a
plain value (None, bool, int, float, str, bytes). Anything else is refused with the path where it sits.
"""

from __future__ import annotations

from typing import Any

import torch

from nvrx_hpc.core.errors import CheckpointError

__all__ = ["flatten", "unflatten", "load_into", "dtype_from_name", "dtype_name", "MAX_DEPTH"]

MAX_DEPTH = 64
_PLAIN = (type(None), bool, int, float, str, bytes)
_INT_RANGE = (-(2**63), 2**64 - 1)


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def dtype_from_name(name: str) -> torch.dtype:
    """The torch dtype called `name` ("bfloat16"); CheckpointError when there is none."""
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise CheckpointError(f"unknown tensor dtype {name!r} in checkpoint", hint="written by a newer torch?")
    return dtype


def _where(path: tuple) -> str:
    return "state" + "".join(f"[{p!r}]" for p in path)


def flatten(state: Any) -> tuple[Any, list[torch.Tensor], list[str]]:
    """(skeleton, tensors, tensor paths) of a state tree. Tensors are referenced, not copied.

    Raises:
        CheckpointError: an unsupported value, key or tensor kind, naming where it sits.
    """
    tensors: list[torch.Tensor] = []
    paths: list[str] = []

    def walk(node: Any, path: tuple, depth: int) -> Any:
        if depth > MAX_DEPTH:
            raise CheckpointError(f"state is nested deeper than {MAX_DEPTH} levels at {_where(path)}",
                                  hint="is there a cycle in the state?")
        if isinstance(node, torch.Tensor):
            _check_tensor(node, path)
            tensors.append(node)
            paths.append("/".join(str(p) for p in path))
            return {"t": len(tensors) - 1}
        if isinstance(node, dict):
            items = []
            for key, value in node.items():
                if not isinstance(key, (str, int)) or isinstance(key, bool):
                    raise CheckpointError(
                        f"dict key {key!r} ({type(key).__name__}) at {_where(path)} is not a str or int",
                        hint="use str or int keys in checkpointed state",
                    )
                items.append([key, walk(value, (*path, key), depth + 1)])
            return {"d": items}
        if isinstance(node, list):
            return {"l": [walk(v, (*path, i), depth + 1) for i, v in enumerate(node)]}
        if isinstance(node, tuple):
            return {"u": [walk(v, (*path, i), depth + 1) for i, v in enumerate(node)]}
        if isinstance(node, _PLAIN):
            if isinstance(node, int) and not _INT_RANGE[0] <= node <= _INT_RANGE[1]:
                raise CheckpointError(f"int at {_where(path)} does not fit in 64 bits", hint="store it as a str")
            return {"v": node}
        raise CheckpointError(
            f"cannot checkpoint a {type(node).__module__}.{type(node).__name__} at {_where(path)}",
            hint="state may hold torch tensors, dicts, lists, tuples, None, bool, int, float, str and bytes; "
            "convert other objects (numpy arrays: torch.from_numpy; enums: their value)",
        )

    skeleton = walk(state, (), 0)
    return skeleton, tensors, paths


def _check_tensor(t: torch.Tensor, path: tuple) -> None:
    if t.layout != torch.strided or t.is_quantized or t.is_meta or t.device.type not in ("cpu", "cuda"):
        raise CheckpointError(
            f"tensor at {_where(path)} is {t.layout}, device {t.device}{', quantized' if t.is_quantized else ''}",
            hint="checkpoint dense CPU or CUDA tensors (call .to_dense(), .dequantize() or .to_local() first)",
        )


def unflatten(skeleton: Any, tensors: list[torch.Tensor]) -> Any:
    """The tree described by `skeleton`, with `tensors` in place of the tensor references."""
    kind, body = _node(skeleton)
    if kind == "t":
        return tensors[body]
    if kind == "d":
        return {key: unflatten(value, tensors) for key, value in body}
    if kind == "l":
        return [unflatten(value, tensors) for value in body]
    if kind == "u":
        return tuple(unflatten(value, tensors) for value in body)
    return body


def _node(skeleton: Any) -> tuple[str, Any]:
    if not isinstance(skeleton, dict) or len(skeleton) != 1:
        raise CheckpointError(f"malformed checkpoint skeleton node {skeleton!r:.80}", hint="the shard is corrupt")
    ((kind, body),) = skeleton.items()
    if kind not in ("t", "d", "l", "u", "v"):
        raise CheckpointError(f"unknown checkpoint skeleton node {kind!r}", hint="written by a newer nvrx-hpc?")
    return kind, body


def load_into(into: Any, skeleton: Any, tensors: list[torch.Tensor]) -> Any:
    """Copy a checkpointed tree into `into` in place and return it (or the new value when `into` is a leaf).

    Tensors already in `into` receive the values (`copy_`, any device) and must match shape and dtype; plain
    values, and keys or list items `into` lacks, are set from the checkpoint (tensors then as CPU clones).

    Raises:
        CheckpointError: a shape, dtype or container mismatch, naming where it sits.
    """
    return _load(into, skeleton, tensors, ())


def _load(into: Any, skeleton: Any, tensors: list[torch.Tensor], path: tuple) -> Any:
    kind, body = _node(skeleton)
    if kind == "t":
        src = tensors[body]
        if isinstance(into, torch.Tensor):
            if into.shape != src.shape or into.dtype != src.dtype:
                raise CheckpointError(
                    f"tensor at {_where(path)}: checkpoint has {dtype_name(src.dtype)}{list(src.shape)}, "
                    f"the state to load into has {dtype_name(into.dtype)}{list(into.shape)}",
                    hint="load into a state built the same way as the one that was saved",
                )
            with torch.no_grad():
                into.copy_(src)
            return into
        return src.clone()
    if kind == "d":
        if into is None:
            into = {}
        elif not isinstance(into, dict):
            _mismatch(into, "dict", path)
        for key, value in body:
            into[key] = _load(into.get(key), value, tensors, (*path, key))
        return into
    if kind == "l" and isinstance(into, list):
        for i, value in enumerate(body):
            if i < len(into):
                into[i] = _load(into[i], value, tensors, (*path, i))
            else:
                into.append(_load(None, value, tensors, (*path, i)))
        del into[len(body) :]
        return into
    if kind in ("l", "u"):
        if into is not None and not isinstance(into, (list, tuple)):
            _mismatch(into, "list" if kind == "l" else "tuple", path)
        old = list(into) if into is not None else []
        items = [_load(old[i] if i < len(old) else None, v, tensors, (*path, i)) for i, v in enumerate(body)]
        return tuple(items) if kind == "u" else items
    return body


def _mismatch(into: Any, want: str, path: tuple) -> Any:
    raise CheckpointError(
        f"at {_where(path)} the checkpoint has a {want}, the state to load into has a {type(into).__name__}",
        hint="load into a state built the same way as the one that was saved",
    )
