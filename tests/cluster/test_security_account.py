"""The dev cluster's ordinary job account: jobs submitted as `nvrxjob` run as that user, with nvrx-hpc usable."""

from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

import pytest
from _as_user import job_account, run_as, user_dir
from _hook_log import hook_records

pytestmark = pytest.mark.slurm


def test_a_job_of_the_job_account_runs_as_that_user(cluster):
    account = job_account()
    work = user_dir(account, "account")
    done = run_as(cluster, account, ["srun", "-N1", "-t1", "--quiet", "python3", "-c",
                                     "import os, nvrx_hpc; print(os.getuid(), os.getgid(), nvrx_hpc.__name__)"],
                  timeout=60, cwd=work)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(account.uid), str(account.gid), "nvrx_hpc"]
    queued = run_as(cluster, account, ["sbatch", "--parsable", "--wait", "-N1", "-t1", "--wrap", "id -u > uid.txt"],
                    timeout=90, cwd=work)  # fmt: skip
    assert queued.returncode == 0, queued.stderr
    assert (work / "uid.txt").read_text().strip() == str(account.uid)
    assert (work / "uid.txt").stat().st_uid == account.uid


TRAIN = Path(__file__).resolve().parents[2] / "examples" / "train.py"


@pytest.mark.parametrize("mode", ["user", "site"])
def test_nvrx_run_as_the_job_account(cluster, mode):
    """A whole `nvrx-hpc run` of the job account (user mode, and site mode with the Prolog's agents): it trains
    to the end, everything in its run directory is its own, and its socket and burst-buffer dirs are its, 0700."""
    account = job_account()
    work = user_dir(account, f"run-{mode}")
    run_dir = work / "run"
    argv = [sys.executable, "-m", "nvrx_hpc", "run", "--tasks-per-node", "2", "--run-dir", str(run_dir),
            "--stop-grace", "2", "--mode", mode, "--", sys.executable, str(TRAIN), "--steps", "6",
            "--ckpt-every", "3", "--step-time", "0.05", "--out", str(run_dir)]  # fmt: skip
    script = work / "job.sh"
    script.write_text("#!/bin/sh\nexec " + " ".join(f"'{a}'" for a in argv) + "\n")
    os.chown(script, account.uid, account.gid)
    extra = ["--nvrx"] if mode == "site" else []
    sbatch = ["sbatch", "--parsable", "--wait", "-N1", "--ntasks-per-node=2", "-t3", "-o", str(work / "job.out"),
              *extra, str(script)]  # fmt: skip
    done = run_as(cluster, account, sbatch, timeout=240, cwd=work)
    out = (work / "job.out").read_text() if (work / "job.out").exists() else ""
    assert done.returncode == 0, f"{done.stderr}\n{out}"
    job = done.stdout.strip().split(";")[0]
    assert (run_dir / "final_hash.txt").exists(), out
    foreign = [str(p) for p in [run_dir, *run_dir.rglob("*")] if p.lstat().st_uid != account.uid]
    assert not foreign, f"files in the user's run directory that are not the user's: {foreign}"
    bbs = [d for d in (cluster.state_dir / "bb").glob(f"*/{job}")]
    socks = [Path(f"/tmp/nvrx-{account.uid}-{job}")]
    for d in [*bbs, *(s for s in socks if s.exists())]:
        st = d.lstat()
        assert (st.st_uid, stat.S_IMODE(st.st_mode)) == (account.uid, 0o700), f"{d}: {stat.filemode(st.st_mode)}"
    if mode == "site":
        records = hook_records(cluster, job)
        assert bbs, "the Prolog made no burst-buffer directory for the job"
        assert any(r["hook"] == "prolog" and (r.get("site_agent") or {}).get("pid") for r in records), records
