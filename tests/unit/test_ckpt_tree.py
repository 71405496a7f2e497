"""State trees without pickle: every dtype and plain value round-trips; what cannot be saved is named."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from nvrx_hpc.ckpt.staging import HostArena, clear_gaps, layout_entries
from nvrx_hpc.ckpt.tree import flatten, load_into, unflatten
from nvrx_hpc.core.errors import CheckpointError

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8, torch.uint8, torch.int16,
          torch.int32, torch.int64, torch.bool, torch.complex64, torch.float8_e4m3fn]


def sample_state() -> dict:
    g = torch.Generator().manual_seed(1)
    return {
        "model": {f"t_{str(d).removeprefix('torch.')}": (torch.randn(3, 5, generator=g) * 10).to(d) for d in DTYPES},
        "scalar": torch.tensor(2.5, dtype=torch.bfloat16),
        "empty": torch.empty(0, 7),
        "strided": torch.arange(24.0).reshape(4, 6)[:, ::2],
        "opt": {"state": {0: {"step": torch.tensor(3.0)}}, "param_groups": [{"lr": 0.1, "betas": (0.9, 0.99)}]},
        "plain": [None, True, -(2**63), 2**64 - 1, 1.5, "x", b"\x00\xff", (1, [2, {"k": 3}])],
    }


def roundtrip(state):
    skeleton, tensors, paths = flatten(state)
    arena = HostArena()
    arena.stage(tensors, paths)
    return unflatten(skeleton, [t.clone() for t in arena.tensors()]), paths


def assert_same(a, b):
    assert type(a) is type(b)
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert torch.equal(a.view(torch.uint8) if a.dtype == torch.float8_e4m3fn else a,
                           b.view(torch.uint8) if b.dtype == torch.float8_e4m3fn else b)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            assert_same(x, y)
    else:
        assert a == b


def test_every_dtype_and_plain_value_round_trips():
    state = sample_state()
    back, paths = roundtrip(state)
    assert_same(state, back)
    assert "model/t_bfloat16" in paths and "opt/state/0/step" in paths


def test_arena_is_reused_and_padding_is_zero():
    arena = HostArena()
    t = [torch.ones(3, dtype=torch.int8), torch.ones(5, dtype=torch.int8)]
    arena.stage(t, ["a", "b"])
    cap = arena.capacity
    arena.data[:] = 7
    arena.stage(t, ["a", "b"])
    assert arena.capacity == cap
    entries, total = layout_entries(t, ["a", "b"])
    assert [e.offset for e in entries] == [0, 64] and total == 128
    assert arena.data[3:64].tolist() == [0] * 61 and arena.data[69:].tolist() == [0] * 59
    data = arena.data.copy()
    data[:] = 9
    clear_gaps(data, entries)
    assert data[3] == 0 and data[0] == 9


def test_load_into_copies_in_place_and_fills_what_is_missing():
    state = sample_state()
    skeleton, tensors, _ = flatten(state)
    w = torch.zeros(3, 5)
    into = {"model": {"t_float32": w}, "opt": {"state": {}}}
    load_into(into, skeleton, tensors)
    assert into["model"]["t_float32"] is w and torch.equal(w, state["model"]["t_float32"])
    assert torch.equal(into["opt"]["state"][0]["step"], torch.tensor(3.0))
    assert into["plain"][7] == (1, [2, {"k": 3}])


def test_load_into_refuses_a_shape_mismatch_with_the_path():
    skeleton, tensors, _ = flatten({"a": {"b": torch.zeros(2, 3)}})
    with pytest.raises(CheckpointError, match=r"state\['a'\]\['b'\]: checkpoint has float32\[2, 3\]"):
        load_into({"a": {"b": torch.zeros(3, 2)}}, skeleton, tensors)


@pytest.mark.parametrize(
    ("state", "words"),
    [
        ({"x": {1, 2}}, r"cannot checkpoint a builtins.set at state\['x'\]"),
        ({"x": [object()]}, r"at state\['x'\]\[0\]"),
        ({(1, 2): 3}, r"dict key \(1, 2\) \(tuple\) at state is not a str or int"),
        ({"big": 2**70}, "does not fit in 64 bits"),
        ({"s": torch.zeros(3).to_sparse()}, "is torch.sparse_coo"),
    ],
)
def test_unsupported_values_are_named(state, words):
    with pytest.raises(CheckpointError, match=words) as err:
        flatten(state)
    assert err.value.hint


def test_cycles_are_refused():
    loop: list = []
    loop.append(loop)
    with pytest.raises(CheckpointError, match="nested deeper"):
        flatten({"loop": loop})


def test_no_pickle_in_the_checkpoint_layer():
    """Nothing under nvrx_hpc/ckpt imports pickle (or a pickling helper)."""
    for path in (Path(__file__).resolve().parents[2] / "nvrx_hpc" / "ckpt").glob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
        modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not ({"pickle", "cloudpickle", "dill"} & (names | modules)), path
        assert "torch.save" not in path.read_text() and "pkl5" not in path.read_text(), path
