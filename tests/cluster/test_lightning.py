"""PyTorch Lightning DDP under `nvrx-hpc run` on the real local cluster (examples/train_lightning.py).

Two jobs of 2 nodes x 2 ranks run side by side: one uninterrupted, one whose rank 1 is SIGKILLed after step 7.
The launcher restarts the second in place, NvrxCheckpointIO resumes it from the newest committed version (step
4, with partner copies on the other node), and every step's loss on every rank, replayed steps included, equals
the uninterrupted run's bit for bit.
"""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest
from _faults import REPO, bb_dir, events, kinds, sbatch_exec, transcript, wait_job

pytest.importorskip("pytorch_lightning")

TRAIN = REPO / "examples" / "train_lightning.py"
STEPS, EVERY, KILL_STEP, KILL_RANK = 16, 4, 7, 1


def _submit(cluster, tmp_path: Path, name: str, env: dict[str, str]) -> tuple[str, Path]:
    run_dir = tmp_path / name
    argv = [sys.executable, "-m", "nvrx_hpc", "run", "--spares", "0", "--run-dir", str(run_dir), "--stop-grace", "2",
            "--", sys.executable, str(TRAIN), "--steps", str(STEPS), "--ckpt-every", str(EVERY),
            "--bb-dir", bb_dir(cluster, tmp_path, name), "--out", str(run_dir / "out")]  # fmt: skip
    return sbatch_exec(cluster, tmp_path, name, argv, env), run_dir


def _losses(run_dir: Path, rank: int) -> dict[int, set[str]]:
    """step -> the loss values this rank logged for it (a set: a resumed run logs the replayed steps again)."""
    seen: dict[int, set[str]] = collections.defaultdict(set)
    for line in (run_dir / "out" / f"loss-rank{rank}.txt").read_text().splitlines():
        _, step, _, value = line.split()
        seen[int(step)].add(value)
    return seen


def test_lightning_ddp_survives_a_killed_rank_and_matches_an_uninterrupted_run(cluster, tmp_path):
    clean, clean_dir = _submit(cluster, tmp_path, "lt-clean", {})
    faulty, faulty_dir = _submit(cluster, tmp_path, "lt-kill",
                                 {"NVRX_FAULT_KILL_STEP": str(KILL_STEP), "NVRX_FAULT_RANK": str(KILL_RANK)})
    assert wait_job(cluster, clean, timeout=210)["state"] == "COMPLETED", transcript(tmp_path, "lt-clean")
    assert wait_job(cluster, faulty, timeout=210)["state"] == "COMPLETED", transcript(tmp_path, "lt-kill")

    assert "launcher.restart" not in kinds(clean_dir)
    assert (faulty_dir / "out" / "fault-fired").exists()
    culprit = next(e for e in events(faulty_dir) if e["kind"] == "launcher.culprit")
    assert culprit["rank"] == KILL_RANK and "signal 9" in culprit["reason"], culprit
    assert kinds(faulty_dir).count("launcher.step.started") == 2
    resumed = (faulty_dir / "logs" / "step-1.log").read_text()
    assert "resuming from nvrx:step-4" in resumed and "FINAL step=16" in resumed, resumed[-3000:]

    for rank in range(4):
        reference, run = _losses(clean_dir, rank), _losses(faulty_dir, rank)
        assert sorted(reference) == list(range(STEPS)) and all(len(v) == 1 for v in reference.values())
        assert run == reference, f"rank {rank}: {dict(run)} != {dict(reference)}"
        replayed = (faulty_dir / "out" / f"loss-rank{rank}.txt").read_text().count("\n") - STEPS
        assert replayed >= KILL_STEP - 4, replayed  # steps 4..6 (and 7 where a rank began it) ran twice
