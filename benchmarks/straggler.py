"""Straggler detection on the local cluster: time to flag a slowed rank, false flags in clean windows, and
what the timings cost a training step.

    python benchmarks/straggler.py [--window-s 2] [--clean-windows 200] [--factor 1.3] [--json]

Two jobs of examples/train_ckpt.py under `nvrx-hpc run`, 2 nodes x 2 gloo ranks, 0.1 s of simulated
compute inside each step's `step` section (a sleep: 4 ranks on 2 cores must not time each other):

- slowed: rank 3's compute takes `--factor` times longer from step 1. Detection is the time from the
  job's first iteration to the launcher's `launcher.straggler` event, and the number of scored windows
  by then; the flagged rank and its class (compute or communication) are checked;
- clean: no rank slowed, until `--clean-windows` windows have been scored; every flag is a false positive.

Cost: the training thread's share of the timings, two sections and one `set_iteration` per step, each
measured by benchmarks/heartbeat.py in the same run, over this run's measured step period.
`--json` prints one object with detection_s, windows_to_flag, flagged_rank_correct, classified_as,
clean_windows, false_positives and overhead_pct.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

sys.path.insert(0, str(REPO / "benchmarks"))
import recovery  # noqa: E402  (beside this script)

from nvrx_hpc.core.events import read_events  # noqa: E402
from nvrx_hpc.launcher.status import read_status  # noqa: E402
from nvrx_hpc.slurm.devcluster import DevCluster, DevClusterSpec  # noqa: E402

TRAIN = REPO / "examples" / "train_ckpt.py"
SLOW_RANK = 3


class Bench(recovery.Bench):  # its cluster environment and job cancel
    def __init__(self, cluster: DevCluster, work: Path, window_s: float) -> None:
        super().__init__(cluster, work)
        self.window_s = window_s

    def submit(self, name: str, steps: int, extra: list[str]) -> tuple[str, Path]:
        run_dir = self.work / name
        argv = [sys.executable, "-m", "nvrx_hpc", "run", "--run-dir", str(run_dir), "--", sys.executable, str(TRAIN),
                "--steps", str(steps), "--ckpt-every", "100000", "--hidden", "32", "--compute-time", "0.1",
                "--bb-dir", f"{self.cluster.layout.root}/bb/{{domain}}/{name}-{os.getpid()}", *extra]  # fmt: skip
        script = self.work / f"{name}.sh"
        script.write_text(f"#!/bin/bash\nexport NVRX_STRAGGLER__WINDOW_S={self.window_s}\nexec {shlex.join(argv)}\n")
        done = subprocess.run(
            ["sbatch", "--parsable", "--nodes=2", "--ntasks-per-node=2", "--time=60", "--no-kill",
             f"--output={self.work / name}.out", str(script)],
            env=self.env, capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        return done.stdout.strip().split(";")[0], run_dir

    def wait_for(self, run_dir: Path, kind: str, timeout: float) -> dict | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = [e for e in _events(run_dir) if e["kind"] == kind]
            if found:
                return found[0]
            time.sleep(0.2)
        return None

    def slowed(self, factor: float) -> dict:
        job, run_dir = self.submit("slowed", 100000, ["--slow-rank", str(SLOW_RANK), "--slow-factor", str(factor)])
        try:
            started = self.wait_for(run_dir, "launcher.step.first_iteration", 180)
            if started is None:
                raise SystemExit(f"the slowed job never trained; see {self.work}/slowed.out")
            flag = self.wait_for(run_dir, "launcher.straggler", 20 * self.window_s)
            status = read_status(run_dir) or {}
        finally:
            self._cancel(job)
        if flag is None:
            return {"detection_s": None, "windows_to_flag": None, "flagged_rank_correct": False, "classified_as": None}
        node_of_slow = (status.get("ranks", {}).get(str(SLOW_RANK)) or {}).get("node")
        detail = flag.get("detail") or {}
        return {
            "detection_s": round(flag["time"] - started["time"], 2), "windows_to_flag": detail.get("window"),
            "flagged_rank_correct": flag.get("rank") == SLOW_RANK and flag.get("node") == node_of_slow,
            "classified_as": detail.get("classified_as"), "flagged_node": flag.get("node"),
        }  # fmt: skip

    def clean(self, windows: int) -> dict:
        job, run_dir = self.submit("clean", 100000, [])
        try:
            if self.wait_for(run_dir, "launcher.step.first_iteration", 180) is None:
                raise SystemExit(f"the clean job never trained; see {self.work}/clean.out")
            started, scored = time.monotonic(), 0
            while scored < windows and time.monotonic() - started < windows * self.window_s * 3 + 60:
                time.sleep(self.window_s)
                scored = ((read_status(run_dir) or {}).get("stragglers") or {}).get("windows_scored") or 0
            seen = _events(run_dir)
            iterations = [(e["time"], e["detail"]["iteration"]) for e in seen
                          if e["kind"] == "launcher.step.first_iteration" and "detail" in e]
            status = read_status(run_dir) or {}
        finally:
            self._cancel(job)
        flags = [e for e in seen if e["kind"] == "launcher.straggler"]
        ranks = status.get("ranks", {}).values()
        iteration = max([r.get("iteration") or 0 for r in ranks] or [0])
        elapsed = time.time() - iterations[0][0] if iterations else None
        period = elapsed / iteration if elapsed and iteration else None
        return {"clean_windows": scored, "false_positives": len(flags), "step_period_s": period}


def _events(run_dir: Path) -> list[dict]:
    try:
        return read_events(run_dir / "events.jsonl")
    except OSError:
        return []


def timing_cost_ns() -> float:
    """Two `with section(...)` and one `set_iteration()` on the training thread (benchmarks/heartbeat.py)."""
    out = subprocess.run([sys.executable, str(REPO / "benchmarks" / "heartbeat.py"), "--json", "--calls", "50000"],
                         capture_output=True, text=True, timeout=300, check=True)  # fmt: skip
    figures = json.loads(out.stdout)
    return 2 * figures["section_enter_exit_ns"] + figures["set_iteration_ns"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--window-s", type=float, default=2.0, help="straggler.window_s of both jobs (default 2)")
    parser.add_argument("--clean-windows", type=int, default=200, help="windows the clean job must score")
    parser.add_argument("--factor", type=float, default=1.3, help="how much slower rank 3 computes (default 1.3)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--state-dir", default="/tmp/nvrx-cluster", help="dev cluster to use (brought up if needed)")
    args = parser.parse_args()
    if args.window_s <= 0 or args.clean_windows < 1 or args.factor <= 1:
        parser.error("--window-s > 0, --clean-windows >= 1, --factor > 1")
    spank = REPO / "spank" / "nvrx_spank.so"
    cluster = DevCluster(DevClusterSpec(state_dir=Path(args.state_dir), spank_plugin=spank if spank.exists() else None))
    if (Path(args.state_dir) / "etc" / "spec.json").exists():
        cluster = DevCluster.at(Path(args.state_dir))
    cluster.up(timeout=90)
    with tempfile.TemporaryDirectory(prefix="nvrx-straggler-") as tmp:
        bench = Bench(cluster, Path(tmp), args.window_s)
        result = {**bench.slowed(args.factor), **bench.clean(args.clean_windows)}
    cost = timing_cost_ns()
    period = result.pop("step_period_s")
    result.update(window_s=args.window_s, factor=args.factor, timing_cost_ns=round(cost),
                  overhead_pct=round(100 * cost * 1e-9 / period, 4) if period else None)
    if args.json:
        print(json.dumps(result))
        return
    print(f"slowed rank {SLOW_RANK} x{args.factor}: flagged after {result['detection_s']} s "
          f"({result['windows_to_flag']} windows of {args.window_s:g} s) as {result['classified_as']}; "
          f"right rank and node: {result['flagged_rank_correct']}")
    print(f"clean: {result['false_positives']} flags in {result['clean_windows']} windows")
    print(f"timing cost: {result['timing_cost_ns']} ns a step = {result['overhead_pct']} % of a step "
          f"(goal < 1 %)")


if __name__ == "__main__":
    main()
