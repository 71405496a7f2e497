"""Attribution on the real local cluster: a failed batch job gets its report automatically through the
Epilog (`nvrx-hpc epilog` -> `trigger_from_epilog`), once per job, without anyone asking.

The job plays the launcher: it writes `<submit dir>/nvrx-runs/<job id>/logs/step-0.log` with
`srun --label` output of four ranks on two nodes, where rank 2 raises, and exits 1. The Epilog of
Slurm 22.05 knows no submit directory, so the trigger asks `scontrol` for the job's WorkDir.
"""

from __future__ import annotations

import json
import os
import time

import pytest

pytestmark = pytest.mark.slurm

REPORT_WAIT = 90  # Epilog start + a detached analysis (python start-up dominates)

TASK = (
    "import os, sys; r = int(os.environ['SLURM_PROCID']); "
    "print(f'[2024-05-01 12:00:0{r}] iteration 1 | lm loss: 2.0E+00 |', flush=True); "
    "sys.exit(0) if r != 2 else (_ for _ in ()).throw(ValueError('shape mismatch: expected [4, 8], got [4, 9]'))"
)


def _script(python: str) -> str:
    return f"""#!/bin/sh
run="$PWD/nvrx-runs/$SLURM_JOB_ID"
mkdir -p "$run/logs"
srun --label -N2 -n4 {python} -c "{TASK}" > "$run/logs/step-0.log" 2>&1
exit 1
"""


def test_failed_job_gets_its_report_through_the_epilog(cluster, tmp_path):
    submit = tmp_path / "submit dir"  # a space, as users' paths have
    submit.mkdir()
    os.chmod(tmp_path, 0o755)
    script = submit / "job.sh"
    script.write_text(_script(os.environ.get("PYTHON", "python3")))
    env = {k: v for k, v in os.environ.items() if not k.startswith("NVRX_")}
    done = cluster.run(
        ["sbatch", "--parsable", "--wait", "-N2", "-n4", "-t1", "-J", "attr epilog", "-o", str(submit / "%j.out"),
         "--chdir", str(submit), str(script)],
        timeout=120, env=env,
    )  # fmt: skip
    print(done.stdout, done.stderr)
    job = done.stdout.strip().split(";")[0]
    assert job.isdigit(), done.stderr
    assert done.returncode != 0  # sbatch --wait returns the job's exit code
    run = submit / "nvrx-runs" / job
    log = (run / "logs" / "step-0.log").read_text()
    assert "2: " in log and "ValueError" in log, log
    report = run / "report.json"
    deadline = time.monotonic() + REPORT_WAIT
    while not (report.exists() and (run / "report.html").exists()):
        if time.monotonic() > deadline:
            detail = (run / ".attribution.log").read_text() if (run / ".attribution.log").exists() else "no log"
            pytest.fail(
                f"no report in {run} {REPORT_WAIT} s after the job ended; is `trigger_from_epilog(os.environ)` "
                f"called by nvrx_hpc/cli/hooks.py's epilog? analysis log: {detail}"
            )
        time.sleep(0.5)
    time.sleep(0.5)
    data = json.loads(report.read_text())
    print(json.dumps({k: data[k] for k in ("category", "root_cause", "culprit", "restartable")}, indent=1))
    assert data["job_id"] == job
    assert data["category"] == "application" and data["restartable"] is False
    assert data["culprit"]["ranks"] == [2]
    assert data["culprit"]["nodes"] and data["culprit"]["nodes"][0] in cluster.nodes
    assert len(list(run.glob(".attribution-*.lock"))) == 1  # one node of the two ran it
    assert (run / "report.md").read_text().startswith(f"# Failure report for job {job}")
