"""Rules from rounds 56 and 57 of blind cases: OLMo's `nan loss encountered` is numerical; PBS deleting a job for
another queue's is a preemption; a node Slurm drained for a failed prolog is the scheduler's and names that node."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def test_a_nan_loss_that_a_check_raises_is_numerical(tmp_path):
    lines = ["[rank0]: Traceback (most recent call last):",
             "[rank0]:   File \"olmo/train.py\", line 912, in train_step",
             "[rank0]: ValueError: nan loss encountered"]  # fmt: skip
    v = _verdict(tmp_path, {"slurm-441907.out": lines})
    assert v.category is Category.NUMERICAL and v.restartable is False


def test_pbs_deleting_the_job_for_another_queues_is_a_preemption(tmp_path):
    qstat = ["Job Id: 1873331.polaris-pbs-01", "    queue = preemptable",
             "    comment = Job run at Mon Jun 10 at 23:58 on (x3102c0s1b0n0:ncpus=64:ngpus=4)+... and was deleted: "
             "preempted by job in queue demand"]  # fmt: skip
    v = _verdict(tmp_path, {"qstat_xf.txt": qstat, "pretrain_unet.ER": ["=>> PBS: job killed: walltime 0"]})
    assert v.category is Category.SCHEDULER and v.restartable


def test_a_node_drained_for_a_failed_prolog_is_the_schedulers_and_named(tmp_path):
    sinfo = ["$ sinfo -R -p gpu", "REASON               USER      TIMESTAMP           NODELIST",
             "Prolog error         root      2023-10-24T09:13:02 nvh-027",
             "rebooting            root      2023-10-24T08:55:47 nvh-020"]  # fmt: skip
    sacct = ["5512034       llm-pretrain-1p3b  general-long-gpu   REQUEUED      0:0"]
    v = _verdict(tmp_path, {"sinfo_R.txt": sinfo, "sacct.txt": sacct})
    assert v.category is Category.SCHEDULER and v.restartable and v.culprit.nodes == ("nvh-027",)


def test_a_users_cancel_after_an_hour_of_silence_is_a_hang(tmp_path):
    steps = [f"[2022-05-18 05:{i:02d}:10] iteration {i + 100} | lm loss 2.31 | elapsed 60.1 s" for i in range(8)]
    end = "slurmstepd: error: *** JOB 2139870 ON r3i0n0 CANCELLED AT 2022-05-18T07:02:55 ***"
    v = _verdict(tmp_path, {"tr11-176B-ml-2139870.out": [*steps, end]})
    assert v.category is Category.DISTRIBUTED_HANG and v.restartable is False and "cancelled" in v.root_cause


def test_a_cancel_that_follows_steady_progress_stays_the_users(tmp_path):
    steps = [f"[2022-05-18 05:{i:02d}:10] iteration {i + 100} | lm loss 2.31 | elapsed 60.1 s" for i in range(8)]
    end = "slurmstepd: error: *** JOB 2139871 ON r3i0n0 CANCELLED AT 2022-05-18T05:08:30 ***"
    v = _verdict(tmp_path, {"tr11-176B-ml-2139871.out": [*steps, end]})
    assert v.category is Category.SCHEDULER
