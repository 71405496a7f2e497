"""Recovery time of `nvrx-hpc run` against a plain `scontrol requeue`, measured in one run on the local cluster.

    python benchmarks/recovery.py [--json] [--state-dir /tmp/nvrx-cluster]

Run A: examples/train.py on 2 nodes x 2 ranks plus 1 spare under `nvrx-hpc run`; once it trains,
rank 3 is SIGKILLed from outside. Figures from events.jsonl:
  - crash detection latency: kill -> the launcher's `launcher.rank.exited` (goal <= 1 s, SPANK exit path)
  - failure -> first training step after the restart, and the training's own start-up (step start ->
    first iteration), measured in the same attempt; their difference is what nvrx-hpc adds (goal <= 10 s)
Run B (baseline): the same job, but the failure is handled by `scontrol requeue`: requeue -> first
training step of the requeued job. The dev cluster sets cred_expire=10, so Slurm holds a requeued job
about 11 s; a site's default (120 s) makes the baseline far slower.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nvrx_hpc.core.events import read_events  # noqa: E402
from nvrx_hpc.launcher.status import read_status  # noqa: E402
from nvrx_hpc.slurm.devcluster import DevCluster, DevClusterSpec  # noqa: E402


def _sbatch(env: dict, work: Path, name: str, spares: int, steps: int) -> tuple[str, Path]:
    run_dir = work / name
    argv = [
        sys.executable, "-m", "nvrx_hpc", "run", "--spares", str(spares), "--tasks-per-node", "2",
        "--run-dir", str(run_dir), "--", sys.executable, str(REPO / "examples" / "train.py"),
        "--steps", str(steps), "--ckpt-every", "5", "--step-time", "0.1", "--out", str(run_dir),
    ]  # fmt: skip
    script = work / f"{name}.sh"
    script.write_text("#!/bin/bash\nexec " + " ".join(f"'{a}'" for a in argv) + "\n")
    done = subprocess.run(
        ["sbatch", "--parsable", f"--nodes={2 + spares}", "--ntasks-per-node=2", "--time=10", "--requeue",
         "--no-kill", f"--output={work / name}.out", str(script)],
        env=env, capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout.strip().split(";")[0], run_dir


def _wait_training(run_dir: Path, min_iteration: int, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = read_status(run_dir) or {}
        ranks = status.get("ranks", {})
        if ranks and min(r.get("iteration") or 0 for r in ranks.values()) >= min_iteration:
            return status
        time.sleep(0.05)
    raise SystemExit(f"training in {run_dir} did not reach iteration {min_iteration}")


def _event(run_dir: Path, kind: str, after: float, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in read_events(run_dir / "events.jsonl"):
            if event["kind"] == kind and event["time"] >= after:
                return event
        time.sleep(0.05)
    raise SystemExit(f"no {kind} in {run_dir} after {after}")


def _at(event: dict) -> float:
    return float((event.get("detail") or {}).get("at") or event["time"])


def _wait_done(env: dict, job: str, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=env, capture_output=True, text=True)
        if not out.stdout.strip():
            return
        time.sleep(0.5)
    subprocess.run(["scancel", job], env=env)


def run_nvrx(env: dict, work: Path) -> dict:
    job, run_dir = _sbatch(env, work, "nvrx", spares=1, steps=40)
    status = _wait_training(run_dir, 5)
    victim = status["ranks"]["3"]["pid"]
    killed_at = time.time()
    os.kill(victim, signal.SIGKILL)
    detected = _event(run_dir, "launcher.rank.exited", killed_at)
    restarted = _event(run_dir, "launcher.step.started", killed_at)
    resumed = _event(run_dir, "launcher.step.first_iteration", restarted["time"])
    _wait_done(env, job)
    events = read_events(run_dir / "events.jsonl")
    first_start = next(e for e in events if e["kind"] == "launcher.step.started")
    first_iter = next(e for e in events if e["kind"] == "launcher.step.first_iteration")
    startup = _at(resumed) - restarted["time"]
    recover = _at(resumed) - killed_at
    return {
        "job": job,
        "crash_detection_s": round(detected["time"] - killed_at, 3),
        "failure_to_first_step_s": round(recover, 3),
        "training_startup_s": round(startup, 3),
        "training_startup_first_attempt_s": round(_at(first_iter) - first_start["time"], 3),
        "nvrx_overhead_s": round(recover - startup, 3),
    }


def run_requeue(env: dict, work: Path) -> dict:
    job, run_dir = _sbatch(env, work, "requeue", spares=0, steps=25)
    _wait_training(run_dir, 5)
    requeued_at = time.time()
    subprocess.run(["scontrol", "requeue", job], env=env, check=True, timeout=30)
    resumed = _event(run_dir, "launcher.step.first_iteration", requeued_at, timeout=300)
    _wait_done(env, job)
    return {"job": job, "failure_to_first_step_s": round(_at(resumed) - requeued_at, 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--state-dir", default="/tmp/nvrx-cluster", help="dev cluster to use (brought up if needed)")
    args = parser.parse_args()
    spank = REPO / "spank" / "nvrx_spank.so"
    cluster = DevCluster(DevClusterSpec(state_dir=Path(args.state_dir), spank_plugin=spank if spank.exists() else None))
    cluster.up(timeout=90)
    env = {**os.environ, **cluster.env}
    with tempfile.TemporaryDirectory(prefix="nvrx-recovery-") as tmp:
        nvrx = run_nvrx(env, Path(tmp))
        requeue = run_requeue(env, Path(tmp))
    result = {
        "nvrx": nvrx,
        "requeue_baseline": requeue,
        "speedup_vs_requeue": round(requeue["failure_to_first_step_s"] / nvrx["failure_to_first_step_s"], 2),
        "goals": {"crash_detection_s": 1.0, "nvrx_overhead_s": 10.0},
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return
    print(f"crash detection latency           {nvrx['crash_detection_s']:7.3f} s   (goal <= 1 s)")
    print(f"failure -> first step, nvrx-hpc   {nvrx['failure_to_first_step_s']:7.3f} s")
    print(f"  of which training start-up      {nvrx['training_startup_s']:7.3f} s   (import torch, init_process_group)")
    print(f"  of which nvrx-hpc               {nvrx['nvrx_overhead_s']:7.3f} s   (goal <= 10 s)")
    print(f"failure -> first step, requeue    {requeue['failure_to_first_step_s']:7.3f} s   (cred_expire=10 here)")
    print(f"speed-up vs requeue               {result['speedup_vs_requeue']:7.2f} x")


if __name__ == "__main__":
    main()
