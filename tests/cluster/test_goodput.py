"""The goodput benchmark's short version on the local cluster: 3 minutes of training with a random fault
(rank kill, rank hang, node loss, simulated Xid) every 60 s, 2 nodes x 2 gloo ranks and a spare. Every
fault must be recovered from and the final model must equal the fault-free run's, bit for bit. The
effective training time is the benchmark's figure (docs/scale.md), not asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_three_minutes_of_a_fault_a_minute_end_with_the_fault_free_model(cluster):
    done = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "goodput.py"), "--minutes", "3", "--mtbf", "60", "--nodes", "2",
         "--tasks-per-node", "2", "--spares", "1", "--state-dir", str(cluster.state_dir), "--json"],
        env={**os.environ, **cluster.env}, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["faults"] >= 2, result
    assert len(result["recoveries_s"]) == result["faults"], result  # every fault was recovered from
    assert result["hash_equal"], result
    assert 0 < result["ettr"] <= 1, result
