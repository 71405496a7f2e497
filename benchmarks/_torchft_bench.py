"""TorchFT's side of benchmarks/inprocess.py: the time the healthy replicas lose per failure.

    python benchmarks/_torchft_bench.py [--replicas 8] [--faults 10] [--kind exception|sigkill] [--json]

Setup (TorchFT 0.2, `pip install torchft==0.2.0`): a lighthouse (`torchft._torchft.LighthouseServer` in a
child Python, bound to 127.0.0.1 on a free port, min_replicas = replicas - 1 by default, TorchFT's
default heartbeat timeout 5 s and join timeout 60 s) and `replicas` processes of
benchmarks/_torchft_worker.py, each a replica group of one rank (gloo, torchft Manager with
min_replica_size = min_replicas, torchft Optimizer) training examples/train.py's model and data with
its 0.05 s step sleep and, like it, one gradient all-reduce per step (`Manager.allreduce`;
grad_sync="ddp" uses `torchft.DistributedDataParallel` instead, which in torchft 0.2.0 crashes every
survivor when a peer dies during the all-reduce: see the worker), with the timeouts of TorchFT's
train_ddp.py example on CPU (gloo 5 s, Manager 30 s; quorum 60 s, TorchFT's default: a SIGKILL during
the all-reduce costs the ranks that are not the dead one's ring neighbours the gloo timeout, see the
worker). This module plays the replicas'
supervisor: whenever one exits or is killed it starts it again at once (same replica index, new
TorchFT replica id), and the new process heals from a live one.

Faults, one at a time, on replica i % replicas for fault i, each once the previous one is over
(every replica, the restarted one included, has done `steps_between` committed steps with all
`replicas` participating since that fault):
- exception: the file control/raise.R makes replica R raise a Python exception at the start of its
  next step; the process exits 1 and is restarted. The fault time is the worker's "raise" line.
- sigkill: replica R's process is SIGKILLed from here, and restarted; the fault time is just before
  the kill.

Lost time of one healthy replica (every replica but the faulted one) for one fault at time T:
- t0 = the end of its last step that ended at or before T;
- its step period = the time between the ends of two consecutive steps of the same process;
- normal rate: a step is normal if it committed, all `replicas` replicas participated and its period
  is at most `normal_factor` (1.5) times the baseline; the replica is back at the normal rate at t1,
  the end of the last step before the first run of `normal_run` (5) consecutive normal steps after t0
  (t1 = t0 if the first step after t0 already starts such a run);
- n = the number of committed steps it ended in (t0, t1];
- lost = (t1 - t0) - n * baseline_step_s.
So a failure costs what the replica did not train for (waiting for the failed peer's heartbeat to
expire, the new quorum, rebuilding the gloo group twice: without the failed replica and with its
replacement, sending it a checkpoint, and slower steps meanwhile), with the steps it did train in
that time credited at the fault-free rate. One sample per fault: the mean over the healthy replicas
(all of them lose nearly the same, as every step synchronises them); p50_s and p99_s are over the
samples (linear interpolation; with 10 samples p99 is about the largest). A fault gives no sample (it
is listed in `failed`, with the reason in per_fault) if a healthy replica's process ended before the
next fault (it lost its state, so its time is not comparable) or if one never got back to the
normal rate. The time the failed
replica itself loses (exit, restart, imports, healing) is not counted, except where it makes the
others wait.

baseline_step_s: the median step period over `baseline_steps` steps of every replica, with all of them
participating, before the first fault (after `warmup_steps` such steps).

On a machine with fewer cores than replicas the processes share the CPUs: a restarting replica's
imports slow the others' steps, and this counts as lost time; the other way round, steps with one
replica fewer can be faster than the baseline, and crediting them at the baseline takes that gain
off the lost time (about 0.5 s over 80 steps at 8 replicas on 2 cores).

Where the time goes in TorchFT 0.2 (read from the logs): the survivors' next quorum waits until the
lighthouse stops counting the dead replica as healthy (heartbeat timeout, 5 s), or, when its
replacement has started heartbeating by then, until the replacement asks to join (so up to its
start-up time); a SIGKILL during the all-reduce adds the gloo timeout for the ranks that are not the
dead one's ring neighbours. The rejoin (new gloo group, checkpoint sent over HTTP) costs about a step.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
WORKER = HERE / "_torchft_worker.py"

# A lighthouse in a child Python: binds 127.0.0.1:0 (so the port is free by construction), prints its
# port, and lives until its stdin closes (the parent's end of the pipe: also when the parent dies).
_LIGHTHOUSE = """
import sys
from torchft._torchft import LighthouseServer
server = LighthouseServer(bind="127.0.0.1:0", min_replicas=int(sys.argv[1]),
                          heartbeat_timeout_ms=int(sys.argv[2]), join_timeout_ms=int(sys.argv[3]))
print(server.address().rsplit(":", 1)[1], flush=True)
sys.stdin.read()
server.shutdown()
"""


class BenchError(RuntimeError):
    pass


@dataclass
class Replica:
    index: int
    proc: subprocess.Popen
    log: Path
    offset: int = 0
    partial: bytes = b""
    steps: list[dict] = field(default_factory=list)  # every step line, all incarnations, in order
    events: list[dict] = field(default_factory=list)
    restarts: int = 0


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if len(ordered) == 1:
        return ordered[0]
    pos = (len(ordered) - 1) * q
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


class _Run:
    def __init__(
        self,
        replicas: int,
        min_replicas: int,
        work: Path,
        step_time: float,
        heartbeat_timeout_ms: int,
        join_timeout_ms: int,
        timeouts: tuple[float, float, float],
        grad_sync: str,
    ) -> None:
        self.n, self.min_replicas, self.work, self.grad_sync = replicas, min_replicas, work, grad_sync
        self.step_time, self.timeouts = step_time, timeouts
        self.hb_ms, self.join_ms = heartbeat_timeout_ms, join_timeout_ms
        self.control = work / "control"
        self.control.mkdir(parents=True, exist_ok=True)
        self.lighthouse: subprocess.Popen | None = None
        self.address = ""
        self.replicas: list[Replica] = []
        self.unexpected_exits: list[dict] = []
        self.expected_exit: dict[int, int] = {}  # replica -> pid whose exit we caused

    # ------------------------------------------------------------ processes

    def start_lighthouse(self, timeout_s: float = 60.0) -> None:
        err = open(self.work / "lighthouse.err", "ab")
        self.lighthouse = subprocess.Popen(
            [sys.executable, "-c", _LIGHTHOUSE, str(self.min_replicas), str(self.hb_ms), str(self.join_ms)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err,
            start_new_session=True,
        )
        err.close()
        os.set_blocking(self.lighthouse.stdout.fileno(), False)
        deadline, line = time.monotonic() + timeout_s, b""
        while not line.endswith(b"\n"):
            if self.lighthouse.poll() is not None:
                raise BenchError(f"lighthouse exited {self.lighthouse.returncode}; see {self.work}/lighthouse.err")
            if time.monotonic() > deadline:
                raise BenchError(f"lighthouse gave no port within {timeout_s:.0f} s")
            line += self.lighthouse.stdout.read() or b""
            time.sleep(0.05)
        self.address = f"http://127.0.0.1:{int(line.split()[0])}"

    def _spawn(self, index: int) -> subprocess.Popen:
        err = open(self.work / f"replica-{index}.err", "ab")
        try:
            return subprocess.Popen(
                [sys.executable, str(WORKER), "--replica", str(index), "--lighthouse", self.address,
                 "--min-replicas", str(self.min_replicas), "--control", str(self.control),
                 "--log", str(self.work / f"replica-{index}.jsonl"), "--step-time", str(self.step_time),
                 "--pg-timeout-s", str(self.timeouts[0]), "--timeout-s", str(self.timeouts[1]),
                 "--quorum-timeout-s", str(self.timeouts[2]), "--grad-sync", self.grad_sync, "--exit-with-parent"],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, start_new_session=True)  # fmt: skip
        finally:
            err.close()

    def start_replicas(self) -> None:
        for index in range(self.n):
            self.replicas.append(Replica(index, self._spawn(index), self.work / f"replica-{index}.jsonl"))

    def supervise(self) -> None:
        """Restart every replica whose process has ended (the supervisor's job), and read new lines."""
        for rep in self.replicas:
            if rep.proc.poll() is not None:
                if self.expected_exit.pop(rep.index, None) != rep.proc.pid:
                    self.unexpected_exits.append(
                        {"replica": rep.index, "pid": rep.proc.pid, "rc": rep.proc.returncode, "t": time.time()}
                    )
                rep.proc = self._spawn(rep.index)
                rep.restarts += 1
            self._read(rep)

    def _read(self, rep: Replica) -> None:
        try:
            with open(rep.log, "rb") as f:
                f.seek(rep.offset)
                data = f.read()
        except FileNotFoundError:
            return
        rep.offset += len(data)
        *lines, rep.partial = (rep.partial + data).split(b"\n")
        for line in lines:
            record = json.loads(line)
            (rep.events if "event" in record else rep.steps).append(record)

    def stop(self) -> None:
        (self.control / "stop").touch()
        deadline = time.monotonic() + 20
        for rep in self.replicas:
            try:
                rep.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass

    def cleanup(self) -> None:
        for rep in self.replicas:
            if rep.proc.poll() is None:
                try:
                    os.killpg(rep.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            rep.proc.wait()
        if self.lighthouse is not None:
            try:
                self.lighthouse.stdin.close()
                self.lighthouse.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                try:
                    os.killpg(self.lighthouse.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                self.lighthouse.wait()
            self.lighthouse.stdout.close()

    # ------------------------------------------------------------ progress

    def full_steps_since(self, rep: Replica, t: float) -> int:
        """Committed steps with every replica participating, started after t by rep's current process."""
        pid = rep.proc.pid
        return sum(
            1
            for s in rep.steps
            if s["pid"] == pid and s["t_start"] > t and s["committed"] and s["participants"] == self.n
        )

    def wait_until(self, predicate, deadline: float, what: str) -> None:
        while not predicate():
            if time.monotonic() > deadline:
                raise BenchError(f"timed out waiting for {what}")
            time.sleep(0.02)
            self.supervise()


def _periods(steps: list[dict]) -> list[tuple[dict, float | None]]:
    """Each step with its period (end - previous end of the same process; None for a process's first)."""
    out, prev = [], None
    for s in steps:
        out.append((s, s["t_end"] - prev["t_end"] if prev is not None and prev["pid"] == s["pid"] else None))
        prev = s
    return out


def _lost(
    steps: list[dict], t_fault: float, t_next: float, n: int, baseline: float, factor: float, run: int
) -> dict | None:
    """One healthy replica's lost time for the fault at t_fault (module docstring); None: never back."""
    before = [s for s in steps if s["t_end"] <= t_fault]
    if not before:
        return None
    t0 = before[-1]["t_end"]
    after = [(s, p) for s, p in _periods(steps) if t0 < s["t_end"] <= t_next]

    def normal(s: dict, p: float | None) -> bool:
        return s["committed"] and s["participants"] == n and p is not None and p <= factor * baseline

    for j in range(len(after) - run + 1):
        if all(normal(s, p) for s, p in after[j : j + run]):
            t1 = after[j - 1][0]["t_end"] if j else t0
            done = sum(1 for s, _ in after[:j] if s["committed"])
            return {"lost_s": (t1 - t0) - done * baseline, "wall_s": t1 - t0, "steps": done}
    return None


def measure_torchft(
    replicas: int = 8,
    faults: int = 10,
    kind: str = "exception",
    steps_between: int = 20,
    timeout_s: float = 1800.0,
    *,
    step_time: float = 0.05,
    min_replicas: int | None = None,
    heartbeat_timeout_ms: int = 5000,
    join_timeout_ms: int = 60000,
    pg_timeout_s: float = 5.0,
    manager_timeout_s: float = 30.0,
    quorum_timeout_s: float = 60.0,
    grad_sync: str = "allreduce",
    warmup_steps: int = 10,
    baseline_steps: int = 30,
    normal_factor: float = 1.5,
    normal_run: int = 5,
    fault_timeout_s: float = 180.0,
    work_dir: str | os.PathLike | None = None,
) -> dict:
    """Run TorchFT with `faults` faults of `kind` and return the healthy replicas' lost time per failure.

    Keys: p50_s, p99_s, mean_s, n (faults measured), samples (seconds, one per fault), baseline_step_s,
    per_fault (details), failed (faults with no sample), and the settings. Every process started here
    is ended before returning, also on error or timeout (BenchError). The logs stay in work_dir if one
    is given, else in a temporary directory that is removed (also on error).
    """
    if kind not in ("exception", "sigkill"):
        raise ValueError(f"kind must be 'exception' or 'sigkill', not {kind!r}")
    if replicas < 2 or faults < 1 or steps_between < normal_run:
        raise ValueError("need replicas >= 2, faults >= 1 and steps_between >= normal_run")
    min_replicas = max(1, replicas - 1) if min_replicas is None else min_replicas
    temp = None if work_dir else tempfile.mkdtemp(prefix="torchft-bench-")
    work = Path(work_dir or temp)
    work.mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    load_start = os.getloadavg()
    run = _Run(
        replicas,
        min_replicas,
        work,
        step_time,
        heartbeat_timeout_ms,
        join_timeout_ms,
        (pg_timeout_s, manager_timeout_s, quorum_timeout_s),
        grad_sync,
    )
    fault_log: list[dict] = []
    try:
        run.start_lighthouse()
        run.start_replicas()
        t_begin = time.time()
        need = warmup_steps + baseline_steps + 1
        run.wait_until(
            lambda: all(run.full_steps_since(r, t_begin) >= need for r in run.replicas),
            deadline,
            f"{replicas} replicas to train together",
        )
        periods = []
        for rep in run.replicas:
            full = [
                (s, p)
                for s, p in _periods(rep.steps)
                if s["committed"] and s["participants"] == replicas and p is not None
            ]
            periods += [p for _, p in full[warmup_steps : warmup_steps + baseline_steps]]
        baseline = statistics.median(periods)

        for i in range(faults):
            target = run.replicas[i % replicas]
            old_pid = target.proc.pid
            run.expected_exit[target.index] = old_pid
            if kind == "sigkill":
                t_fault = time.time()
                os.kill(old_pid, signal.SIGKILL)
            else:
                t_req = time.time()
                (run.control / f"raise.{target.index}").touch()
                run.wait_until(
                    lambda t_req=t_req, target=target: any(
                        e["event"] == "raise" and e["t"] >= t_req for e in target.events
                    ),
                    min(deadline, time.monotonic() + fault_timeout_s),
                    f"replica {target.index} to raise",
                )
                t_fault = next(e["t"] for e in target.events if e["event"] == "raise" and e["t"] >= t_req)
            limit = min(deadline, time.monotonic() + fault_timeout_s)
            run.wait_until(
                lambda target=target, old_pid=old_pid, t_fault=t_fault: (
                    target.proc.pid != old_pid
                    and all(run.full_steps_since(r, t_fault) >= steps_between for r in run.replicas)
                ),
                limit,
                f"recovery from fault {i} (replica {target.index})",
            )
            fault_log.append({"fault": i, "replica": target.index, "t": t_fault, "old_pid": old_pid})
        run.stop()
    finally:
        run.cleanup()
        for rep in run.replicas:
            run._read(rep)
        if temp:
            shutil.rmtree(temp, ignore_errors=True)

    per_fault, samples, failed = [], [], []
    for k, fault in enumerate(fault_log):
        t_next = fault_log[k + 1]["t"] if k + 1 < len(fault_log) else float("inf")
        lost = {}
        for rep in run.replicas:
            if rep.index == fault["replica"]:
                continue
            lost[rep.index] = _lost(rep.steps, fault["t"], t_next, replicas, baseline, normal_factor, normal_run)
        good = [v["lost_s"] for v in lost.values() if v is not None]
        crashed = sorted({e["replica"] for e in run.unexpected_exits if fault["t"] <= e["t"] < t_next})
        entry = {**fault, "per_replica": lost, "healthy_exited": crashed}
        if crashed:
            entry["no_sample"] = f"healthy replicas {crashed} exited"
        elif len(good) < len(lost):
            entry["no_sample"] = "not back at the normal rate before the next fault"
        else:
            entry["lost_s"] = statistics.fmean(good)
            samples.append(entry["lost_s"])
        if "no_sample" in entry:
            failed.append(fault["fault"])
        per_fault.append(entry)
    result = {
        "framework": "torchft", "kind": kind, "replicas": replicas, "min_replicas": min_replicas,
        "n": len(samples), "p50_s": _percentile(samples, 0.5) if samples else None,
        "p99_s": _percentile(samples, 0.99) if samples else None,
        "mean_s": statistics.fmean(samples) if samples else None, "samples": samples, "baseline_step_s": baseline,
        "failed": failed, "unexpected_exits": run.unexpected_exits,
        "settings": {"grad_sync": grad_sync, "step_time_s": step_time, "steps_between": steps_between,
                     "heartbeat_timeout_ms": heartbeat_timeout_ms, "join_timeout_ms": join_timeout_ms,
                     "pg_timeout_s": pg_timeout_s, "manager_timeout_s": manager_timeout_s,
                     "quorum_timeout_s": quorum_timeout_s, "normal_factor": normal_factor,
                     "normal_run": normal_run, "torchft": _version("torchft"), "torch": _version("torch")},
        "loadavg_start": load_start, "loadavg_end": os.getloadavg(), "per_fault": per_fault,
    }  # fmt: skip
    if not temp:
        result["work_dir"] = str(work)
    return result


def _version(dist: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "absent"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replicas", type=int, default=8)
    parser.add_argument("--faults", type=int, default=10)
    parser.add_argument("--kind", choices=("exception", "sigkill"), default="exception")
    parser.add_argument("--steps-between", type=int, default=20, help="full steps after a fault before the next")
    parser.add_argument("--timeout-s", type=float, default=1800.0, help="the whole run")
    parser.add_argument("--step-time", type=float, default=0.05, help="sleep per step (examples/train.py's)")
    parser.add_argument("--min-replicas", type=int, default=None, help="default: replicas - 1")
    parser.add_argument("--heartbeat-timeout-ms", type=int, default=5000, help="lighthouse (TorchFT default 5000)")
    parser.add_argument("--pg-timeout-s", type=float, default=5.0, help="gloo (5: torchft's train_ddp.py on CPU)")
    parser.add_argument("--join-timeout-ms", type=int, default=60000, help="lighthouse (TorchFT default 60000)")
    parser.add_argument(
        "--grad-sync",
        choices=("allreduce", "ddp"),
        default="allreduce",
        help="one Manager.allreduce per step (default) or torchft.DistributedDataParallel",
    )
    parser.add_argument("--work-dir", default=None, help="keep the logs here (default: a removed temp dir)")
    parser.add_argument("--json", action="store_true", help="print the result as one JSON object")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # so that the cleanup runs
    result = measure_torchft(args.replicas, args.faults, args.kind, args.steps_between, args.timeout_s,
                             step_time=args.step_time, min_replicas=args.min_replicas,
                             heartbeat_timeout_ms=args.heartbeat_timeout_ms, join_timeout_ms=args.join_timeout_ms,
                             pg_timeout_s=args.pg_timeout_s,
                             grad_sync=args.grad_sync, work_dir=args.work_dir)  # fmt: skip
    if args.json:
        print(json.dumps(result))
    elif not result["n"]:
        print(
            f"torchft {result['kind']}: no fault gave a sample: "
            + "; ".join(f"{f['fault']}: {f['no_sample']}" for f in result["per_fault"])
        )
    else:
        print(
            f"torchft {result['kind']}: {result['replicas']} replicas, {result['n']} faults, lost per failure "
            f"p50 {result['p50_s']:.2f} s, p99 {result['p99_s']:.2f} s (baseline step "
            f"{result['baseline_step_s'] * 1000:.0f} ms, failed {result['failed']})"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
