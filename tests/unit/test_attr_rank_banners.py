"""Where a rank runs, from the lines a training script prints about itself: a start-up banner that names
its host and rank (`host=gpu-k07 node_rank=3 local_rank=1 rank=13`, in either order), and a logging
format's rank field (`| rank 24 |`, `rank=24`). A node's or local rank is never read as the rank."""

from __future__ import annotations

from pathlib import Path

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category
from nvrx_hpc.attribution.lines import LineContext, classify_line

HOSTS = ["gpu-k04", "gpu-k05"]  # ranks 0-3 on gpu-k04, 4-7 on gpu-k05


def _per_rank_logs(tmp_path: Path, banner: str) -> Path:
    run = tmp_path / "6620"
    (run / "logs").mkdir(parents=True)
    for r in range(8):
        host, local = HOSTS[r // 4], r % 4
        lines = [banner.format(host=host, node=r // 4, local=local, rank=r)]
        if r == 6:
            lines += ["Traceback (most recent call last):", '  File "/w/collate.py", line 41, in pad_collate',
                      "KeyError: 'transcript'"]  # fmt: skip
        (run / "logs" / f"rank-{r:02d}.log").write_text("\n".join(lines) + "\n")
    return run


def test_a_banner_with_host_and_rank_places_the_failing_rank_on_its_node(tmp_path):
    run = _per_rank_logs(tmp_path, "2026-08-21 14:02:06 [host={host} node_rank={node} local_rank={local} "
                                   "rank={rank} world=8] starting")  # fmt: skip
    v = analyze_run(run).verdict
    assert v.category is Category.APPLICATION
    assert v.culprit.ranks == (6,) and v.culprit.nodes == ("gpu-k05",)


def test_a_banner_with_the_rank_first_places_it_too(tmp_path):
    run = _per_rank_logs(tmp_path, "[init] rank={rank} local_rank={local} host={host} pid=5541{rank}")
    v = analyze_run(run).verdict
    assert v.culprit.ranks == (6,) and v.culprit.nodes == ("gpu-k05",)


def test_a_long_banner_with_the_host_at_its_end_places_the_rank(tmp_path):
    # HF Trainer's start-up line, with the host a site's logging format appends over 80 characters on
    run = _per_rank_logs(tmp_path, "12/01/2026 08:10:02 - INFO - __main__ - Process rank: {rank}, device: "
                                   "cuda:{local}, n_gpu: 1, distributed training: True, 16-bits training: True  "
                                   "[host={host}]")  # fmt: skip
    v = analyze_run(run).verdict
    assert v.culprit.ranks == (6,) and v.culprit.nodes == ("gpu-k05",)

def test_a_banner_that_names_only_the_node_and_local_rank_places_no_rank(tmp_path):
    run = _per_rank_logs(tmp_path, "[init] host={host} node_rank={node} local_rank={local}")
    v = analyze_run(run).verdict
    assert v.culprit.ranks == (6,) and v.culprit.nodes == ()


def _rank_of(line: str) -> int | None:
    hit = classify_line(line, 1, LineContext("run.log"))
    assert hit is not None
    return hit.rank


def test_a_logging_formats_rank_field_names_the_rank():
    enospc = "OSError: [Errno 28] No space left on device: '/ckpt/x.pt'"
    assert _rank_of(f"2026-02-11 04:11:09,731 | rank 24 | ERROR | {enospc}") == 24
    assert _rank_of(f"2026-02-11 04:11:09 rank=24 {enospc}") == 24
    assert _rank_of(f"2026-02-11 04:11:09 global_rank=24 {enospc}") == 24
    assert _rank_of(f"2026-02-11 04:11:09 node_rank=3 local_rank=1 {enospc}") is None
