"""In-process restart under `nvrx-hpc run --inprocess` on the real local cluster (examples/train_inprocess.py).

Two jobs of 2 nodes x 2 gloo ranks, each node with one warm spare rank, side by side: one runs through; the
other meets, in turn, a rank raising, a rank SIGKILLed (its rank goes to a spare), a rank hanging outside the
collective (declared lost after the soft timeout, killed by its agent, replaced by the second spare) and a
last SIGKILL with no spare left, which escalates: the launcher stops and restarts the step.
The first three are recovered without a new step; both jobs end with the same model hash.
"""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

from _faults import REPO, bb_dir, events, final_hash, kinds, transcript, wait_job

TRAIN = REPO / "examples" / "train_inprocess.py"
STEPS = 30
FAULTS = "raise@5:1,sigkill@10:2,hang@15:3,sigkill@20:0"


def _submit(cluster, tmp_path: Path, name: str, faults: str) -> tuple[str, Path]:
    run_dir = tmp_path / name
    argv = [sys.executable, "-m", "nvrx_hpc", "run", "--spares", "0", "--run-dir", str(run_dir), "--stop-grace", "2",
            "--tasks-per-node", "2", "--inprocess", "--spare-ranks", "1", "--heartbeat-timeout", "60",
            "--", sys.executable, str(TRAIN), "--steps", str(STEPS), "--step-time", "0.05", "--hidden", "32",
            "--bb-dir", bb_dir(cluster, tmp_path, name), "--faults", faults]  # fmt: skip
    env = {"NVRX_INPROCESS__PG_TIMEOUT_S": "3", "NVRX_INPROCESS__SOFT_TIMEOUT_S": "3"}
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    script = tmp_path / f"{name}.sh"
    script.write_text("#!/bin/bash\n" + exports + "exec " + shlex.join(argv) + "\n")
    done = cluster.run(["sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=2", "--time=5", "--no-kill",
                        f"--output={tmp_path / name}.out", str(script)], timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0], run_dir


def test_raise_sigkill_and_hang_recover_in_process_and_a_loss_without_spare_escalates(cluster, tmp_path):
    clean, clean_dir = _submit(cluster, tmp_path, "ip-clean", "")
    faulty, faulty_dir = _submit(cluster, tmp_path, "ip-faults", FAULTS)
    assert wait_job(cluster, clean, timeout=240)["state"] == "COMPLETED", transcript(tmp_path, "ip-clean")
    assert wait_job(cluster, faulty, timeout=300)["state"] == "COMPLETED", transcript(tmp_path, "ip-faults")

    assert "inprocess.restart" not in kinds(clean_dir) and kinds(clean_dir).count("launcher.step.started") == 1
    restarts = [e for e in events(faulty_dir) if e["kind"] == "inprocess.restart"]
    reasons = " | ".join(e["reason"] for e in restarts)
    assert "injected exception" in reasons and "died" in reasons, reasons
    lost = sorted({slot for e in restarts for slot in e["detail"]["lost"]})
    assert len(lost) >= 2, restarts  # the killed rank and the hung one (the last loss restarts the step)
    meetings = [e for e in events(faulty_dir) if e["kind"] == "inprocess.meeting" and e["detail"]["replaced"]]
    assert meetings, "no spare took a lost rank's place"
    # the first three faults cost no new step; the fourth (no spare left) restarts it once
    started = [e for e in events(faulty_dir) if e["kind"] == "launcher.step.started"]
    assert len(started) == 2, transcript(tmp_path, "ip-faults")
    assert "inprocess.no_spare" in kinds(faulty_dir)
    assert final_hash(faulty_dir) == final_hash(clean_dir)
