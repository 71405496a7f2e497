"""examples/train_ckpt.py on real processes with the torch.distributed (gloo) transport, no Slurm needed.

Four ranks on two simulated nodes: a run interrupted at step 4, whose "node0" burst buffer (ranks 0 and 1)
is then wiped, resumes from the partners' copies and ends with the same state hash as a run that was never
interrupted.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "train_ckpt.py"
TIMEOUT = 240
RANKS = 4


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(args: list[str], logs: Path) -> list[subprocess.Popen]:
    """The example's ranks, started as torchrun would start them (RANK, WORLD_SIZE, MASTER_ADDR/PORT)."""
    port = _free_port()
    logs.mkdir(parents=True, exist_ok=True)
    procs = []
    for rank in range(RANKS):
        env = {**os.environ, "RANK": str(rank), "WORLD_SIZE": str(RANKS), "MASTER_ADDR": "127.0.0.1",
               "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo", "PYTHONPATH": str(REPO)}
        out = open(logs / f"rank{rank}.log", "w")  # noqa: SIM115 - closed with the process
        procs.append(subprocess.Popen([sys.executable, str(EXAMPLE), "--simulate-nodes", "2", *args], env=env,
                                      stdout=out, stderr=subprocess.STDOUT))
    return procs


def finish(procs: list[subprocess.Popen], logs: Path) -> str:
    try:
        codes = [p.wait(timeout=TIMEOUT) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    text = (logs / "rank0.log").read_text()
    assert codes == [0] * RANKS, f"exit codes {codes}\n" + "\n".join(
        (logs / f"rank{r}.log").read_text()[-2000:] for r in range(RANKS))
    return text


def final_hash(text: str) -> str:
    match = re.search(r"^FINAL step=(\d+) hash=([0-9a-f]+)$", text, re.M)
    assert match, text
    return match.group(2)


def test_resumed_run_matches_an_uninterrupted_one(tmp_path):
    reference = start(["--steps", "8", "--ckpt-every", "2", "--bb-dir", str(tmp_path / "ref" / "{domain}")],
                      tmp_path / "log-ref")
    first = start(["--steps", "4", "--ckpt-every", "2", "--bb-dir", str(tmp_path / "bb" / "{domain}")],
                  tmp_path / "log-1")
    expected = final_hash(finish(reference, tmp_path / "log-ref"))
    text = finish(first, tmp_path / "log-1")
    assert "no checkpoint: starting at step 0" in text
    shutil.rmtree(tmp_path / "bb" / "node0")  # node0 (ranks 0 and 1) lost its burst buffer
    resumed = finish(start(["--steps", "8", "--ckpt-every", "2", "--bb-dir", str(tmp_path / "bb" / "{domain}")],
                           tmp_path / "log-2"), tmp_path / "log-2")
    assert "resumed from step 4 (sources {'local': 2, 'peer': 2})" in resumed
    assert final_hash(resumed) == expected
