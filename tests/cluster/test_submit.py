"""`nvrx-hpc submit` against the real local cluster: sbatch accepts the rendered script, quoting included.

The command is a trivial `true` run by `nvrx-hpc run`. This test checks what the template owns: sbatch
accepted the script, parsed every #SBATCH line (hostile job name, run dir with spaces and quotes,
output file in the run dir) and the job reached a final state. Whether `nvrx-hpc run` itself succeeds
is tests/cluster/test_restart.py's business; its outcome is only reported here on failure.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

JOB_NAME = """nvrx submit "test"; it's $(id) `id` #1"""


def test_submit_a_trivial_command_reaches_a_final_state(cluster, tmp_path):
    run_dir = tmp_path / "run dir 'q' $(x)"
    done = cluster.run(
        [sys.executable, "-m", "nvrx_hpc", "submit", "--nodes", "1", "--spares", "1", "--time", "5",
         "--job-name", JOB_NAME, "--run-dir", str(run_dir), "--", "true"],
        timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    assert job.isdigit(), done.stdout
    assert (run_dir / "job.sbatch").read_text().startswith("#!/bin/bash\n")
    try:
        info = cluster.dev.backend.job(int(job))
        assert info.name == JOB_NAME  # sbatch parsed the quoted #SBATCH --job-name exactly
        assert Path(info.stdout) == run_dir / f"slurm-{job}.out"
        assert len(info.nodes) == 2 or info.state == "PENDING"
        deadline = time.monotonic() + 120
        while not info.finished and time.monotonic() < deadline:
            time.sleep(0.5)
            info = cluster.dev.backend.job(int(job))
        out = run_dir / f"slurm-{job}.out"
        assert info.finished, f"job {job} still {info.state} after 120 s"
        print(f"job {job}: {info.state}, exit {info.exit_code}; output:\n{out.read_text() if out.exists() else '-'}")
    finally:
        cluster.run(["scancel", job], timeout=30)
