"""The dev cluster's ordinary job account: jobs submitted as `nvrxjob` run as that user, with nvrx-hpc usable."""

from __future__ import annotations

import pytest
from _as_user import job_account, run_as, user_dir

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
