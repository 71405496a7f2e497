"""docs/quickstart.md stays true: its train.py, taken from the page, runs under `nvrx-hpc submit` on the real
cluster (2 nodes + 1 spare, user mode); a rank killed mid-run is replaced and training resumes from its
asynchronous checkpoint."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import sys
import time
from pathlib import Path

import pytest

from nvrx_hpc.launcher.status import read_status

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "quickstart.md"


def _train_py() -> str:
    blocks = re.findall(r"```python\n(# train\.py\n.*?)```", PAGE.read_text(), re.S)
    assert len(blocks) == 1, "docs/quickstart.md must hold exactly one ```python block starting with # train.py"
    return blocks[0]


def _events(run_dir: Path) -> list[dict]:
    path = run_dir / "events.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _rank_pid(run_dir: Path, rank: int) -> int | None:
    """The pid of a training rank past step 6, from the launcher's status file (what `nvrx-hpc status` shows)."""
    info = ((read_status(run_dir) or {}).get("ranks") or {}).get(str(rank)) or {}
    if info.get("pid") and (info.get("iteration") or 0) >= 6:
        return int(info["pid"])
    return None


def test_quickstart_train_py_survives_a_killed_rank(cluster, tmp_path):
    script = tmp_path / "train.py"
    script.write_text(_train_py())
    run_dir = tmp_path / "run"
    env = {"STEPS": "800", "PYTHONUNBUFFERED": "1"}
    done = cluster.run([sys.executable, "-m", "nvrx_hpc", "submit", "--nodes", "2", "--spares", "1", "--time", "5",
                        "--heartbeat-timeout", "30", "--run-dir", str(run_dir), "--", sys.executable, str(script)],
                       timeout=60, env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    out = run_dir / f"slurm-{job}.out"
    try:
        deadline = time.monotonic() + 150
        killed = None
        while time.monotonic() < deadline and killed is None:
            pid = _rank_pid(run_dir, 1)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)  # every node is this host: the rank's pid is ours to signal
                killed = pid
            time.sleep(0.3)
        assert killed, f"rank 1 never reached step 6; events: {_events(run_dir)[-5:]}"
        info = cluster.dev.backend.job(int(job))
        while not info.finished and time.monotonic() < deadline + 60:
            time.sleep(0.5)
            info = cluster.dev.backend.job(int(job))
        text = out.read_text() if out.exists() else ""
        events = _events(run_dir)
        kinds = [e.get("kind") for e in events]
        assert info.finished and info.exit_code == 0, f"{info.state} {info.exit_code}\n{text[-3000:]}\n{kinds}"
        assert "launcher.restart" in kinds, kinds  # a crash on a healthy node restarts in place (no exclusion)
        steps = "".join(p.read_text() for p in sorted((run_dir / "logs").glob("step-*.log")))  # srun --label
        assert re.search(r"resumed from step \d+", steps) and "done at step 800" in steps, steps[-3000:]
        restored = [e for e in events if e.get("kind") == "ckpt.restored"]
        assert restored and sum(restored[0]["detail"]["sources"].values()) >= 2, restored  # restored in place
    finally:
        cluster.run(["scancel", job], timeout=30)
        shutil.rmtree(f"/dev/shm/{os.environ.get('USER', 'me')}-nvrx/{job}", ignore_errors=True)
