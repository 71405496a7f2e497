"""In-process restart: time from a fault to every rank back in the training function, on the local cluster.

    python benchmarks/inprocess.py [--faults 10] [--kinds exception,sigkill,hang] [--json]
                                   [--state-dir /tmp/nvrx-bench-ip] [--no-in-allocation] [--no-torchft]

A dev cluster of its own (state dir /tmp/nvrx-bench-ip, slurmctld port 26837, slurmd ports from 26941, so it
never meets the default cluster's ports), 4 nodes x 2 CPUs. Every job is 4 nodes x 2 gloo training ranks = 8
ranks of examples/train_inprocess.py under `nvrx-hpc run --inprocess`, with `--step-time 0.05 --hidden 256
--ckpt-every 2` (a checkpoint every 2 steps through nvrx_hpc.ckpt, partner copies). The hang job sets
NVRX_INPROCESS__PG_TIMEOUT_S = NVRX_INPROCESS__SOFT_TIMEOUT_S = 2; the exception and sigkill jobs keep the
defaults (30 s and 5 s), which their figures do not wait for (a raise or a death is reported by the agent at
once). The settings are reported with the figures.

One job per fault kind, its `--faults` faults fired one after another by the example itself (fault i at step
6 * (i + 1), on torch ranks 1, 2, 5, 6, 3, 4, 7, 0, 1, 2, ...: every node in turn, at most 3 per node for 10):

- exception: `raise@STEP:RANK` (the rank raises out of the training function); no spare ranks;
- sigkill: `sigkill@STEP:RANK` (the rank SIGKILLs itself); `--spare-ranks 3` (3 warm spares per node, 12):
  each lost rank's place goes to a spare;
- hang: `hang@STEP:RANK` (the rank sleeps outside any collective; its peers' all-reduce times out after
  pg_timeout, the hung rank misses the next meeting and is declared lost after soft_timeout, its agent kills
  it and a spare takes its place); `--spare-ranks 3`. So a hang costs at least pg_timeout + soft_timeout = 4 s
  by construction: these two settings, not the machinery, set its figure.

Per fault: the fault time is the `at=` of the `FAULT ... round=R ...` line the faulting rank prints just before
it raises, kills itself or hangs (the step log). Recovered: the smallest round after R whose
`inprocess.round.started` events (<run dir>/events.jsonl, written by each rank just before it calls the training
function) cover all 8 torch ranks, every one after the fault time; the time is the latest of those 8. The figure
is recovered - fault; p50 and p99 over the faults of the kind (linear interpolation: with 10 samples p99 is
about the largest). A fault whose recovery escalated to a step restart gives no sample (the later faults then
never fire: they are only armed in the job's first step); `step_restarts` says if that happened. Only the job's
first training step is measured: once it ends (`first_step`: its return code and last iteration) the job is
cancelled.

Next to it:

(a) in_allocation: the same training (examples/train_ckpt.py, the model train_inprocess.py imports, same
    shape, step time, width and checkpoints) under plain `nvrx-hpc run --spares 0` (no --inprocess), one job:
    `--faults` times, once the current step has trained about 1 s, a rank is SIGKILLed from outside (same
    rank order); the launcher stops the step and starts a new one on the same nodes (--stop-grace 2;
    NVRX_LAUNCHER__MAX_RESTARTS and __EXCLUDE_AFTER raised so that neither ends or shrinks the job). The
    figure is benchmarks/recovery.py's "failure -> first step" for a crash: from the kill to the agents'
    `launcher.step.first_iteration` of the next step. It thus includes the checkpoint restore and one training
    step (about 0.1 s here) that the in-process figure (back in the function) does not.
(b) torchft: benchmarks/_torchft_bench.measure_torchft(replicas=8, faults=--faults, kind="exception") (see
    that module: 8 replica groups of one gloo rank each, a lighthouse, a supervisor that restarts the failed
    replica). Its figure is the time the healthy replicas lose per failure (wall time until they are back at
    the normal step rate, less the steps they trained meanwhile), not the same clock as ours: TorchFT's
    healthy replicas never leave their training loop. Skipped ({"skipped": reason}) when the module or torchft
    is missing. `--torchft-dir` names another directory holding _torchft_bench.py.

Ratios: in_allocation p50 / exception p50, in_allocation p50 / sigkill p50 (both a SIGKILLed rank) and
torchft p50 / exception p50.

Caveats: this box has 2 cores for 4 virtual nodes, so 8 ranks (20 tasks with the spares, and the node agents
and launcher) share them: every figure is slower than on real nodes, the sigkill and hang jobs (12 idle spare
processes) more than the exception job. The spares of a node are started with its training ranks
(`--spare-ranks` is per node), so a rank is replaced from the spares of the same node; with more than 3 faults
on one node the fourth would escalate to a step restart (the rank order above keeps to 3 per node for 10
faults). The jobs run one at a time, never alongside each other or the TorchFT run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(HERE))

from recovery import Bench, _at, _event  # noqa: E402 - benchmarks/recovery.py

from nvrx_hpc.core.events import read_events  # noqa: E402
from nvrx_hpc.slurm.devcluster import DevCluster, DevClusterSpec  # noqa: E402

TRAIN_IP = REPO / "examples" / "train_inprocess.py"
TRAIN_PLAIN = REPO / "examples" / "train_ckpt.py"
NODES, PER_NODE, WORLD = 4, 2, 8
STATE_DIR, CTLD_PORT, SLURMD_PORT_BASE = "/tmp/nvrx-bench-ip", 26837, 26941
# (pg_timeout_s, soft_timeout_s) per kind: None keeps nvrx-hpc's default (see the docstring)
TIMEOUTS = {"exception": (None, None), "sigkill": (None, None), "hang": (2.0, 2.0)}
STEP_TIME, HIDDEN, CKPT_EVERY, FAULT_EVERY = 0.05, 256, 2, 6
RANK_ORDER = (1, 2, 5, 6, 3, 4, 7, 0)  # node 0, 1, 2, 3, 1, 2, 3, 0, ...
EXAMPLE_KIND = {"exception": "raise", "sigkill": "sigkill", "hang": "hang"}
SPARES = {"exception": 0, "sigkill": 3, "hang": 3}
FAULT_LINE = re.compile(r"FAULT (\w+) round=(\d+) rank=(\d+) step=(\d+) at=([0-9.]+)")


def percentile(values: list[float], q: float) -> float:
    """Linear interpolation between the closest ranks (numpy's default)."""
    s = sorted(values)
    pos = (len(s) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def stats(samples: list[float]) -> dict:
    if not samples:
        return {"p50_s": None, "p99_s": None, "n": 0}
    return {"p50_s": round(percentile(samples, 0.5), 3), "p99_s": round(percentile(samples, 0.99), 3),
            "min_s": round(min(samples), 3), "max_s": round(max(samples), 3), "n": len(samples)}  # fmt: skip


class InprocessBench(Bench):
    def sbatch(self, name: str, body: str, minutes: int) -> str:
        script = self.work / f"{name}.sh"
        script.write_text("#!/bin/bash\n" + body + "\n")
        done = subprocess.run(
            ["sbatch", "--parsable", f"--nodes={NODES}", f"--ntasks-per-node={PER_NODE}", f"--time={minutes}",
             "--no-kill", f"--output={self.work / name}.out", str(script)],
            env=self.env, capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        return done.stdout.strip().split(";")[0]

    def bb(self, name: str) -> str:
        return f"{self.cluster.layout.root}/bb/{{domain}}/{name}-{os.getpid()}-{time.time_ns()}"

    # ------------------------------------------------------------------ in-process, one job per kind

    def inprocess(self, kind: str, faults: int) -> dict:
        name = f"ip-{kind}"
        run_dir = self.work / name
        spec = ",".join(f"{EXAMPLE_KIND[kind]}@{FAULT_EVERY * (i + 1)}:{RANK_ORDER[i % len(RANK_ORDER)]}"
                        for i in range(faults))  # fmt: skip
        steps = FAULT_EVERY * (faults + 1) + 4
        run = [sys.executable, "-m", "nvrx_hpc", "run", "--spares", "0", "--run-dir", str(run_dir),
               "--stop-grace", "2", "--tasks-per-node", str(PER_NODE), "--inprocess",
               "--spare-ranks", str(SPARES[kind]), "--heartbeat-timeout", "60", "--",
               sys.executable, str(TRAIN_IP), "--steps", str(steps), "--step-time", str(STEP_TIME),
               "--hidden", str(HIDDEN), "--ckpt-every", str(CKPT_EVERY), "--bb-dir", self.bb(name),
               "--faults", spec]  # fmt: skip
        pg, soft = TIMEOUTS[kind]
        env = {"NVRX_INPROCESS__PG_TIMEOUT_S": str(pg), "NVRX_INPROCESS__SOFT_TIMEOUT_S": str(soft)}
        env = {k: v for k, v in env.items() if v != "None"}
        body = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()) + "exec " + shlex.join(run)
        started = time.monotonic()
        job = self.sbatch(name, body, minutes=20)
        try:
            ended = self.first_step_end(job, run_dir, timeout=1100)
        finally:
            self._cancel(job)  # what comes after the first step is not measured (see the docstring)
        return {"job": job, "first_step": ended, "job_wall_s": round(time.monotonic() - started, 1), "faults": spec,
                "steps": steps, "spare_ranks_per_node": SPARES[kind], **measure_inprocess(run_dir)}  # fmt: skip

    def first_step_end(self, job: str, run_dir: Path, timeout: float) -> dict:
        """The first training step's `launcher.step.ended` detail (returncode, max_iteration, ...)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ended = [e for e in read_events(run_dir / "events.jsonl") if e["kind"] == "launcher.step.ended"]
            if ended:
                return ended[0].get("detail") or {}
            info = self.cluster.backend.job(int(job))
            if info.finished:
                return {"job_state": info.state, "note": "the job ended before its first step did"}
            time.sleep(1.0)
        raise SystemExit(f"job {job}: the first step did not end in {timeout:.0f} s (see {self.work})")

    # ------------------------------------------------------------------ in-allocation restart, one job

    def in_allocation(self, faults: int) -> dict:
        name = "in-alloc"
        run_dir = self.work / name
        run = [sys.executable, "-m", "nvrx_hpc", "run", "--spares", "0", "--run-dir", str(run_dir),
               "--stop-grace", "2", "--tasks-per-node", str(PER_NODE), "--",
               sys.executable, str(TRAIN_PLAIN), "--steps", "100000", "--step-time", str(STEP_TIME),
               "--hidden", str(HIDDEN), "--ckpt-every", str(CKPT_EVERY), "--bb-dir", self.bb(name),
               "--out", str(run_dir)]  # fmt: skip
        env = {"NVRX_LAUNCHER__MAX_RESTARTS": str(faults + 5), "NVRX_LAUNCHER__EXCLUDE_AFTER": "1000"}
        body = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()) + "exec " + shlex.join(run)
        begun = time.monotonic()
        job = self.sbatch(name, body, minutes=30)
        samples, per_fault = [], []
        try:
            first = _event(run_dir, "launcher.step.first_iteration", 0, timeout=300)
            for i in range(faults):
                time.sleep(max(0.0, _at(first) + 1.0 - time.time()))  # about 1 s of training, a few checkpoints
                rank = RANK_ORDER[i % len(RANK_ORDER)]
                pid = self._pid_of_rank(name, rank)
                at = time.time()
                os.kill(pid, signal.SIGKILL)
                detected = _event(run_dir, "launcher.rank.exited", at, timeout=120)
                started = _event(run_dir, "launcher.step.started", at, timeout=240)
                first = _event(run_dir, "launcher.step.first_iteration", started["time"], timeout=240)
                samples.append(_at(first) - at)
                per_fault.append({"rank": rank, "at": round(at, 3), "detected_s": round(detected["time"] - at, 3),
                                  "step_started_s": round(started["time"] - at, 3),
                                  "first_step_s": round(_at(first) - at, 3)})  # fmt: skip
        finally:
            self._cancel(job)
        return {**stats(samples), "job": job, "job_wall_s": round(time.monotonic() - begun, 1),
                "samples": [round(s, 3) for s in samples], "per_fault": per_fault,
                "settings": {"stop_grace_s": 2, "spares": 0, **env}}  # fmt: skip


def measure_inprocess(run_dir: Path) -> dict:
    """Per fault of the run: its FAULT line's time, and when all WORLD ranks were back in the function."""
    text = "".join(p.read_text(errors="replace") for p in sorted((run_dir / "logs").glob("step-*.log")))
    fired = [(m[1], int(m[2]), int(m[3]), int(m[4]), float(m[5])) for m in FAULT_LINE.finditer(text)]
    fired.sort(key=lambda f: f[4])
    events = read_events(run_dir / "events.jsonl")
    starts: dict[int, dict[int, list[float]]] = {}
    for e in events:
        if e["kind"] == "inprocess.round.started" and e.get("rank") is not None:
            starts.setdefault(int(e["detail"]["round"]), {}).setdefault(int(e["rank"]), []).append(e["time"])
    samples, per_fault = [], []
    for kind, round_, rank, step, at in fired:
        entry = {"kind": kind, "round": round_, "rank": rank, "step": step, "at": round(at, 3)}
        for r in sorted(x for x in starts if x > round_):
            times = {k: max(v) for k, v in starts[r].items()}
            if len(times) >= WORLD and min(times.values()) >= at:
                entry.update(recovered_round=r, recovered_s=round(max(times.values()) - at, 3),
                             first_back_s=round(min(times.values()) - at, 3))  # fmt: skip
                samples.append(max(times.values()) - at)
                break
        else:
            entry["no_sample"] = "no later round with all ranks back"
        per_fault.append(entry)
    restarts = sum(e["kind"] == "inprocess.restart" for e in events)
    return {**stats(samples), "samples": [round(s, 3) for s in samples], "fired": len(fired),
            "step_restarts": sum(e["kind"] == "launcher.step.started" for e in events) - 1,
            "inprocess_restarts": restarts, "escalations": sum(e["kind"] == "inprocess.escalate" for e in events),
            "per_fault": per_fault}  # fmt: skip


def torchft(faults: int, where: Path, kind: str = "exception") -> dict:
    if not (where / "_torchft_bench.py").exists():
        return {"skipped": f"no _torchft_bench.py in {where}"}
    try:
        importlib.import_module("torchft")
    except ImportError as exc:
        return {"skipped": f"torchft not installed ({exc})"}
    sys.path.insert(0, str(where))
    try:
        module = importlib.import_module("_torchft_bench")
        result = module.measure_torchft(replicas=WORLD, faults=faults, kind=kind)
    except Exception as exc:  # noqa: BLE001 - the comparison is optional: say why it is missing
        return {"skipped": f"measure_torchft failed: {type(exc).__name__}: {exc}"[:500]}
    finally:
        sys.path.remove(str(where))
    keep = ("kind", "replicas", "min_replicas", "n", "p50_s", "p99_s", "mean_s", "samples", "baseline_step_s",
            "failed", "settings")  # fmt: skip
    out = {k: result.get(k) for k in keep}
    for k in ("p50_s", "p99_s", "mean_s", "baseline_step_s"):
        if isinstance(out.get(k), float):
            out[k] = round(out[k], 3)
    out["samples"] = [round(s, 3) for s in out.get("samples") or []]
    out["metric"] = "healthy replicas' lost time per failure (see benchmarks/_torchft_bench.py)"
    return out


def _ratio(a: dict, b: dict) -> float | None:
    x, y = (a or {}).get("p50_s"), (b or {}).get("p50_s")
    return round(x / y, 2) if x and y else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--faults", type=int, default=10, help="faults per kind (default 10)")
    parser.add_argument("--kinds", default="exception,sigkill,hang", help="comma-separated: exception, sigkill, hang")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--state-dir", default=STATE_DIR, help=f"dev cluster to use (default {STATE_DIR})")
    parser.add_argument("--no-in-allocation", action="store_true", help="skip (a), the in-allocation restart")
    parser.add_argument("--no-torchft", action="store_true", help="skip (b), TorchFT")
    parser.add_argument("--torchft-dir", type=Path, default=HERE, help="where _torchft_bench.py is")
    parser.add_argument("--keep", type=Path, default=None, help="keep the jobs' run dirs here")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if args.faults < 1 or not kinds or set(kinds) - set(EXAMPLE_KIND):
        parser.error(f"--faults >= 1; --kinds from {', '.join(EXAMPLE_KIND)}")
    if max(SPARES[k] for k in kinds) and args.faults > 3 * NODES:
        parser.error(f"at most {3 * NODES} faults: one spare rank each")

    t0 = time.monotonic()
    spank = REPO / "spank" / "nvrx_spank.so"
    state = Path(args.state_dir)
    if (state / "etc" / "spec.json").exists():
        cluster = DevCluster.at(state)  # a cluster already there keeps its own ports and plugin
    else:
        cluster = DevCluster(DevClusterSpec(state_dir=state, ctld_port=CTLD_PORT, slurmd_port_base=SLURMD_PORT_BASE,
                                            spank_plugin=spank if spank.exists() else None))  # fmt: skip
    cluster.up(timeout=90)
    result: dict = {}
    if args.keep:
        args.keep.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="nvrx-inprocess-", dir=args.keep))
    bench = InprocessBench(cluster, work)
    for kind in kinds:
        result[kind] = bench.inprocess(kind, args.faults)
        pg, soft = TIMEOUTS[kind]
        result[kind]["settings"] = {"pg_timeout_s": pg or "default (30)", "soft_timeout_s": soft or "default (5)"}
    if args.no_in_allocation:
        result["in_allocation"] = {"skipped": "--no-in-allocation"}
    else:
        result["in_allocation"] = bench.in_allocation(args.faults)
    result["torchft"] = {"skipped": "--no-torchft"} if args.no_torchft else torchft(args.faults, args.torchft_dir)
    result["ratios"] = {
        "in_allocation_over_exception": _ratio(result["in_allocation"], result.get("exception")),
        "in_allocation_over_sigkill": _ratio(result["in_allocation"], result.get("sigkill")),
        "torchft_over_exception": _ratio(result["torchft"], result.get("exception")),
    }
    result["setup"] = {"nodes": NODES, "ranks_per_node": PER_NODE, "world": WORLD, "step_time_s": STEP_TIME,
                       "hidden": HIDDEN, "ckpt_every": CKPT_EVERY, "fault_every_steps": FAULT_EVERY,
                       "cpus": os.cpu_count(), "state_dir": str(cluster.layout.root),
                       "run_dirs": str(work) if args.keep else None,
                       "wall_s": round(time.monotonic() - t0, 1)}  # fmt: skip
    if not args.keep:
        subprocess.run(["rm", "-rf", "--", str(work)], timeout=60, check=False)
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{'':14} {'p50 s':>8} {'p99 s':>8} {'n':>4}")
    for key in (*kinds, "in_allocation", "torchft"):
        row = result.get(key) or {}
        if "skipped" in row:
            print(f"{key:14} skipped: {row['skipped']}")
        elif row.get("p50_s") is not None:
            print(f"{key:14} {row['p50_s']:8.2f} {row['p99_s']:8.2f} {row['n']:4d}")
        else:
            print(f"{key:14} no sample")
    print("ratios:", ", ".join(f"{k} {v}" for k, v in result["ratios"].items()))
    print(
        f"hang: pg_timeout {TIMEOUTS['hang'][0]:g} s, soft_timeout {TIMEOUTS['hang'][1]:g} s (others: defaults); "
        f"wall {result['setup']['wall_s']} s"
    )


if __name__ == "__main__":
    main()
