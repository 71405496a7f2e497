"""`nvrx-hpc agent`: one per node per job. Watches the node's ranks and reports to the launcher.

Ranks register through the SPANK plugin (task_post_fork, task_exit) or themselves through the worker
API (w.hello). The agent watches their PIDs, applies the hang deadlines, and on a hang collects stacks
and flight-recorder dumps before SIGCONT, SIGTERM and SIGKILL. Every finding goes to the launcher
over TCP in authenticated frames.

Started by the launcher (user mode) it knows the launcher and the job token from its arguments. Started
by the Prolog (site mode, `--site`) it listens on its socket and waits until `nvrx-hpc run` attaches it
(`nvrx_hpc.agent.site.attach`): the attach request carries the launcher's address and the token file.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import random
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvrx_hpc.agent.dumps import DumpDesk
from nvrx_hpc.agent.hang import Timeouts, calibrate, find_hangs
from nvrx_hpc.agent.rank_step import RankStep
from nvrx_hpc.agent.registry import RankRecord, RankState, Registry
from nvrx_hpc.agent.server import RankSocketServer, WorkerLink
from nvrx_hpc.agent.standby import StandbyDesk
from nvrx_hpc.core import messages as m
from nvrx_hpc.core.errors import AuthError, PeerUnreachable, ProtocolError
from nvrx_hpc.core.messages import Kind, RankEventKind
from nvrx_hpc.core.wire import Codec, read_message
from nvrx_hpc.slurm.spank_messages import Register, StepEnd, TaskExit

__all__ = ["AgentSettings", "Agent"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class AgentSettings:
    node: str
    job: str
    socket_path: Path
    launcher_host: str | None  # None: a site agent, waiting to be attached
    launcher_port: int | None
    token: bytes | None
    poll_s: float = 0.1
    status_s: float = 1.0
    dump_wait_s: float = 1.0
    term_grace_s: float = 3.0
    health_interval_s: float = 0.0  # 0: no health loop
    metrics_port: int | None = None
    connect_s: float = 20.0  # how long the launcher may take to listen


_CHALLENGE_WAIT_S = 20.0  # the launcher's la.challenge after connecting


class Agent:
    def __init__(self, settings: AgentSettings) -> None:
        self.s = settings
        self.codec: Codec | None = Codec(settings.token) if settings.token else None
        self.registry = Registry()
        self.rank_step = RankStep()  # which step's tasks the SPANK plugin registers as ranks (rank_step.py)
        self.timeouts = Timeouts()
        self.restored_heartbeat: float | None = None
        self.links: dict[int, WorkerLink] = {}
        self.standby = StandbyDesk()  # tasks of a standby step, waiting for their go
        self.restart = 0
        self._writer: asyncio.StreamWriter | None = None
        self._stop = asyncio.Event()
        self._killing: set[int] = set()
        self.dumps = DumpDesk(settings.dump_wait_s)
        self._attached = asyncio.Event()
        self.timings: dict[int, dict[str, list[float]]] = {}  # rank -> section -> [count, total_s, min_s]
        self.iterations: dict[int, int] = {}  # rank -> iterations set since the last status
        self.status_s = settings.status_s  # the launcher lengthens it for large jobs (la.step)
        self.metrics: Any = None  # HealthMetrics, when the agent serves Prometheus metrics
        site = settings.launcher_host is None
        self.server = RankSocketServer(
            settings.socket_path, self.codec, self._on_spank, self._on_worker, self._on_worker_gone,
            on_attach=self._on_attach if site else None,
        )

    # ------------------------------------------------------------------ site mode: attach

    def _on_attach(self, request: dict[str, Any]) -> dict[str, Any]:
        """The launcher's attach request (from the job's user, checked by the server): where and with what
        token to report. A second attach while attached is refused; one job has one launcher at a time."""
        from nvrx_hpc.core.wire import load_token

        if self._attached.is_set():
            return {"ok": False, "error": f"already attached to {self.s.launcher_host}:{self.s.launcher_port}"}
        host, sep, port = str(request.get("launcher", "")).rpartition(":")
        if not sep or not host or not port.isdigit():
            return {"ok": False, "error": f"launcher {request.get('launcher')!r} is not HOST:PORT"}
        try:
            token = load_token(Path(str(request.get("token_file", ""))))
            health = float(request.get("health_interval", 0.0) or 0.0)
        except (ProtocolError, ValueError, TypeError) as exc:
            return {"ok": False, "error": str(getattr(exc, "message", exc))}
        self.s = dataclasses.replace(self.s, launcher_host=host, launcher_port=int(port), token=token,
                                     health_interval_s=max(0.0, health))
        self.codec = self.server.codec = Codec(token)
        self._attached.set()
        log.info("[%s] attached to the launcher at %s:%s", self.s.node, host, port)
        return {"ok": True, "pid": os.getpid(), "node": self.s.node}

    # ------------------------------------------------------------------ launcher link

    def _report(self, record: type[m.Frame], **fields: Any) -> None:
        """Send the launcher one `ag.*` record, stamped with this job and node."""
        if self._writer is None:
            return
        try:
            msg = record(job=self.s.job, node=self.s.node, **fields)
            self._writer.write(self.codec.encode(msg.to_wire()))
        except (OSError, RuntimeError, ProtocolError) as exc:
            log.warning("[%s] cannot report %s to the launcher: %s", self.s.node, record.KIND, exc)

    async def _connect(self, deadline_s: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        deadline = time.monotonic() + deadline_s
        while True:
            try:
                return await asyncio.open_connection(self.s.launcher_host, self.s.launcher_port)
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise PeerUnreachable(
                        f"launcher at {self.s.launcher_host}:{self.s.launcher_port} unreachable for "
                        f"{deadline_s:g} s: {exc.strerror or exc}",
                        hint="is `nvrx-hpc run` of this job still running? check --launcher HOST:PORT",
                    ) from None
                await asyncio.sleep(0.2)

    async def _handshake(self) -> tuple[asyncio.StreamReader, m.Challenge]:
        """Connect and take the launcher's challenge. A launcher busy with thousands of agents starting at
        once closes the connections it cannot admit yet before it challenges them: try again, with a
        random backoff, until connect_s has passed."""
        deadline = time.monotonic() + self.s.connect_s
        backoff = 0.1
        while True:
            reader, self._writer = await self._connect(max(0.0, deadline - time.monotonic()))
            try:
                first = await read_message(reader, self.codec, timeout=_CHALLENGE_WAIT_S)  # the launcher speaks first
            except AuthError:
                raise  # another job's launcher, or the wrong token: trying again cannot help
            except (ConnectionError, ProtocolError):
                first = None
            if first is not None:
                challenge = m.parse(first)
                if not isinstance(challenge, m.Challenge):
                    raise ProtocolError(f"the launcher did not open with a challenge (got {challenge.KIND.value!r})")
                return reader, challenge
            self._writer.close()
            if time.monotonic() > deadline:
                raise PeerUnreachable(f"the launcher at {self.s.launcher_host}:{self.s.launcher_port} kept closing "
                                      f"the connection before its challenge for {self.s.connect_s:g} s")
            await asyncio.sleep(backoff * random.uniform(0.5, 1.5))
            backoff = min(2.0, backoff * 2)

    async def _launcher_loop(self, reader: asyncio.StreamReader) -> None:
        while not self._stop.is_set():
            try:
                raw = await read_message(reader, self.codec, timeout=None)
                msg = None if raw is None else m.parse(raw)
            except ProtocolError as exc:
                log.error("[%s] bad frame from the launcher: %s", self.s.node, exc.message)
                break
            if msg is None:
                break
            await self._on_launcher(msg)
        log.info("[%s] launcher connection closed; stopping", self.s.node)
        self._stop.set()

    async def _on_launcher(self, msg: m.Frame) -> None:
        handler = self._LAUNCHER_HANDLERS.get(msg.KIND)
        if handler is None:
            log.warning("[%s] ignored a %s frame from the launcher", self.s.node, msg.KIND)
            return
        await handler(self, msg)

    async def _on_step(self, msg: m.StepStart) -> None:
        self.registry.clear()
        self.rank_step.reset()
        self.links.clear()
        self.timings.clear()
        self.iterations.clear()
        self.restart = msg.restart
        if msg.status_s is not None and msg.status_s > 0:
            self.status_s = msg.status_s

    async def _on_timeouts(self, msg: m.LauncherTimeouts) -> None:
        self.timeouts = Timeouts.from_dict(msg.timeouts)

    async def _on_stop(self, msg: m.LauncherStop) -> None:
        await self._stop_all(self.s.term_grace_s if msg.grace_s is None else msg.grace_s, msg.reason)

    async def _on_request_stop(self, msg: m.RequestStop) -> None:
        for link in list(self.links.values()):
            link.send(m.AgentStop(reason=msg.reason))

    async def _on_dump(self, msg: m.LauncherDump) -> None:
        self.dumps.request(self.registry.live(), self.links, msg.reason)

    async def _on_shutdown(self, msg: m.Shutdown) -> None:
        self._stop.set()

    async def _on_stragglers(self, msg: m.StragglerFlags) -> None:
        if self.metrics is None:
            return
        for rank, flag in msg.ranks.items():
            if isinstance(flag, dict) and str(rank).isdigit():
                self.metrics.set_straggler(int(rank), score=flag.get("score"), flagged=bool(flag.get("flagged")))

    async def _on_inprocess_restart(self, msg: m.InprocessRestart) -> None:
        """Pass the restart to every rank here; the ranks declared lost (hung, wedged) are killed at once."""
        for link in list(self.links.values()):
            link.send(m.AgentRestart(round=msg.round, lost=msg.lost, reason=msg.reason))
        for rank in msg.lost:
            record = self.registry.get(rank)
            if record is not None and record.alive():
                record.send_signal(signal.SIGKILL)

    async def _on_standby_go(self, msg: m.StandbyGo) -> None:
        told = self.standby.go(msg)
        log.info("[%s] go for attempt %d passed to %d standby task(s)", self.s.node, msg.restart, told)

    _LAUNCHER_HANDLERS = {
        Kind.LA_GO: _on_standby_go,
        Kind.LA_RESTART: _on_inprocess_restart,
        Kind.LA_STEP: _on_step,
        Kind.LA_TIMEOUTS: _on_timeouts,
        Kind.LA_STOP: _on_stop,
        Kind.LA_REQUEST_STOP: _on_request_stop,
        Kind.LA_DUMP: _on_dump,
        Kind.LA_SHUTDOWN: _on_shutdown,
        Kind.LA_STRAGGLERS: _on_stragglers,
    }

    # ------------------------------------------------------------------ rank messages

    def _on_spank(self, msg: Register | TaskExit | StepEnd) -> None:
        if str(msg.job) != self.s.job or msg.node != self.s.node or not isinstance(msg.step, int):
            return
        if isinstance(msg, Register):
            if not self.rank_step.admits(msg.step, msg.pid):
                log.info("[%s] task %d (pid %d) of step %d is not a rank of step %s: not registered",
                         self.s.node, msg.rank, msg.pid, msg.step, self.rank_step.step)  # fmt: skip
                return
            record, new = self.registry.register(
                msg.rank, msg.pid, local_rank=msg.local_rank, restart=msg.restart_count, source="spank"
            )
            if new:
                self._report(m.RankEvent, event=RankEventKind.REGISTERED, rank=msg.rank, pid=msg.pid,
                             source="spank", step=msg.step)
        elif isinstance(msg, TaskExit):
            record = self.registry.get(msg.rank)
            if record is not None and record.pid == msg.pid:
                record.exit_code, record.signal = msg.exit_code, msg.signal
                self._mark_exited(record, "spank")

    def _on_worker(self, msg: m.Frame, link: WorkerLink) -> None:
        if isinstance(msg, m.WorkerStandby):
            self.standby.wait(msg, link)
            return
        rank = getattr(msg, "rank", -1)
        if rank < 0:
            return
        if isinstance(msg, m.WorkerHello):
            self._on_hello(msg, link)
            return
        record = self.registry.get(rank)
        handler = self._WORKER_HANDLERS.get(msg.KIND)
        if record is not None and record.state != RankState.EXITED and handler is not None:
            handler(self, msg, record)

    def _on_hello(self, msg: m.WorkerHello, link: WorkerLink) -> None:
        pid = link.peer_pid or msg.pid
        if pid <= 0:
            return
        self.rank_step.worker_joined(pid)
        record, new = self.registry.register(
            msg.rank, pid, local_rank=msg.local_rank, restart=msg.restart, source="worker"
        )
        record.source = "worker"
        self.links[msg.rank] = link
        link.send(m.AgentTimeouts(timeouts=self.timeouts.to_dict()))
        if new:
            self._report(m.RankEvent, event=RankEventKind.REGISTERED, rank=msg.rank, pid=pid, source="worker")

    def _on_heartbeat(self, msg: m.Heartbeat, record: RankRecord) -> None:
        record.beat(msg.beats, msg.t)

    def _on_section(self, msg: m.SectionMark, record: RankRecord) -> None:
        name = msg.name[:128]
        if msg.open:
            record.sections[name] = msg.t
            return
        opened = record.sections.pop(name, None)
        if opened is not None and 0.0 <= msg.t - opened < 1e6:  # both stamps are the rank's own clock
            took = msg.t - opened
            acc = self.timings.setdefault(msg.rank, {}).setdefault(name, [0, 0.0, took])
            acc[0] += 1
            acc[1] += took
            acc[2] = min(acc[2], took)

    def _on_iteration(self, msg: m.Iteration, record: RankRecord) -> None:
        first = record.iteration is None
        record.iteration = msg.n
        self.iterations[msg.rank] = self.iterations.get(msg.rank, 0) + 1
        if first:  # training is (back) under way: the launcher times restarts from this
            self._report(m.RankEvent, event=RankEventKind.FIRST_ITERATION, rank=msg.rank, iteration=msg.n)

    def _on_bye(self, msg: m.WorkerBye, record: RankRecord) -> None:
        # Finished and tearing down (torch can take seconds to exit): no longer subject to hang deadlines.
        record.finishing = True

    def _on_restored_timeouts(self, msg: m.WorkerTimeouts, record: RankRecord) -> None:
        heartbeat = msg.timeouts.get("heartbeat")
        if isinstance(heartbeat, (int, float)) and not isinstance(heartbeat, bool) and heartbeat > 0:
            self.restored_heartbeat = max(self.restored_heartbeat or 0.0, float(heartbeat))

    def _on_fault(self, msg: m.WorkerFault, record: RankRecord) -> None:
        self._report(m.RankEvent, event=RankEventKind.RAISED, rank=msg.rank, pid=record.pid, round=msg.round,
                     reason=msg.reason, lost=msg.lost, sections=sorted(record.sections))

    def _on_dumped(self, msg: m.WorkerDumped, record: RankRecord) -> None:
        self.dumps.answered(msg.rank)

    _WORKER_HANDLERS = {
        Kind.W_FAULT: _on_fault,
        Kind.W_HEARTBEAT: _on_heartbeat,
        Kind.W_SECTION: _on_section,
        Kind.W_ITERATION: _on_iteration,
        Kind.W_BYE: _on_bye,
        Kind.W_TIMEOUTS: _on_restored_timeouts,
        Kind.W_DUMPED: _on_dumped,
    }

    def _on_worker_gone(self, link: WorkerLink) -> None:
        self.standby.gone(link)
        for rank, known in list(self.links.items()):
            if known is link:
                del self.links[rank]

    # ------------------------------------------------------------------ watching

    def _mark_exited(self, record: RankRecord, source: str) -> None:
        if record.reported_exit:
            # The PID watch may see a death before the plugin's task_exit brings its status: report again.
            if not (source == "spank" and record.exit_unknown):
                return
        record.state = RankState.EXITED
        record.reported_exit = True
        record.exit_unknown = record.exit_code is None and record.signal is None
        self._report(
            m.RankEvent, event=RankEventKind.EXITED, rank=record.rank, pid=record.pid, exit_code=record.exit_code,
            signal=record.signal, source=source, iteration=record.iteration, sections=sorted(record.sections),
            reason="finished" if record.finishing else None,  # it said w.bye first: an exit, not a death
        )

    async def _watch_loop(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            for record in list(self.registry.ranks.values()):
                if record.state != RankState.EXITED and not record.alive():
                    self._mark_exited(record, "pid-watch")
            new_timeouts = calibrate(self.timeouts, list(self.registry.ranks.values()), self.restored_heartbeat)
            if new_timeouts != self.timeouts:
                self.timeouts = new_timeouts
                self._report(m.Calibration, timeouts=self.timeouts.to_dict())
                for link in list(self.links.values()):
                    link.send(m.AgentTimeouts(timeouts=self.timeouts.to_dict()))
            for hang in find_hangs(list(self.registry.ranks.values()), self.timeouts, now):
                record = self.registry.ranks[hang.rank]
                record.state = RankState.HUNG
                self._report(
                    m.RankEvent, event=RankEventKind.HUNG, rank=hang.rank, pid=record.pid, reason=hang.reason,
                    silent_s=round(hang.silent_s, 3), sections=sorted(record.sections), iteration=record.iteration,
                    last_beat_at=record.last_beat_at,
                )
                asyncio.get_running_loop().create_task(self._kill_hung(record, hang.reason))
            await asyncio.sleep(self.s.poll_s)

    async def _status_loop(self) -> None:
        # srun starts every node's agent at once: without a random phase, thousands of reports would reach
        # the launcher in the same instant every second, and a failure frame would queue behind them.
        await asyncio.sleep(random.uniform(0.0, self.status_s))
        while not self._stop.is_set():
            timings, self.timings = self.timings, {}  # closed since the last status: for the straggler scores
            iterations, self.iterations = self.iterations, {}
            self._report(m.AgentStatus, ranks=self.registry.summary(), timeouts=self.timeouts.to_dict(),
                         timings={str(rank): t for rank, t in timings.items()},
                         iterations={str(rank): n for rank, n in iterations.items()}, standby=self.standby.waiting)
            await asyncio.sleep(self.status_s)

    # ------------------------------------------------------------------ stopping ranks

    async def _kill_hung(self, record: RankRecord, reason: str) -> None:
        """Stacks and flight recorder first, then SIGCONT, SIGTERM, SIGKILL after a grace period."""
        if record.pid in self._killing:
            return
        self._killing.add(record.pid)
        self.dumps.request([record], self.links, reason)
        record.send_signal(signal.SIGCONT)  # a stopped rank can only dump once it runs again
        await self.dumps.wait([record])
        await self._terminate([record], self.s.term_grace_s)

    async def _terminate(self, records: list[RankRecord], grace_s: float) -> None:
        for record in records:
            if record.alive():
                record.send_signal(signal.SIGCONT)
                record.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(r.alive() for r in records) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        for record in records:
            if record.alive():
                record.send_signal(signal.SIGKILL)

    async def _stop_all(self, grace_s: float, reason: str) -> None:
        live = [r for r in self.registry.ranks.values() if r.state != RankState.EXITED]
        await self.dumps.wait(live, answers_only=True)  # a hang's dumps, asked for just before the stop
        await self._terminate(live, grace_s)
        self._report(m.AgentStopped, ranks=tuple(r.rank for r in live), reason=reason)

    # ------------------------------------------------------------------ main

    def _start_health(self, loop: asyncio.AbstractEventLoop) -> tuple[Any, Any]:
        """The health loop: periodic checks and Xid listeners; a fatal finding goes to the launcher."""
        if self.s.health_interval_s <= 0 and self.s.metrics_port is None:
            return None, None
        from nvrx_hpc.core.config import load_config
        from nvrx_hpc.health.metrics import HealthMetrics, start_metrics_server
        from nvrx_hpc.health.monitor import HealthMonitor

        metrics = self.metrics = HealthMetrics(self.s.node)
        server = start_metrics_server(self.s.metrics_port, metrics) if self.s.metrics_port is not None else None

        def on_fatal(result) -> None:  # a monitor thread: hand over to the event loop
            loop.call_soon_threadsafe(
                lambda: self._report(m.HealthFailed, check=result.name, verdict=result.verdict.value,
                                     detail=result.detail)
            )

        monitor = None
        if self.s.health_interval_s > 0:
            try:
                monitor = HealthMonitor.from_config(
                    load_config().config, node=self.s.node, on_fatal=on_fatal, interval_s=self.s.health_interval_s,
                    metrics=metrics, job_id=self.s.job,
                )
                monitor.start()
            except Exception as exc:  # noqa: BLE001 - fail open: no health loop is better than no agent
                log.error("[%s] health loop not started: %s", self.s.node, exc)
                self._report(m.HealthUnavailable, reason=str(exc))
                monitor = None
        return monitor, server

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        await self.server.start()
        if self.codec is None:
            log.info("[%s] site agent on %s: waiting for `nvrx-hpc run` to attach", self.s.node, self.s.socket_path)
            waiter = asyncio.ensure_future(self._attached.wait())
            await asyncio.wait([waiter, asyncio.ensure_future(self._stop.wait())], return_when=asyncio.FIRST_COMPLETED)
            if not self._attached.is_set():  # the Epilog stopped an agent nobody attached
                waiter.cancel()
                await self.server.close()
                return 0
        reader, challenge = await self._handshake()
        self._report(m.AgentHello, pid=os.getpid(), socket=str(self.s.socket_path), nonce=challenge.nonce)
        monitor, metrics_server = self._start_health(loop)
        tasks = [
            loop.create_task(self._launcher_loop(reader)),
            loop.create_task(self._watch_loop()),
            loop.create_task(self._status_loop()),
        ]
        await self._stop.wait()
        for task in tasks:
            task.cancel()
        if monitor is not None:
            await asyncio.to_thread(monitor.stop)
        if metrics_server is not None:
            metrics_server.close()
        self._report(m.AgentBye)
        try:
            await asyncio.wait_for(self._writer.drain(), 2)
        except (OSError, asyncio.TimeoutError):
            pass
        self._writer.close()
        await self.server.close()
        return 0

