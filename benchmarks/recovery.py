"""Recovery per fault kind under `nvrx-hpc run`, next to what a user has without it, on the local cluster.

    python benchmarks/recovery.py [--samples 3] [--kinds crash,hang,node] [--json] [--state-dir DIR]

Each sample is a fresh job of examples/train_ckpt.py (2 nodes x 2 ranks, async checkpoints through
nvrx_hpc.ckpt every 2 steps of 0.1 s). Once it trains, one fault is injected from outside:

- crash: rank 3 SIGKILLed;
- hang: rank 3 SIGSTOPped;
- node: rank 3's node lost (its slurmd, slurmstepds and tasks SIGKILLed at once, its burst buffer wiped).

Figures, in seconds from the fault:

- detection: nvrx-hpc: the launcher's event naming the fault (`launcher.rank.exited`, `launcher.rank.hung`,
  `launcher.rank.agent_lost`); baseline: the moment the job's own script sees `srun` fail, or Slurm
  requeues the job, whichever comes first;
- failure -> first step: the first training step done after the recovery (nvrx-hpc: the agent's
  `first_iteration`; baseline: the line rank 0 prints after its first step).

The baseline is the same training without nvrx-hpc, as a user would run it: `srun python train_ckpt.py`
in a `--requeue` batch script that runs `scontrol requeue` when srun fails, with the cluster's default
settings (this dev cluster: SlurmdTimeout=10 s and cred_expire=10 s, so a requeued job waits about
11 s; Slurm's defaults are 300 s and 120 s). A hung rank is never detected by that baseline before
torch's collective timeout (30 min for gloo by default): its detection is that timeout, not waited for,
and its failure -> first step adds the measured crash baseline's requeue -> first step.

Each figure is the median of `--samples` runs with its min and max; the ratio is baseline / nvrx-hpc.
`--json` prints the same figures as one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from nvrx_hpc.core.errors import ClusterError  # noqa: E402
from nvrx_hpc.core.events import read_events  # noqa: E402
from nvrx_hpc.launcher.status import read_status  # noqa: E402
from nvrx_hpc.slurm.devcluster import DevCluster, DevClusterSpec  # noqa: E402

TRAIN = REPO / "examples" / "train_ckpt.py"
GLOO_DEFAULT_TIMEOUT_S = 1800.0  # torch.distributed's default for gloo process groups
DETECT_EVENT = {"crash": "launcher.rank.exited", "hang": "launcher.rank.hung", "node": "launcher.rank.agent_lost"}


class Bench:
    def __init__(self, cluster: DevCluster, work: Path) -> None:
        self.cluster, self.work = cluster, work
        self.env = {**os.environ, **cluster.env, "PYTHONPATH": str(REPO)}
        self.n = 0
        self.lost = ""  # the node the last node-loss sample took down

    # ------------------------------------------------------------------ jobs

    def _train(self, name: str) -> list[str]:
        tag = f"{name}-{os.getpid()}-{time.time_ns()}"
        return [sys.executable, str(TRAIN), "--steps", "400", "--ckpt-every", "2", "--step-time", "0.1",
                "--hidden", "32", "--bb-dir", f"{self.cluster.layout.root}/bb/{{domain}}/{tag}",
                "--out", str(self.work / name)]  # fmt: skip

    def _sbatch(self, name: str, nodes: int, body: str) -> str:
        script = self.work / f"{name}.sh"
        script.write_text("#!/bin/bash\n" + body + "\n")
        done = subprocess.run(
            ["sbatch", "--parsable", f"--nodes={nodes}", "--ntasks-per-node=2", "--time=15", "--requeue",
             "--no-kill", "--open-mode=append", f"--output={self.work / name}.out", str(script)],
            env=self.env, capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        return done.stdout.strip().split(";")[0]

    def _cancel(self, job: str) -> None:
        subprocess.run(["scancel", job], env=self.env, capture_output=True, timeout=30)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            out = subprocess.run(["squeue", "-h", "-j", job], env=self.env, capture_output=True, text=True, timeout=30)
            if not out.stdout.strip():
                return
            time.sleep(0.5)

    # ------------------------------------------------------------------ faults

    def _pid_of_rank(self, name: str, rank: int, timeout: float = 60) -> int:
        """The training process of `rank` (its Slurm task id; `python train_ckpt.py ...` or
        train_inprocess.py): not the launcher or srun, whose
        command lines name the script too and carry the batch step's SLURM_PROCID=0."""
        marker = str(self.work / name).encode()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for entry in Path("/proc").iterdir():
                if not entry.name.isdigit():
                    continue
                try:
                    argv = (entry / "cmdline").read_bytes()
                    environ = (entry / "environ").read_bytes().split(b"\0")
                except OSError:
                    continue
                script = argv.split(b"\0")[1:2]
                if script and script[0].endswith((b"train_ckpt.py", b"train_inprocess.py")) and marker in argv \
                        and _task_slot(environ) == rank:
                    return int(entry.name)
            time.sleep(0.2)
        raise SystemExit(f"no rank {rank} of {name}")

    def _node_pids(self, node: str) -> list[int]:
        ours = str(self.cluster.layout.root).encode()
        conf = f"SLURM_CONF={self.cluster.layout.node_etc(node)}/slurm.conf".encode()
        name = f"SLURMD_NODENAME={node}".encode()
        pids = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                environ = (entry / "environ").read_bytes().split(b"\0")
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if not any(ours in item for item in environ + argv):
                continue
            if (argv[0].endswith(b"slurmd") and node.encode() in argv) or conf in environ or name in environ:
                pids.append(int(entry.name))
        return pids

    def inject(self, kind: str, name: str) -> float:
        if kind == "node":
            rank3 = (Path("/proc") / str(self._pid_of_rank(name, 3)) / "environ").read_bytes().split(b"\0")
            node = next(v.split(b"=", 1)[1].decode() for v in rank3 if v.startswith(b"SLURMD_NODENAME="))
            self.lost = node
            pids = self._node_pids(node)
            at = time.time()
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            for bb in (self.cluster.layout.root / "bb" / node).glob(f"{name}-*"):
                shutil.rmtree(bb, ignore_errors=True)
            return at
        pid = self._pid_of_rank(name, 3)
        at = time.time()
        os.kill(pid, signal.SIGKILL if kind == "crash" else signal.SIGSTOP)
        return at

    def revive(self) -> None:
        try:
            self.cluster.revive_node(self.lost, timeout=120)
        except ClusterError as exc:
            raise SystemExit(exc.message) from None

    # ------------------------------------------------------------------ one sample each

    def nvrx(self, kind: str) -> dict:
        self.n += 1
        name = f"nvrx-{kind}-{self.n}"
        run_dir = self.work / name
        run = [sys.executable, "-m", "nvrx_hpc", "run", "--spares", "1", "--run-dir", str(run_dir), "--"]
        job = self._sbatch(name, 3, "exec " + shlex.join([*run, *self._train(name)]))
        try:
            _wait(lambda: max([r.get("iteration") or 0 for r in (read_status(run_dir) or {}).get("ranks", {}).values()]
                              or [0]) >= 5, 180, f"{name} never reached step 5")
            at = self.inject(kind, name)
            detected = _event(run_dir, DETECT_EVENT[kind], at)
            started = _event(run_dir, "launcher.step.started", at, timeout=240)
            first = _event(run_dir, "launcher.step.first_iteration", started["time"], timeout=240)
            return {"job": job, "detection_s": round(detected["time"] - at, 3),
                    "failure_to_first_step_s": round(_at(first) - at, 3)}  # fmt: skip
        finally:
            self._cancel(job)
            if kind == "node":
                self.revive()

    def baseline(self, kind: str) -> dict:
        self.n += 1
        name = f"base-{kind}-{self.n}"
        out = self.work / f"{name}.out"
        body = "\n".join([
            'echo "run start at $(date +%s.%N)"',
            shlex.join(["srun", "--label", *self._train(name)]),
            "rc=$?",
            'echo "srun exited $rc at $(date +%s.%N)"',
            'if [ "$rc" -ne 0 ]; then scontrol requeue "$SLURM_JOB_ID"; fi',
            'exit "$rc"',
        ])  # fmt: skip
        job = self._sbatch(name, 2, body)
        try:
            _wait(lambda: _firsts(out), 180, f"{name} never trained")
            time.sleep(1.0)  # a few steps and checkpoints in
            at = self.inject(kind, name)
            requeued_at = None
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline and len(_firsts(out)) < 2:
                if requeued_at is None and self.cluster.backend.job(int(job)).restart_count >= 1:
                    requeued_at = time.time()
                time.sleep(0.2)
            firsts = _firsts(out)
            if len(firsts) < 2:
                raise SystemExit(f"{name}: the requeued job never trained (see {out})")
            failed = [t for t in _srun_exits(out) if t >= at]
            detected = min([*failed, *([requeued_at] if requeued_at else [])], default=firsts[1])
            return {"job": job, "detection_s": round(detected - at, 3),
                    "failure_to_first_step_s": round(firsts[1] - at, 3),
                    "requeue_to_first_step_s": round(firsts[1] - detected, 3)}  # fmt: skip
        finally:
            self._cancel(job)
            if kind == "node":
                self.revive()


def _wait(predicate, timeout: float, why: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise SystemExit(why)


def _event(run_dir: Path, kind: str, after: float, timeout: float = 120) -> dict:
    found: list[dict] = []

    def seen() -> bool:
        found[:] = [e for e in read_events(run_dir / "events.jsonl") if e["kind"] == kind and e["time"] >= after]
        return bool(found)

    _wait(seen, timeout, f"no {kind} in {run_dir} after {after}")
    return found[0]


def _at(event: dict) -> float:
    return float((event.get("detail") or {}).get("at") or event["time"])


def _firsts(out: Path) -> list[float]:
    text = out.read_text() if out.exists() else ""
    return [float(t) for t in re.findall(r"first step \d+ done at ([0-9.]+)", text)]


def _srun_exits(out: Path) -> list[float]:
    return [float(t) for t in re.findall(r"srun exited [1-9]\d* at ([0-9.]+)", out.read_text())]


def _stats(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3),
            "n": len(values)}  # fmt: skip


def summarize(samples: dict) -> dict:
    result = {}
    crash_requeue = [s["requeue_to_first_step_s"] for s in samples.get("baseline", {}).get("crash", [])]
    for kind, runs in samples["nvrx"].items():
        nvrx = {k: _stats([r[k] for r in runs]) for k in ("detection_s", "failure_to_first_step_s")}
        if kind == "hang":
            extra = statistics.median(crash_requeue) if crash_requeue else None
            base = {"detection_s": {"median": GLOO_DEFAULT_TIMEOUT_S, "computed": "torch's gloo timeout"},
                    "failure_to_first_step_s": {"median": None if extra is None else round(GLOO_DEFAULT_TIMEOUT_S
                                                                                           + extra, 3),
                                                "computed": "gloo timeout + the crash baseline's requeue -> step"}}
        else:
            runs_b = samples["baseline"].get(kind, [])
            base = {k: _stats([r[k] for r in runs_b]) for k in ("detection_s", "failure_to_first_step_s")} if runs_b \
                else {}
        ratios = {}
        for key in ("detection_s", "failure_to_first_step_s"):
            b, n = (base.get(key) or {}).get("median"), nvrx[key]["median"]
            ratios[key] = round(b / n, 1) if b and n else None
        result[kind] = {"nvrx": nvrx, "baseline": base, "ratio_baseline_over_nvrx": ratios}
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=3, help="runs per fault kind and side (default 3)")
    parser.add_argument("--kinds", default="crash,hang,node", help="comma-separated: crash, hang, node")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    parser.add_argument("--state-dir", default="/tmp/nvrx-cluster", help="dev cluster to use (brought up if needed)")
    args = parser.parse_args()
    kinds = [k for k in args.kinds.split(",") if k]
    if args.samples < 1 or not kinds or set(kinds) - set(DETECT_EVENT):
        parser.error(f"--samples >= 1; --kinds from {', '.join(DETECT_EVENT)}")
    spank = REPO / "spank" / "nvrx_spank.so"
    cluster = DevCluster(DevClusterSpec(state_dir=Path(args.state_dir), spank_plugin=spank if spank.exists() else None))
    if (Path(args.state_dir) / "etc" / "spec.json").exists():
        cluster = DevCluster.at(Path(args.state_dir))  # a cluster already there keeps its own ports and plugin
    cluster.up(timeout=90)
    samples: dict = {"nvrx": {}, "baseline": {}}
    with tempfile.TemporaryDirectory(prefix="nvrx-recovery-") as tmp:
        bench = Bench(cluster, Path(tmp))
        for kind in kinds:
            for _ in range(args.samples):
                samples["nvrx"].setdefault(kind, []).append(bench.nvrx(kind))
                if kind != "hang":  # the hang baseline is computed (see the docstring)
                    samples["baseline"].setdefault(kind, []).append(bench.baseline(kind))
        if "hang" in kinds and "crash" not in kinds:
            samples["baseline"]["crash"] = [bench.baseline("crash")]
    result = {"samples": samples, "summary": summarize(samples)}
    if args.json:
        print(json.dumps(result, indent=1))
        return
    print(f"{'fault':6} {'figure':24} {'nvrx-hpc (median [min-max])':>30} {'baseline':>24} {'ratio':>7}")
    for kind, row in result["summary"].items():
        for key, label in (("detection_s", "detection"), ("failure_to_first_step_s", "failure -> first step")):
            n, b = row["nvrx"][key], row["baseline"].get(key, {})
            nv = f"{n['median']:.2f} s [{n['min']:.2f}-{n['max']:.2f}]"
            if b.get("computed"):
                bv = f"{b['median']:.0f} s (computed)" if b.get("median") is not None else "n/a"
            elif b:
                bv = f"{b['median']:.2f} s [{b['min']:.2f}-{b['max']:.2f}]"
            else:
                bv = "n/a"
            ratio = row["ratio_baseline_over_nvrx"][key]
            print(f"{kind:6} {label:24} {nv:>30} {bv:>24} {'' if ratio is None else f'{ratio:.1f}x':>7}")


def _task_slot(environ: list[bytes]) -> int | None:
    """A training task's number in its job: its Slurm task id, plus the first slot of its step when it runs in
    an in-process refill step (NVRX_IP_SLOT_BASE)."""
    values = dict(item.split(b"=", 1) for item in environ if b"=" in item)
    try:
        return int(values.get(b"SLURM_PROCID", b"")) + int(values.get(b"NVRX_IP_SLOT_BASE", b"0") or b"0")
    except ValueError:
        return None


if __name__ == "__main__":
    main()

