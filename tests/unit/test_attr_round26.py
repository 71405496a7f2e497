"""Rules from rounds 25 and 26 of blind cases, one small case each: fairseq's minimum loss scale on every
rank is numerical."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_fairseqs_minimum_loss_scale_on_every_rank_is_numerical_not_the_applications_exception(tmp_path):
    out = []
    for r in range(4):
        out += [f"{r}: 2023-02-11 04:12:{10 + r:02d} | INFO | fairseq.trainer | NOTE: gradient overflow detected, "
                "ignoring gradient, setting loss scale to: 0.0001",
                f"{r}: Traceback (most recent call last):",
                f"{r}:   File \"fairseq/trainer.py\", line 1001, in train_step",
                f"{r}: FloatingPointError: Minimum loss scale reached (0.0001). Your loss is probably exploding. "
                "Try lowering the learning rate, using gradient clipping or increasing the batch size."]
    v = analyze_run(write_run(tmp_path, {"slurm-5120.out": out})).verdict
    assert v.category is Category.NUMERICAL and not v.restartable
