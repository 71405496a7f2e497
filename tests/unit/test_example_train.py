"""examples/train.py with 2 gloo ranks as plain local processes (no Slurm): determinism, crash and resume."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train.py"
ARGS = ["--steps", "10", "--ckpt-every", "5", "--step-time", "0"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(out: Path, *, world: int = 2, fault: str = "", restart: int = 0, timeout: float = 90) -> list[tuple[int, str]]:
    """Start `world` ranks, wait for all; returns (exit code, stdout) per rank."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("NVRX_", "SLURM_"))}
    base.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(world),
                GLOO_SOCKET_IFNAME="lo", NVRX_RESTART_COUNT=str(restart), NVRX_TEST_FAULT=fault)
    procs = [
        subprocess.Popen([sys.executable, str(TRAIN), *ARGS, "--out", str(out)],
                         env={**base, "RANK": str(r), "LOCAL_RANK": str(r)},
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for r in range(world)
    ]
    results = []
    try:
        for proc in procs:
            stdout, _ = proc.communicate(timeout=timeout)
            results.append((proc.returncode, stdout))
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    return results


def test_fault_free_then_crash_and_resume_give_the_same_model(tmp_path):
    clean = _run(tmp_path / "clean")
    assert [code for code, _ in clean] == [0, 0], clean
    assert "nvrx-train rank=1 step=10" in clean[1][1]
    digest = (tmp_path / "clean" / "final_hash.txt").read_text().strip()
    assert f"final_hash={digest}" in clean[0][1] and len(digest) == 64
    assert sorted(p.name for p in (tmp_path / "clean" / "ckpt").iterdir()) == ["step-10.pt", "step-5.pt"]

    crashed = _run(tmp_path / "faulty", fault="crash:rank=1:step=7")
    assert crashed[1][0] == -9, crashed[1][1]  # SIGKILL at the start of step 7
    assert crashed[0][0] != 0  # rank 0 loses its peer inside the all-reduce
    assert "nvrx-train rank=1 step=6" in crashed[1][1] and "step=7" not in crashed[1][1]
    assert not (tmp_path / "faulty" / "final_hash.txt").exists()

    resumed = _run(tmp_path / "faulty", fault="crash:rank=1:step=7", restart=1)  # the fault is for restart 0
    assert [code for code, _ in resumed] == [0, 0], resumed
    assert "resumed from step 5" in resumed[0][1] and "nvrx-train rank=0 step=6" in resumed[0][1]
    assert (tmp_path / "faulty" / "final_hash.txt").read_text().strip() == digest


def test_fault_specs_parse_and_bad_ones_are_refused(monkeypatch):
    spec = importlib.util.spec_from_file_location("nvrx_example_train", TRAIN)
    train = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "nvrx_example_train", train)  # dataclasses look their module up
    spec.loader.exec_module(train)
    faults = train.parse_faults("crash:rank=1:step=7, exit:rank=0:step=5:code=3:restart=1,noprogress:step=6")
    assert [(f.kind, f.rank, f.step, f.code, f.restart) for f in faults] == [
        ("crash", 1, 7, 1, 0), ("exit", 0, 5, 3, 1), ("noprogress", None, 6, 1, 0)]
    assert faults[2].applies("noprogress", rank=3, step=6, restart=4)
    assert not faults[0].applies("crash", rank=1, step=7, restart=1)
    slow = train.parse_faults("slow:step=3")[0]  # every rank, every step from 3 on, first attempt only
    assert [slow.applies("slow", rank=r, step=s, restart=0) for r, s in ((0, 2), (1, 3), (3, 9))] == [False, True, True]
    assert not slow.applies("slow", rank=0, step=9, restart=1)
    for bad, message in [("crash:rank=1", "needs step=S"), ("melt:rank=1:step=2", "unknown fault kind"),
                         ("hang:rank=x:step=2", "bad field"), ("stuck:step=2", "and rank=R")]:
        with pytest.raises(ValueError, match=message):
            train.parse_faults(bad)
