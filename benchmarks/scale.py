"""The launcher's hub at scale: up to 2,048 simulated node agents x 8 ranks = 16,384 ranks over loopback.

    python benchmarks/scale.py [--sizes 512,2048,8192,16384] [--steady-s 10] [--failures 20] [--json]

The launcher side is the real thing, in this process: `AgentHub` (challenge, HMAC frames, parse into the
message records), the step watch that turns a failure frame into a finding (`StepWatch`), the straggler
watch fed by every agent's timings, and status.json rewritten every second. The agents are simulated in
several child processes (asyncio, 8 ranks per node): each completes the real challenge and hello, then
sends what a real agent sends every `agent_status_s` (1 s up to 512 nodes, then nodes / 512 s), at its own
random phase: `ag.status` with its 8 ranks' summaries (their heartbeat counts at the worker API's 20 beats
a second) and section timings.
Heartbeats themselves go from a rank to its own node's agent, never to the launcher: they cost the hub
nothing.

Each size runs in a fresh process of its own, after a warm-up job of 64 ranks there (what a hub process
pays once: threads' stacks, malloc arenas, modules' first use; reported as warmup_rss_mib). Per size it
reports: the hub's CPU (% of one core) and memory (RSS growth since before the agents connected) in all,
per 1,000 ranks and (CPU) per 1,000 rank summaries a second while steady; what the hub's Python objects
hold while steady (`hub_heap_mib`, from one more short run of the size with tracemalloc on); the agent
messages per second it took, its full garbage collections, and, over `--failures` failure frames (one
rank SIGKILLed, `ag.rank exited`), p50 and p99 of: the time from the socket read that brought the frame
to the step watch's finding (the stop decision: the launcher knows the step failed and whom to blame);
the same from the simulated agent's write (the system clock, read by both processes: it adds the
kernel and the time the hub's process waited for a CPU or for its event loop); and from the finding to
the restart plan (culprit, exclusion and the restart policy's decision). `--json` prints one row per
size with at least ranks, decision_p50_ms, decision_p99_ms, sent_p99_ms, hub_cpu_pct, hub_rss_mib and
msgs_per_s.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import multiprocessing as mp
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402

from nvrx_hpc.core import messages as m  # noqa: E402
from nvrx_hpc.core.wire import Codec, new_token, read_message  # noqa: E402

RANKS_PER_NODE = 8
AGENT_PROCESSES = 4
IDLE_S = 3.0  # seconds the hub's fixed CPU is measured before the agents connect
HANDSHAKES_AT_ONCE = 6  # per process: the hub lets 32 connections of one address wait for their hello


# ---------------------------------------------------------------- simulated agents (child processes)


def _agents_main(nodes: list[str], first_rank: int, port: int, token: bytes, status_s: float, control, ready,
                 sent) -> None:
    asyncio.run(_agents(nodes, first_rank, port, token, status_s, control, ready, sent))


async def _agents(nodes: list[str], first_rank: int, port: int, token: bytes, status_s: float, control,
                  ready, sent) -> None:
    codec = Codec(token)
    gate = asyncio.Semaphore(HANDSHAKES_AT_ONCE)
    writers: dict[str, asyncio.StreamWriter] = {}

    async def connect(node: str) -> None:
        async with gate:
            while True:  # as the agent does: a launcher busy admitting others closes before its challenge
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
                first = await read_message(reader, codec, timeout=30)
                if first is not None:
                    break
                writer.close()
                await asyncio.sleep(random.uniform(0.05, 0.3))
            challenge = m.parse(first)
            writer.write(codec.encode(m.AgentHello(job="1", node=node, pid=os.getpid(), nonce=challenge.nonce)
                                      .to_wire()))  # fmt: skip
            await writer.drain()
            writers[node] = writer

    await asyncio.gather(*(connect(n) for n in nodes))
    ready.put(len(writers))
    started = time.time()
    ranks_of = {n: range(first_rank + i * RANKS_PER_NODE, first_rank + (i + 1) * RANKS_PER_NODE)
                for i, n in enumerate(nodes)}  # fmt: skip

    async def report(node: str, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(random.uniform(0.0, status_s))  # as a real agent does: its own phase
        tick = 0
        while True:
            tick += 1
            now = time.time()
            ranks = ranks_of[node]
            summary = {str(r): {"rank": r, "pid": 1000 + r, "local_rank": r % RANKS_PER_NODE, "state": "running",
                                "iteration": tick * 10, "beats": int((now - started) * 20), "last_beat_age": 0.02,
                                "sections": ["step"], "exit_code": None, "signal": None} for r in ranks}  # fmt: skip
            timings = {str(r): {"step": [10, 0.5, 0.05], "allreduce": [10, 0.1, 0.01]} for r in ranks}
            writer.write(codec.encode(m.AgentStatus(job="1", node=node, ranks=summary, timeouts={}, timings=timings,
                                                    iterations={str(r): 10 for r in ranks}).to_wire()))
            await writer.drain()
            await asyncio.sleep(status_s)

    reporters = [asyncio.ensure_future(report(n, w)) for n, w in writers.items()]
    loop = asyncio.get_running_loop()
    while True:
        order = await loop.run_in_executor(None, _poll, control, 0.2)
        if order == "stop":
            for task in reporters:
                task.cancel()
            return
        if order is not None:
            node, rank = order
            frame = m.RankEvent(job="1", node=node, event=m.RankEventKind.EXITED, rank=rank, pid=1000 + rank,
                                signal=9, source="spank", sections=("step",))  # fmt: skip
            wire = codec.encode(frame.to_wire())
            at = time.monotonic()  # the system's clock: the launcher's process reads the same one
            writers[node].write(wire)
            await writers[node].drain()
            sent.put((node, rank, at))


def _poll(control, timeout: float):
    try:
        return control.get(timeout=min(timeout, 0.2))
    except Exception:  # noqa: BLE001 - queue.Empty: nothing asked
        return None


# ---------------------------------------------------------------- the launcher side (this process)


async def measure(ranks: int, steady_s: float, failures: int, work: Path, status_s: float | None = None) -> dict:
    from nvrx_hpc.core.events import EventLog
    from nvrx_hpc.launcher.culprit import pick_culprit
    from nvrx_hpc.launcher.hub import AgentHub, freeze_long_lived
    from nvrx_hpc.launcher.monitor import StepWatch
    from nvrx_hpc.launcher.policy import Attempt, Outcome, RestartPolicy
    from nvrx_hpc.launcher.settings import RunSettings, agent_status_s
    from nvrx_hpc.launcher.status import StatusWriter
    from nvrx_hpc.launcher.straggler_watch import StragglerWatch

    nodes = [f"n{i:05d}" for i in range(ranks // RANKS_PER_NODE)]
    status_s = status_s or agent_status_s(len(nodes))  # how often each agent reports
    token = new_token()
    me = psutil.Process()
    rss_before = me.memory_info().rss
    heap_before = tracemalloc.get_traced_memory()[0]  # 0 unless the memory pass traces
    settings = RunSettings(command=["x"], run_dir=work)
    events = EventLog(work / "events.jsonl", "launcher")
    arrivals: dict[tuple[str, int], float] = {}
    pauses = _GcPauses()

    class TimedHub(AgentHub):
        """Times a failure frame from the socket read that brought it: a read into an empty buffer starts
        the clock for every frame in that buffer (a frame's own read can only be later)."""

        read_at = 0.0

        def _received(self, conn, data):
            if not conn.buf:
                conn.read_at = time.perf_counter()
            super()._received(conn, data)

        def _frames(self, conn):
            self.read_at = getattr(conn, "read_at", time.perf_counter())
            super()._frames(conn)

        def _handle(self, link, msg):
            if isinstance(msg, m.RankEvent):
                arrivals[(msg.node, msg.rank)] = self.read_at
            super()._handle(link, msg)

    hub = TimedHub(token, host="127.0.0.1", job="1")
    port = await hub.start()
    stragglers = StragglerWatch(settings.straggler, work, events, hub)
    hub.on_timings = stragglers.on_timings
    counted = {"n": 0}
    original = hub.on_timings

    def count(node, msg):
        counted["n"] += 1
        original(node, msg)

    hub.on_timings = count

    writer = StatusWriter(work)

    async def status_loop():  # as the launcher's: status.json as often as the agents report
        while True:
            await writer.write_async(hub.agents, {"stragglers": stragglers.status()})
            await asyncio.sleep(status_s)

    ctx = mp.get_context("spawn")
    chunks = [nodes[i::AGENT_PROCESSES] for i in range(AGENT_PROCESSES)]
    controls, ready, sent = [ctx.Queue() for _ in chunks], ctx.Queue(), ctx.Queue()
    first = [0]
    procs = []
    for chunk, control in zip(chunks, controls, strict=True):
        # ranks are numbered by node order inside each process's share
        procs.append(ctx.Process(target=_agents_main, daemon=True,
                                 args=(chunk, first[0], port, token, status_s, control, ready,
                                       sent)))
        first[0] += len(chunk) * RANKS_PER_NODE
    tasks = [asyncio.ensure_future(status_loop()), asyncio.ensure_future(stragglers.run())]
    # the hub's fixed CPU: its loops running (status, straggler windows) with no agent yet
    idle0, idle_wall0 = sum(me.cpu_times()[:2]), time.perf_counter()
    await asyncio.sleep(IDLE_S)
    idle_pct = 100 * (sum(me.cpu_times()[:2]) - idle0) / (time.perf_counter() - idle_wall0)
    for p in procs:
        p.start()
    try:
        missing = await hub.wait_for_agents(nodes, timeout=120 + len(nodes) / 20)
        if missing:
            raise SystemExit(f"{len(missing)} of {len(nodes)} simulated agents never said hello")
        freeze_long_lived()  # as the launcher does
        await asyncio.sleep(2.0)  # every agent has sent its first status
        gc.callbacks.append(pauses.collected)
        cpu0, wall0, n0 = sum(me.cpu_times()[:2]), time.perf_counter(), counted["n"]
        await asyncio.sleep(steady_s)
        cpu1, wall1, n1 = sum(me.cpu_times()[:2]), time.perf_counter(), counted["n"]
        rss = me.memory_info().rss - rss_before
        heap = tracemalloc.get_traced_memory()[0] - heap_before
        decisions, from_sent, plans = [], [], []
        for i in range(failures):
            which = i % len(chunks)
            chunk = chunks[which]
            node = chunk[(i * 7919) % len(chunk)]
            rank = sum(len(c) for c in chunks[:which]) * RANKS_PER_NODE + chunk.index(node) * RANKS_PER_NODE + 3
            emitted: dict[str, tuple[float, float]] = {}
            real_emit = events.emit

            def emit(kind, _real=real_emit, _seen=emitted, **kw):
                _seen.setdefault(kind, (time.perf_counter(), time.monotonic()))
                return _real(kind, **kw)

            events.emit = emit
            watch = StepWatch(hub, events, settings)
            step = _NeverEnds()
            run = asyncio.ensure_future(watch.run(step, nodes))
            await asyncio.sleep(0.1)
            controls[which].put((node, rank))
            findings, _, _ = await run
            events.emit = real_emit
            decided = emitted.get("launcher.rank.exited")
            if decided is None or (node, rank) not in arrivals:
                raise SystemExit(f"failure of rank {rank} on {node} was not decided: {findings}")
            decisions.append(decided[0] - arrivals.pop((node, rank)))
            sent_node, sent_rank, sent_at = await asyncio.get_running_loop().run_in_executor(None, sent.get, True, 30)
            assert (sent_node, sent_rank) == (node, rank)
            from_sent.append(decided[1] - sent_at)
            t = time.perf_counter()
            culprit = pick_culprit(findings, settings.comm_sections)
            policy = RestartPolicy(settings.max_restarts, settings.max_no_progress, settings.min_nodes)
            history = [Attempt(Outcome.FAILED, culprit.node, culprit.reason, 1, time.time(), culprit.kind,
                               culprit.rank)]  # fmt: skip
            policy.decide(history, len(nodes) - 1, True, len(nodes))
            plans.append(time.perf_counter() - t)
            while not hub.events.empty():
                hub.events.get_nowait()
    finally:
        if pauses.collected in gc.callbacks:
            gc.callbacks.remove(pauses.collected)
        for control in controls:
            control.put("stop")
        for task in tasks:
            task.cancel()
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.kill()
        await hub.close()
        await asyncio.sleep(0.5)  # let each connection's task see its end of stream before the loop closes
    cpu_pct = 100 * (cpu1 - cpu0) / (wall1 - wall0)
    summaries_per_s = (n1 - n0) * RANKS_PER_NODE / (wall1 - wall0)  # each status carries its node's 8 ranks
    return {
        "ranks": ranks, "nodes": len(nodes), "msgs_per_s": round((n1 - n0) / (wall1 - wall0), 1),
        "agent_status_s": status_s, "msgs_expected_per_s": round(len(nodes) / status_s, 1),
        "hub_cpu_pct": round(cpu_pct, 2),
        "hub_cpu_pct_per_1k_ranks": round(cpu_pct * 1000 / ranks, 3),
        "hub_cpu_pct_per_1k_rank_reports": round(cpu_pct * 1000 / summaries_per_s, 3),
        "hub_cpu_pct_idle": round(idle_pct, 2),
        "hub_cpu_pct_per_1k_rank_reports_above_idle": round((cpu_pct - idle_pct) * 1000 / summaries_per_s, 3),
        "hub_rss_mib": round(rss / 2**20, 1), "hub_heap_mib": round(heap / 2**20, 2),
        "hub_rss_mib_per_1k_ranks": round(rss / 2**20 * 1000 / ranks, 2),
        "decision_p50_ms": round(1e3 * _pct(decisions, 50), 2), "decision_p99_ms": round(1e3 * _pct(decisions, 99), 2),
        "sent_p50_ms": round(1e3 * _pct(from_sent, 50), 2), "sent_p99_ms": round(1e3 * _pct(from_sent, 99), 2),
        "plan_p50_ms": round(1e3 * _pct(plans, 50), 3), "plan_p99_ms": round(1e3 * _pct(plans, 99), 3),
        "failures": len(decisions), "gc_full": pauses.full, "gc_full_max_ms": round(1e3 * pauses.longest, 1),
    }  # fmt: skip


class _GcPauses:
    """The garbage collector's full collections in the hub's process: how many, and the longest (the event
    loop stands still meanwhile)."""

    def __init__(self) -> None:
        self.full, self.longest, self._started = 0, 0.0, 0.0

    def collected(self, phase: str, info: dict) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._started = time.perf_counter()
        else:
            self.full += 1
            self.longest = max(self.longest, time.perf_counter() - self._started)


class _NeverEnds:
    """A training step that runs until the watch stops it."""

    def __init__(self) -> None:
        self._done = asyncio.get_running_loop().create_future()

    async def wait(self) -> int:
        return await self._done

    async def stop(self, _grace: float) -> None:
        if not self._done.done():
            self._done.set_result(-9)


# ---------------------------------------------------------------- attribution at scale


def _timed_child(target, args: tuple) -> dict:
    """Run `target(*args)` in a fresh process: its wall time and peak RSS are its own."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    proc = ctx.Process(target=_child_main, args=(target, args, out))
    proc.start()
    result = out.get(timeout=1800)
    proc.join(timeout=60)
    return result


def _child_main(target, args: tuple, out) -> None:
    t = time.perf_counter()
    detail = target(*args)
    seconds = time.perf_counter() - t
    out.put({"seconds": round(seconds, 2), "peak_rss_mib": round(_peak_rss_kib() / 1024, 1), **detail})


def _peak_rss_kib() -> int:
    """This process's own peak RSS: VmHWM belongs to its address space, while ru_maxrss keeps the
    parent's size at the fork that started it."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _fr_analysis(directory: str) -> dict:
    from nvrx_hpc.attribution.fr_analysis import analyze_files

    report = analyze_files(sorted(Path(directory).iterdir()))
    return {"culprits": list(report.culprits)}


def _log_attribution(run_dir: str) -> dict:
    from nvrx_hpc.attribution.analyze import analyze_run

    report = analyze_run(Path(run_dir))  # what the restart loop and the Epilog run; it writes nothing
    return {"category": report.verdict.category.value}


def attribution_at_scale(dumps: int, logs: int, lines: int, work: Path) -> dict:
    """Flight-recorder analysis of `dumps` rank dumps (8-way TP groups, one rank stuck) and attribution of
    a run directory holding `logs` rank logs of `lines` lines in all, each timed in its own process."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from _gen.fr_synth import Layout, simulate, write_dumps
    from _gen.synthetic_logs import write_log

    stuck = dumps // 2 + 1
    write_dumps(simulate(Layout(world=dumps, tp=8, steps=4, numel=4096), {stuck: 5}), work / "fr")
    fr = {"dumps": dumps, "injected": stuck, **_timed_child(_fr_analysis, (str(work / "fr"),))}
    run = work / "run" / "logs"
    run.mkdir(parents=True)
    per_log_mb = lines * 193 / 1e6 / logs  # the generator writes about 193 bytes a line
    for rank in range(logs):
        write_log(run / f"rank-{rank}.log", per_log_mb, seed=rank, label=True)
    counted = sum(f.read_bytes().count(b"\n") for f in run.iterdir())
    size = sum(f.stat().st_size for f in run.iterdir())
    logs_figures = {"logs": logs, "lines": counted, "gb": round(size / 1e9, 2),
                    **_timed_child(_log_attribution, (str(work / "run"),))}  # fmt: skip
    return {"fr": fr, "logs": logs_figures}


WARMUP_RANKS = 2 * RANKS_PER_NODE * AGENT_PROCESSES


def _one_size(ranks: int, steady_s: float, failures: int, status_s: float | None) -> dict:
    """One size in this process, after a small warm-up job: the warm-up pays what a hub process pays once
    (worker threads' stacks, malloc arenas, modules' first use), so the size's RSS growth is what its
    ranks cost. The warm-up's own growth is reported beside it."""
    with tempfile.TemporaryDirectory(prefix="nvrx-scale-warmup-") as tmp:
        warm = asyncio.run(measure(WARMUP_RANKS, 1.0, 2, Path(tmp)))
    with tempfile.TemporaryDirectory(prefix="nvrx-scale-") as tmp:
        row = asyncio.run(measure(ranks, steady_s, failures, Path(tmp), status_s))
    # The memory pass: the same job once more with tracemalloc on (it slows the hub, so no other figure
    # comes from it). What the hub's Python objects hold while steady, apart from the allocator's reuse.
    tracemalloc.start()
    with tempfile.TemporaryDirectory(prefix="nvrx-scale-heap-") as tmp:
        heap = asyncio.run(measure(ranks, 2.0, 1, Path(tmp), status_s))["hub_heap_mib"]
    tracemalloc.stop()
    return {**row, "hub_heap_mib": heap, "hub_heap_kib_per_rank": round(heap * 1024 / ranks, 3),
            "warmup_ranks": WARMUP_RANKS, "warmup_rss_mib": warm["hub_rss_mib"]}


def _in_fresh_process(ranks: int, steady_s: float, failures: int, status_s: float | None) -> dict:
    """Each size in a process of its own, so that no size inherits memory another one freed."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--one-size", "--sizes", str(ranks),
           "--steady-s", str(steady_s), "--failures", str(failures)]  # fmt: skip
    if status_s:
        cmd += ["--status-s", str(status_s)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=600 + ranks / 10)
    if done.returncode != 0:
        raise SystemExit(f"the run of {ranks} ranks failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _pct(values: list[float], q: int) -> float:
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1]


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="512,2048,8192,16384", help="ranks per run, comma-separated")
    parser.add_argument("--steady-s", type=float, default=10.0, help="seconds of steady load measured per size")
    parser.add_argument("--failures", type=int, default=20, help="failure frames per size (p50/p99 over them)")
    parser.add_argument("--attribution", action="store_true",
                        help="also time attribution at scale: 4,096 flight-recorder dumps, 1,000 logs of 10^7 lines")
    parser.add_argument("--dumps", type=int, default=4096, help="flight-recorder dumps for --attribution")
    parser.add_argument("--log-lines", type=int, default=10**7, help="log lines in all for --attribution")
    parser.add_argument("--status-s", type=float, default=None,
                        help="each agent reports every this many seconds (default: the launcher's rate for the size)")
    parser.add_argument("--json", action="store_true", help="print one JSON row per size")
    parser.add_argument("--one-size", action="store_true", help=argparse.SUPPRESS)  # the child of one size
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if not sizes or any(s < 2 * RANKS_PER_NODE * AGENT_PROCESSES or s % RANKS_PER_NODE for s in sizes):
        parser.error(f"--sizes: multiples of {RANKS_PER_NODE}, at least {2 * RANKS_PER_NODE * AGENT_PROCESSES}")
    if args.failures < 1 or args.steady_s <= 0 or (args.status_s is not None and args.status_s <= 0):
        parser.error("--failures >= 1, --steady-s > 0, --status-s > 0")
    _raise_fd_limit()
    if args.one_size:
        print(json.dumps(_one_size(sizes[0], args.steady_s, args.failures, args.status_s)))
        return
    rows = []
    for size in sizes:
        rows.append(_in_fresh_process(size, args.steady_s, args.failures, args.status_s))
        if not args.json:
            r = rows[-1]
            print(f"{r['ranks']:6d} ranks: decision p50 {r['decision_p50_ms']:.2f} ms "
                  f"p99 {r['decision_p99_ms']:.2f} ms (from the agent's write {r['sent_p50_ms']:.2f} / "
                  f"{r['sent_p99_ms']:.2f} ms); plan p99 {r['plan_p99_ms']:.3f} ms; "
                  f"hub CPU {r['hub_cpu_pct']:.1f} % "
                  f"({r['hub_cpu_pct_per_1k_ranks']:.2f} %/1k ranks), RSS +{r['hub_rss_mib']:.1f} MiB "
                  f"({r['hub_rss_mib_per_1k_ranks']:.2f} MiB/1k ranks); {r['msgs_per_s']:.0f} of "
                  f"{r['msgs_expected_per_s']} msgs/s", flush=True)
    if args.json:
        for row in rows:
            print(json.dumps(row))
    if args.attribution:
        with tempfile.TemporaryDirectory(prefix="nvrx-scale-attr-") as tmp:
            figures = attribution_at_scale(args.dumps, 1000, args.log_lines, Path(tmp))
        if args.json:
            print(json.dumps({"attribution": figures}))
        else:
            fr, logs = figures["fr"], figures["logs"]
            print(f"flight recorder: {fr['dumps']} dumps in {fr['seconds']} s, peak {fr['peak_rss_mib']} MiB, "
                  f"culprits {fr['culprits']} (stuck: {fr['injected']})")
            print(f"logs: {logs['logs']} files, {logs['lines']} lines ({logs['gb']} GB) in {logs['seconds']} s, "
                  f"peak {logs['peak_rss_mib']} MiB, verdict {logs['category']}")


if __name__ == "__main__":
    main()
