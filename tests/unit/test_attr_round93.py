"""Rules drawn from round 93 after its first contact was scored: a read or write the kernel failed with EIO, and
guided-diffusion's NaN report and its metrics table."""

from __future__ import annotations

from _attr_helpers import verdict_of as _verdict

from nvrx_hpc.attribution.api import Category


def test_an_io_error_under_a_save_is_the_nodes_storage(tmp_path):
    log = ["(MegatronTrainRayActor pid=9142, ip=10.42.7.15) RuntimeError: Worker failure: [Errno 5] Input/output error"]
    log += [f"[rank{r}]:[E911 00:59:01.1 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
            f"timeout: WorkNCCL(SeqNum=88, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000)"
            for r in (0, 1)]  # fmt: skip
    v = _verdict(tmp_path, {"ray-job.log": log})
    assert v.category is Category.HOST and v.restartable is True


def test_guided_diffusions_nan_report_and_metrics_table_are_numerical(tmp_path):
    log = ["Found NaN, decreased lg_loss_scale to 22.442", "-----------------------------",
           "| grad_norm     | nan       |", "| loss          | nan       |", "-----------------------------"]
    v = _verdict(tmp_path, {"slurm-8713305.out": log})
    assert v.category is Category.NUMERICAL
