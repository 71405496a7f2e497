"""Goodput under a steady stream of faults: effective training time of a job under `nvrx-hpc run`.

    python benchmarks/goodput.py [--minutes 30] [--mtbf 60] [--nodes 4] [--tasks-per-node 2] [--spares 2] [--json]
    python benchmarks/goodput.py --inprocess [--spare-ranks 1] ...   # in-process restart first (docs/inprocess.md)
    python benchmarks/goodput.py --standby ...   # step restarts into a standby step (docs/launcher.md)

One job of examples/train_ckpt.py (gloo, async checkpoints through nvrx_hpc.ckpt every 2 steps of 0.1 s)
trains a fixed number of steps, chosen so that a fault-free run takes about `--minutes`. Every `--mtbf`
seconds one fault is injected at random:

- rank kill: a random rank SIGKILLed;
- rank hang: a random rank SIGSTOPped (found by the node agent's heartbeat deadline);
- node loss: a random training node's slurmd, slurmstepds and tasks SIGKILLed at once, its burst buffer
  wiped; injected only while the job still has a spare node (beyond that it would requeue, which
  benchmarks/recovery.py measures), and never on the batch host, where the launcher itself runs
  (docs/scale.md: when the launcher's node dies);
- Xid: a simulated Xid 79 on a random training node (the simulated GPU backend, chosen explicitly,
  read by the agents' health loop every second); also only while a spare remains.

With `--inprocess` the job is examples/train_inprocess.py under `nvrx-hpc run --inprocess --spare-ranks K`
(collective timeout and soft timeout 2 s each). The spare nodes run warm spare tasks in the training step: a
killed or hung rank, a lost node and a node with an Xid are all recovered inside the running ranks, their ranks
moving to spare tasks on healthy nodes; only when a loss finds too few spare tasks left does the step restart
(which brings fresh spares). A rank fault hits the task that holds that torch rank now (ranks move).

With `--standby` the job runs under `nvrx-hpc run --standby`: each step restart starts from a standby step
whose ranks imported torch while the attempt before them trained. A rank fault then hits the process that
holds the rank in status.json (a standby task runs the script in its own process, under its own command line).

Then the same steps run once more without faults. Figures: effective training time (ETTR) = steps x the
fault-free run's time per step / the faulted run's wall time (first step to last); each fault's
recovery time (from the injection to the first training step after it; in-process: to the last rank back
in the training function); and whether the final model
hash equals the fault-free run's. `--json` prints one object with at least ettr, faults, recoveries_s
and hash_equal. Nodes lost or given an Xid are brought back at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from recovery import Bench  # noqa: E402  (beside this script: pid lookup, node loss and revival)

from nvrx_hpc.core.events import read_events  # noqa: E402
from nvrx_hpc.launcher.status import read_status  # noqa: E402
from nvrx_hpc.slurm.devcluster import DevCluster, DevClusterSpec  # noqa: E402

TRAIN = REPO / "examples" / "train_ckpt.py"
TRAIN_INPROCESS = REPO / "examples" / "train_inprocess.py"
STEP_TIME = 0.1
KINDS = ("crash", "hang", "node", "xid")


class Goodput(Bench):
    def __init__(self, cluster: DevCluster, work: Path, args: argparse.Namespace) -> None:
        super().__init__(cluster, work)
        self.args = args
        self.lost_nodes: list[str] = []
        self.xid_nodes: list[str] = []

    def job(self, name: str, steps: int) -> tuple[str, Path]:
        a = self.args
        run_dir = self.work / name
        run = [sys.executable, "-m", "nvrx_hpc", "run", "--spares", str(a.spares), "--max-restarts", "100000",
               "--health-interval", "1", "--run-dir", str(run_dir)]  # fmt: skip
        script_path = TRAIN
        env = "export NVRX_HEALTH__GPU_BACKEND=sim NVRX_LAUNCHER__EXCLUDE_AFTER=100000\n"
        if a.standby:
            run.append("--standby")
        if not a.inprocess:  # a hang is seen when the calibrated heartbeat deadline passes
            env += f"export NVRX_AGENT__CALIBRATION_FLOOR_S={a.hang_floor:g}\n"
        if a.inprocess:
            script_path = TRAIN_INPROCESS
            run += ["--tasks-per-node", str(a.tasks_per_node), "--inprocess", "--spare-ranks", str(a.spare_ranks),
                    "--heartbeat-timeout", "60"]  # fmt: skip
            env += "export NVRX_INPROCESS__PG_TIMEOUT_S=2 NVRX_INPROCESS__SOFT_TIMEOUT_S=2\n"
        train = [sys.executable, str(script_path), "--steps", str(steps), "--ckpt-every", "2", "--step-time",
                 str(STEP_TIME), "--hidden", "32",
                 "--bb-dir", f"{self.cluster.layout.root}/bb/{{domain}}/{name}-{os.getpid()}", "--out", str(run_dir)]
        # A rank fault is the software's, not the node's: it must not cost a healthy node (exclude_after).
        body = env + "exec " + shlex.join([*run, "--", *train])  # fmt: skip
        script = self.work / f"{name}.sh"
        script.write_text("#!/bin/bash\n" + body + "\n")
        done = subprocess.run(
            ["sbatch", "--parsable", f"--nodes={a.nodes + a.spares}", f"--ntasks-per-node={a.tasks_per_node}",
             f"--time={int(a.minutes * 4) + 10}", "--no-kill", f"--output={self.work / name}.out", str(script)],
            env=self.env, capture_output=True, text=True, timeout=30, check=True,
        )  # fmt: skip
        return done.stdout.strip().split(";")[0], run_dir

    def finished(self, job: str) -> bool:
        out = subprocess.run(["squeue", "-h", "-j", job], env=self.env, capture_output=True, text=True, timeout=30)
        return not out.stdout.strip()

    def run(self, name: str, steps: int, faults: bool) -> dict:
        job, run_dir = self.job(name, steps)
        rng = random.Random(self.args.seed)
        injected: list[dict] = []
        try:
            first = _wait_event(run_dir, "launcher.step.first_iteration", 0.0, 300)
            next_fault = time.time() + self.args.mtbf
            while not self.finished(job):
                if faults and time.time() >= next_fault:
                    try:
                        injected.append(self.fault(name, run_dir, rng, job))
                    except SystemExit:
                        if self.finished(job):  # it ended while its target was looked for: no fault to count
                            break
                        raise
                    next_fault = time.time() + self.args.mtbf
                time.sleep(0.5)
        finally:
            self._cancel(job)
        seen = read_events(run_dir / "events.jsonl")
        end = max(e["time"] for e in seen)
        for fault in injected:
            after = [e["time"] for e in seen
                     if e["kind"] == "launcher.step.first_iteration" and e["time"] > fault["at"]]
            back = _inprocess_back(seen, fault["at"])
            after = [t for t in [*after, back] if t is not None]
            fault["recovery_s"] = round(min(after) - fault["at"], 2) if after else None
        hash_file = run_dir / "final_hash.txt"
        return {"job": job, "wall_s": end - first["time"], "faults": injected,
                "hash": hash_file.read_text().strip() if hash_file.exists() else None,
                "restarts": sum(1 for e in seen if e["kind"] == "launcher.restart"),
                "inprocess_restarts": sum(1 for e in seen if e["kind"] == "inprocess.restart")}  # fmt: skip

    def fault(self, name: str, run_dir: Path, rng: random.Random, job: str) -> dict:
        status = read_status(run_dir) or {}
        pool = status.get("pool") or {}
        kinds = list(KINDS) if pool.get("spares") else ["crash", "hang"]
        kind = rng.choice(kinds)
        active = list(pool.get("active") or [])
        if kind == "node":  # not the batch host: the launcher runs there, and losing it ends the job
            launcher_node = self.cluster.backend.job(int(job)).batch_host
            active = [n for n in active if n != launcher_node]
        if kind in ("node", "xid") and active:
            node = rng.choice(active)
            if kind == "node":
                self.lost = node
                at = self._lose(node, name)
                self.lost_nodes.append(node)
            else:
                at = time.time()
                subprocess.run([sys.executable, "-m", "nvrx_hpc", "cluster", "inject-gpu-fault", node, "xid=79",
                                "--state-dir", str(self.cluster.layout.root)], env=self.env, capture_output=True,
                               text=True, timeout=30, check=True)  # fmt: skip
                self.xid_nodes.append(node)
            return {"kind": kind, "node": node, "at": at}
        world = self.args.nodes * self.args.tasks_per_node
        rank = rng.randrange(world)
        if self.args.inprocess:
            pid = self._holder(name, run_dir, rank)
        elif self.args.standby:
            pid = _status_pid(run_dir, rank)
        else:
            pid = self._pid_of_rank(name, rank)
        at = time.time()
        os.kill(pid, 9 if kind == "crash" else 19)  # SIGKILL, SIGSTOP
        return {"kind": kind, "rank": rank, "at": at}

    def _holder(self, name: str, run_dir: Path, rank: int, timeout: float = 120) -> int:
        """The process that trains torch rank `rank` now: never a waiting spare task (a spare hung or killed
        does not touch the training), never one that has just lost the rank."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            slot = _slot_of(read_events(run_dir / "events.jsonl"), rank)
            if slot is not None:
                try:
                    return self._pid_of_rank(name, slot, timeout=1)
                except SystemExit:
                    pass  # that task is gone: the rank is moving to a spare
            time.sleep(0.5)
        raise SystemExit(f"no task of {name} holds rank {rank} within {timeout:g} s")

    def _lose(self, node: str, name: str) -> float:
        pids = self._node_pids(node)
        at = time.time()
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
        for bb in (self.cluster.layout.root / "bb" / node).glob(f"{name}-*"):
            shutil.rmtree(bb, ignore_errors=True)
        return at

    def repair(self) -> None:
        """Bring back what the faults took: lost slurmds, simulated Xids, drained nodes."""
        subprocess.run([sys.executable, "-m", "nvrx_hpc", "cluster", "clear-gpu-faults", "--state-dir",
                        str(self.cluster.layout.root)], env=self.env, capture_output=True, timeout=30)  # fmt: skip
        for node in dict.fromkeys(self.lost_nodes):
            self.lost = node
            self.revive()
        for node in dict.fromkeys(self.xid_nodes):
            if self.cluster.backend.node(node).drained:
                self.cluster.backend.resume([node])


def _status_pid(run_dir: Path, rank: int, timeout: float = 120) -> int:
    """The live process of `rank` from status.json (what the agents last reported). An excluded node's agent
    still reports the ranks it held, under the same numbers: every entry is read, duplicates included."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            document = json.loads((run_dir / "status.json").read_text(), object_pairs_hook=lambda pairs: pairs)
        except (OSError, ValueError):
            document = []
        for key, ranks in document:
            for number, summary in ranks if key == "ranks" else []:
                summary = dict(summary)
                pid = summary.get("pid")
                if number == str(rank) and summary.get("state") in ("registered", "running") \
                        and isinstance(pid, int) and Path(f"/proc/{pid}").exists():
                    return pid
        time.sleep(0.5)
    raise SystemExit(f"no live process of rank {rank} in {run_dir}/status.json within {timeout:g} s")


def _inprocess_back(events: list[dict], at: float) -> float | None:
    """In-process restart: when the last rank of the first round started wholly after `at` was back in the
    training function (None: no such round)."""
    rounds: dict[tuple, list[float]] = {}
    for e in events:
        if e["kind"] == "inprocess.round.started":
            key = (e["detail"].get("round"), e.get("source"), _step_of(events, e["time"]))
            rounds.setdefault(key, []).append(e["time"])
    whole = [max(times) for times in rounds.values() if min(times) > at]
    return min(whole) if whole else None


def _slot_of(events: list[dict], rank: int) -> int | None:
    """The Slurm task that holds torch rank `rank` in the newest round of the current step (in-process restart
    moves ranks to spare tasks); None before that round has started there."""
    step = _step_of(events, float("inf"))
    rounds = [e for e in events if e["kind"] == "inprocess.round.started" and _step_of(events, e["time"]) == step]
    newest = max((e["detail"]["round"] for e in rounds), default=None)
    held = [e for e in rounds if e.get("rank") == rank and e["detail"]["round"] == newest]
    return held[-1]["detail"]["slot"] if held else None


def _step_of(events: list[dict], t: float) -> int:
    """Which training step (launcher.step.started before `t`) an event belongs to: rounds restart at 0 in each."""
    return sum(1 for e in events if e["kind"] == "launcher.step.started" and e["time"] <= t)


def _wait_event(run_dir: Path, kind: str, after: float, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            found = [e for e in read_events(run_dir / "events.jsonl") if e["kind"] == kind and e["time"] >= after]
        except OSError:
            found = []
        if found:
            return found[0]
        time.sleep(0.3)
    raise SystemExit(f"no {kind} in {run_dir} within {timeout:g} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=30.0, help="about how long the fault-free run trains")
    parser.add_argument("--mtbf", type=float, default=60.0, help="seconds between two faults (default 60)")
    parser.add_argument("--nodes", type=int, default=4, help="training nodes (default 4: 8 ranks)")
    parser.add_argument("--tasks-per-node", type=int, default=2)
    parser.add_argument("--spares", type=int, default=2)
    parser.add_argument("--step-s", type=float, default=0.16,
                        help="expected fault-free seconds per step, to size the run (default 0.16)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--inprocess", action="store_true",
                        help="nvrx-hpc run --inprocess (examples/train_inprocess.py)")
    parser.add_argument("--spare-ranks", type=int, default=1, help="with --inprocess: warm spare ranks per node")
    parser.add_argument("--standby", action="store_true",
                        help="nvrx-hpc run --standby: step restarts start from a standby step")
    parser.add_argument("--hang-floor", type=float, default=2.0,
                        help="agent.calibration_floor_s of the step-restart runs (default 2 s, the in-process "
                             "runs' process-group timeout; the config's default is 5)")
    parser.add_argument("--state-dir", default="/tmp/nvrx-goodput-cluster", help="dev cluster (brought up if needed)")
    parser.add_argument("--ctld-port", type=int, default=int(os.environ.get("NVRX_TEST_CTLD_PORT", "25817")),
                        help="slurmctld port of a cluster brought up here (default $NVRX_TEST_CTLD_PORT or 25817)")
    parser.add_argument("--slurmd-port-base", type=int,
                        default=int(os.environ.get("NVRX_TEST_SLURMD_PORT_BASE", "25901")),
                        help="first slurmd port of a cluster brought up here (default $NVRX_TEST_SLURMD_PORT_BASE "
                             "or 25901)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--keep", help="run the jobs in this directory and keep it (events, logs), not a temporary one")
    args = parser.parse_args()
    if args.standby and args.inprocess:
        parser.error("--standby and --inprocess do not go together")
    sizes_ok = min(args.nodes, args.tasks_per_node) >= 1 and args.spares >= 0
    if min(args.minutes, args.mtbf, args.hang_floor) <= 0 or not sizes_ok:
        parser.error("--minutes, --mtbf and --hang-floor > 0; --nodes and --tasks-per-node >= 1; --spares >= 0")
    state = Path(args.state_dir)
    cluster = DevCluster.at(state) if (state / "etc" / "spec.json").exists() else None
    if cluster is not None and cluster.spec.nodes < args.nodes + args.spares:  # too small for the job: renew it
        cluster.down(stop_munge=False)
        cluster = None
    if cluster is None:
        spank = REPO / "spank" / "nvrx_spank.so"
        cluster = DevCluster(DevClusterSpec(state_dir=state, nodes=args.nodes + args.spares + 1,
                                            cpus_per_node=args.tasks_per_node, ctld_port=args.ctld_port,
                                            slurmd_port_base=args.slurmd_port_base,
                                            spank_plugin=spank if spank.exists() else None))  # fmt: skip
    cluster.up(timeout=120)
    steps = max(20, int(args.minutes * 60 / args.step_s))
    # a finished job's Epilog may still be writing its detached report into the run dir as the benchmark ends: a
    # temporary directory left behind is not a failure of the run it measured
    with tempfile.TemporaryDirectory(prefix="nvrx-goodput-", ignore_cleanup_errors=True) as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        bench = Goodput(cluster, work, args)
        try:
            faulted = bench.run("faulted", steps, faults=True)
        finally:
            bench.repair()
        clean = bench.run("clean", steps, faults=False)
    per_step = clean["wall_s"] / steps
    recoveries = [f["recovery_s"] for f in faulted["faults"] if f.get("recovery_s") is not None]
    result = {
        "ettr": round(steps * per_step / faulted["wall_s"], 4), "steps": steps,
        "fault_free_step_s": round(per_step, 4), "faulted_wall_s": round(faulted["wall_s"], 1),
        "clean_wall_s": round(clean["wall_s"], 1), "faults": len(faulted["faults"]),
        "faults_by_kind": {k: sum(1 for f in faulted["faults"] if f["kind"] == k) for k in KINDS},
        "recoveries_s": recoveries, "restarts": faulted["restarts"],
        "hash_equal": faulted["hash"] is not None and faulted["hash"] == clean["hash"],
        "mtbf_s": args.mtbf, "minutes": args.minutes, "inprocess": args.inprocess, "standby": args.standby,
        "hang_floor_s": None if args.inprocess else args.hang_floor,
        "inprocess_restarts": faulted["inprocess_restarts"],
    }  # fmt: skip
    if args.json:
        print(json.dumps(result))
        return
    print(f"{steps} steps, fault-free {per_step:.3f} s a step; faulted run {result['faulted_wall_s']} s with "
          f"{result['faults']} faults {result['faults_by_kind']}, {result['restarts']} restarts")
    print(f"ETTR {100 * result['ettr']:.1f} %; recovery per fault (s): {recoveries}; "
          f"final hash equal to the fault-free run: {result['hash_equal']}")


if __name__ == "__main__":
    main()
