"""Straggler detection on the local cluster: 2 nodes x 2 gloo ranks under `nvrx-hpc run`, rank 3 slowed
1.3x in its compute (a longer sleep in its `step` section), 3-second windows. The launcher must flag
rank 3 on its node as a compute straggler within 3 windows, show it in status and metrics' feed, and
obey `nvrx-hpc straggler set --off` within a window; the clean reference run raises no flag."""

from __future__ import annotations

import json
import sys
import time

from _faults import events, kinds, submit, transcript, wait_iteration, wait_job

WINDOW_S = 3.0


def test_a_rank_slowed_1_3x_is_flagged_on_its_node_as_compute_within_three_windows(cluster, tmp_path):
    job, run_dir = submit(
        cluster, tmp_path, "slow", nodes=2, spares=0, steps=400, time_limit="4",
        env_line=f"export NVRX_STRAGGLER__WINDOW_S={WINDOW_S}\n",
        train_args=("--compute-time", "0.1", "--slow-rank", "3", "--slow-factor", "1.3", "--ckpt-every", "1000"),
    )  # fmt: skip
    try:
        wait_iteration(run_dir, 5, timeout=120)
        deadline = time.monotonic() + 8 * WINDOW_S
        while "launcher.straggler" not in kinds(run_dir) and time.monotonic() < deadline:
            time.sleep(0.5)
        seen = events(run_dir)
        flag = next((e for e in seen if e["kind"] == "launcher.straggler"), None)
        assert flag is not None, transcript(tmp_path, "slow")
        started = next(e for e in seen if e["kind"] == "launcher.step.first_iteration")
        assert flag["rank"] == 3 and flag["detail"]["classified_as"] == "compute", flag
        assert flag["detail"]["window"] <= 3 + 1, flag  # the first window may hold the start-up
        assert flag["time"] - started["time"] <= 4 * WINDOW_S + 2, (flag, started)
        time.sleep(1.5)  # status.json is rewritten every second
        status = json.loads((run_dir / "status.json").read_text())
        assert flag["node"] == status["ranks"]["3"]["node"]  # the node rank 3 really runs on
        assert status["stragglers"]["flagged"]["3"]["kind"] == "compute"
        assert [e["rank"] for e in seen if e["kind"] == "launcher.straggler"] == [3]  # nobody else

        shown = cluster.run([sys.executable, "-m", "nvrx_hpc", "status", job, "--run-dir", str(run_dir)], timeout=30)
        assert shown.returncode == 0 and "straggler: rank 3" in shown.stdout, shown.stdout + shown.stderr
        off = cluster.run([sys.executable, "-m", "nvrx_hpc", "straggler", "set", job, "--off", "--run-dir",
                           str(run_dir)], timeout=30)  # fmt: skip
        assert off.returncode == 0, off.stderr
        deadline = time.monotonic() + 2 * WINDOW_S + 2
        while "launcher.straggler.settings" not in kinds(run_dir) and time.monotonic() < deadline:
            time.sleep(0.3)
        assert "launcher.straggler.settings" in kinds(run_dir)
        time.sleep(1.0)
        status = json.loads((run_dir / "status.json").read_text())
        assert status["stragglers"]["enabled"] is False and status["stragglers"]["flagged"] == {}
    finally:
        cluster.run(["scancel", job], timeout=30)
        wait_job(cluster, job, timeout=60)


def test_the_clean_reference_run_raises_no_straggler_flag(ckpt_baseline, tmp_path_factory):
    """The fault-free run every fault test compares against (conftest's ckpt_baseline) flagged nobody."""
    run_dir = next(tmp_path_factory.getbasetemp().glob("ckpt-baseline*")) / "clean"
    assert "launcher.straggler" not in kinds(run_dir)
