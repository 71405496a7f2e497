"""The restart loop: start the agents, run the training step, and on a failure stop it, exclude the
culprit, swap in a spare (or shrink, or requeue) and run again — every decision an event."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import time
from typing import Any

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.errors import NvrxError
from nvrx_hpc.core.events import EventLog
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.core.run_pointer import job_tmp_dir, write_run_pointer
from nvrx_hpc.core.wire import load_token, new_token, save_token
from nvrx_hpc.inprocess.settings import namespace
from nvrx_hpc.launcher.culprit import Finding, pick_culprit
from nvrx_hpc.launcher.evidence import EarlyProbe, gather_evidence, partition_capacity
from nvrx_hpc.launcher.hub import AgentHub, freeze_long_lived
from nvrx_hpc.launcher.inprocess_watch import InprocessWatch
from nvrx_hpc.launcher.ip_store import StoreProcess
from nvrx_hpc.launcher.monitor import SYSTEM_CLOCK, Clock, StepWatch
from nvrx_hpc.launcher.policy import (
    Action,
    Attempt,
    NodeJudgement,
    Outcome,
    RestartPolicy,
    judge_node,
    refined_by_dumps,
)
from nvrx_hpc.launcher.pool import NodePool
from nvrx_hpc.launcher.refill import Refill, StepGroup
from nvrx_hpc.launcher.rundir import JobIdentity, claim_run_dir, read_state, write_state
from nvrx_hpc.launcher.settings import RunSettings, agent_status_s
from nvrx_hpc.launcher.site_attach import attach_site_agents
from nvrx_hpc.launcher.standby_step import Standby
from nvrx_hpc.launcher.status import StatusWriter
from nvrx_hpc.launcher.step_layout import layout_step
from nvrx_hpc.launcher.steps import SrunStep, agent_step_argv, srun_has_nvrx, training_step_argv
from nvrx_hpc.launcher.straggler_watch import StragglerWatch
from nvrx_hpc.slurm.api import JobContext, SlurmBackend
from nvrx_hpc.slurm.hostlist import compress, sort_hosts
from nvrx_hpc.slurm.runner import CommandRunner

__all__ = ["Launcher"]

ATTRIBUTION_TIMEOUT_S = 30.0  # a verdict that takes longer is not waited for


log = logging.getLogger(__name__)


class Launcher:
    def __init__(self, settings: RunSettings, ctx: JobContext, backend: SlurmBackend, runner: CommandRunner,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.s = settings
        self._clock = clock
        self.ctx = ctx
        self.backend = backend
        self.runner = runner
        self.run_dir = settings.run_dir
        self._status = StatusWriter(self.run_dir)
        self.events = EventLog(self.run_dir / "events.jsonl", source="launcher")
        self.history: list[Attempt] = []
        self.pool: NodePool | None = None
        self.hub: AgentHub | None = None
        self.stragglers: StragglerWatch | None = None
        self._stop_requested = asyncio.Event()
        self._restarts_before = 0
        self._attempts_started = 0
        self._rank_nodes: dict[str, str] = {}  # rank -> its node, from the agents' last reports
        self._fr_culprits: tuple[int, ...] = ()  # the ranks the last attempt's flight-recorder dumps name
        self._outcome: str | None = None  # how the launcher ended (status.json, `nvrx-hpc status`)
        self._failures: list[dict] = []  # {node, time, reason} of every failed attempt, kept across requeues
        self._env: dict[str, str] = dict(os.environ)
        self._store = StoreProcess()  # in-process restart's meeting place, when it is on
        self._inprocess: InprocessWatch | None = None  # the last step's, when in-process restart is on
        self._excluding: list[asyncio.Future] = []  # nodes lost in-process, being excluded
        self._early: EarlyProbe | None = None  # the health check begun at the running step's first finding

    # ------------------------------------------------------------------ set-up

    def _prepare_run_dir(self) -> bytes:
        identity = JobIdentity(
            job_id=self.ctx.job_id, uid=os.getuid(), cluster=self.ctx.cluster_name,
            submit_time=self._submit_time(), restart_count=self.ctx.restart_count,
        )  # fmt: skip
        moved = claim_run_dir(self.run_dir, identity)
        if moved is not None:
            self.events.emit("launcher.run_dir.previous_job", reason="the run directory held another job with "
                             f"this id; its files moved to {moved}", moved_to=str(moved))  # fmt: skip
        for sub in ("logs", "stacks", "fr"):
            (self.run_dir / sub).mkdir(parents=True, exist_ok=True)
        try:  # the Epilog finds a run directory of the user's choice through it (attribution, F7 requeue)
            write_run_pointer(self.run_dir, self.ctx.job_id)
        except (NvrxError, OSError) as exc:
            self.events.emit("launcher.run_pointer_failed", reason=str(getattr(exc, "message", exc)))
        token_file = self.run_dir / "token"
        if not token_file.exists():
            save_token(token_file, new_token())
        state = read_state(self.run_dir)
        # Every attempt of the job, across requeues, gets its own number (logs, stacks and dumps are named by it),
        # even when the launcher before this one was killed before it could write its state.
        self._restarts_before = int(state.get("attempts_started", state.get("restarts_total", 0)))
        self._failures = [f for f in state.get("failures", []) if isinstance(f, dict) and "node" in f and "time" in f]
        return load_token(token_file)

    def _submit_time(self) -> str | None:
        """Slurm's SubmitTime for this job (new on each requeue), or None when Slurm cannot say."""
        try:
            submitted = self.backend.job(self.ctx.job_id).submit_time
        except NvrxError:
            return None
        return None if submitted is None else str(submitted)

    def _write_state(self, stopped: str | None = None) -> None:
        state = {
            "restarts_total": self._restarts_total(),
            "attempts_started": self._restarts_before + self._attempts_started,
            "excluded": self.pool.excluded if self.pool else {},
            "failures": self._failures[-100:],
        }
        if stopped:
            state["stopped"] = stopped
        write_state(self.run_dir, state)

    def _restarts_total(self) -> int:
        """Restarts of the job so far, across requeues: its attempts ended, less the first (status.json and
        launcher-state.json both say this one number)."""
        return max(0, self._restarts_before + len(self.history) - 1)

    def _advertise_host(self) -> str:
        first = self.ctx.node_name or (self.ctx.node_list[0] if self.ctx.node_list else None)
        if first:
            with contextlib.suppress(NvrxError):
                address = self.backend.node(first).address
                if address:
                    return address
        return socket.gethostname()

    def _address_of(self, node: str) -> str:
        with contextlib.suppress(NvrxError):
            address = self.backend.node(node).address
            if address:
                return address
        return node

    # ------------------------------------------------------------------ the loop

    async def run(self) -> ExitCode:
        token = self._prepare_run_dir()
        nodes = list(self.ctx.node_list)
        self.s.validate(len(nodes))
        excluded_before = read_state(self.run_dir).get("excluded", {})
        self.pool = NodePool.split(nodes, self.s.spares, {n: w for n, w in excluded_before.items() if n in nodes})
        self.events.emit(
            "launcher.started", job=self.ctx.job_id, nodes=nodes, pool=self.pool.to_dict(), command=self.s.command,
            slurm_restart_count=self.ctx.restart_count, mode=self.s.mode, tasks_per_node=self.s.tasks_per_node,
            world_size=len(self.pool.active) * self.s.tasks_per_node, cpus_per_task=self.s.cpus_per_task,
            gpus_per_task=self.s.gpus_per_task,
        )
        self.hub = AgentHub(token, job=str(self.ctx.job_id))
        self.stragglers = StragglerWatch(self.s.straggler, self.run_dir, self.events, self.hub)
        self.hub.on_timings = self.stragglers.on_timings
        port = await self.hub.start()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGUSR1, self._on_time_limit_warning)
        env = {**os.environ, "NVRX_TOKEN_FILE": str(self.run_dir / "token"), "NVRX_RUN_DIR": str(self.run_dir)}
        self._env = env
        self._standby = Standby(self.hub, self.events, env, self.run_dir / "logs")
        site = self.s.mode == "site"
        own_dir = job_tmp_dir(os.getuid(), self.ctx.job_id)
        socket_template = self.s.agent_socket if site else str(own_dir / "agent-%n.sock")
        link_args = [
            "--launcher", f"{self._advertise_host()}:{port}", "--token-file", str(self.run_dir / "token"),
            "--socket", socket_template, "--health-interval", str(self.s.health_interval_s),
        ]  # fmt: skip
        all_nodes = self.pool.active + self.pool.spares
        found = await attach_site_agents(all_nodes, link_args, env, self.events) if site else []
        own = [n for n in all_nodes if n not in found]  # user mode, or a node whose Prolog started none
        # One agent step per node: Slurm ends a step when one of its nodes fails, and a lost node must not
        # take the other nodes' agents with it.
        agents = [SrunStep(agent_step_argv([n], self.run_dir / "logs" / f"agent-{n}.log", link_args), env) for n in own]
        for step in agents:
            await step.start()
        status_task = loop.create_task(self._status_loop())
        straggler_task = loop.create_task(self.stragglers.run())
        try:
            if self.s.inprocess.enabled:
                await self._store.start()
            missing = await self.hub.wait_for_agents(all_nodes, self.s.agent_timeout_s)
            freeze_long_lived()
            for node in missing:
                self._exclude(node, f"node agent did not start within {self.s.agent_timeout_s:g} s")
            code = await self._attempts(env, socket_template)
        finally:
            status_task.cancel()
            straggler_task.cancel()
            self.hub.broadcast(m.Shutdown)
            await asyncio.sleep(0.2)
            await asyncio.gather(*(step.stop(3.0) for step in agents), self._store.stop(), self._standby.stop())
            await self.hub.close()
            self._write_state()
            self._publish_status(final=True)
        return code

    async def _attempts(self, env: dict[str, str], socket_template: str) -> ExitCode:
        plugin = srun_has_nvrx(self.runner)
        policy = RestartPolicy(self.s.max_restarts, self.s.max_no_progress, self.s.min_nodes)
        wanted = len(self.pool.active)
        while True:
            if not self.pool.active:
                return await self._requeue_or_stop("no usable node left in the allocation")
            index = len(self.history)
            restart = self._restarts_before + index
            self._attempts_started = index + 1
            self._write_state()
            attempt = await self._run_step(index, restart, env, socket_template, plugin)
            self.history.append(attempt)
            self._write_state()
            early, self._early = EarlyProbe.for_attempt(attempt, self._early, self._env), None
            try:
                code = await self._decide(attempt, early, policy, wanted, restart, index)
            finally:
                if early is not None:
                    early.cancel()  # a stop or a requeue decided without it
            if code is not None:
                return code

    async def _decide(
        self, attempt: Attempt, early: EarlyProbe | None, policy: RestartPolicy, wanted: int, restart: int, index: int
    ) -> ExitCode | None:
        """After a step: attribution, the culprit node's fate, the policy; an exit code, or None to go on."""
        verdict = None
        if attempt.outcome == Outcome.FAILED and self.s.attribution:
            verdict = await self._judge(attempt)
            if verdict is not None and self._inprocess is not None and self._inprocess.explains(verdict):
                self.events.emit("launcher.attribution.recovered", reason="the verdict names an error recovered "
                                 f"in-process, not what ended the step: {verdict.root_cause}")  # fmt: skip
                verdict = None
            attempt = self._refine_culprit(attempt, verdict)
            self.history[-1] = attempt
            if verdict is not None and (not verdict.restartable or verdict.action.value == "stop"):
                # A failure of the workload itself (an exception, OOM, NaN, a full disk): restarting
                # repeats it and excluding (or draining) a healthy node would be wrong.
                reason = f"not restartable ({verdict.category.value}): {verdict.root_cause}"
                self._end("launcher.stop", reason=reason, exit_code=int(ExitCode.DO_NOT_REQUEUE))
                return ExitCode.DO_NOT_REQUEUE
        spare_used = False
        active_before = len(self.pool.active)
        if attempt.outcome == Outcome.FAILED and attempt.culprit_node:
            judgement = await self._judge_node(attempt, verdict, early)
            if judgement.exclude:
                spare_used = self._exclude(attempt.culprit_node, judgement.reason) is not None
        if attempt.outcome == Outcome.FAILED:
            spare_used = self._exclude_stragglers() or spare_used
        decision = policy.decide(self.history, len(self.pool.active), spare_used, wanted)
        self.events.emit(
            f"launcher.decision.{decision.action.value}", reason=decision.reason, attempt=index,
            pool=self.pool.to_dict(), active_before=active_before,
        )
        if decision.action == Action.DONE:
            self._outcome = f"done: {decision.reason}"
            return ExitCode.OK
        if decision.action == Action.STOP:
            self._end("launcher.stop", reason=decision.reason, exit_code=int(ExitCode.DO_NOT_REQUEUE))
            return ExitCode.DO_NOT_REQUEUE
        if decision.action == Action.REQUEUE:
            return await self._requeue_or_stop(decision.reason)
        self.events.emit("launcher.restart", reason=decision.reason, restart=restart + 1,
                         nodes=self.pool.active, world_size=len(self.pool.active) * self.s.tasks_per_node)

    async def _judge(self, attempt: Attempt) -> Any:
        """Attribution's verdict on the attempt that just failed (its logs, events, dumps); None if it fails."""
        from nvrx_hpc.attribution.analyze import analyze_run

        self._fr_culprits = ()
        try:
            report = await asyncio.wait_for(
                asyncio.to_thread(analyze_run, self.run_dir, since=attempt.started_at), ATTRIBUTION_TIMEOUT_S
            )
        except Exception as exc:  # noqa: BLE001 - fail open: the loop decides as if there were no verdict
            self.events.emit("launcher.attribution_failed", reason=f"{type(exc).__name__}: {exc}")
            return None
        v = report.verdict
        self._fr_culprits = tuple(report.fr.culprits) if report.fr is not None else ()
        self.events.emit(
            "launcher.attribution", reason=v.root_cause, category=v.category.value, restartable=v.restartable,
            action=v.action.value, confidence=round(v.confidence, 2), ranks=list(v.culprit.ranks),
            nodes=list(v.culprit.nodes), signature=v.signature, flight_recorder_culprits=list(self._fr_culprits),
        )  # fmt: skip
        return v

    def _refine_culprit(self, attempt: Attempt, verdict: Any) -> Attempt:
        refined = refined_by_dumps(attempt, verdict, self._fr_culprits, self._rank_nodes)
        if refined is not attempt:
            self.events.emit("launcher.culprit.refined", node=refined.culprit_node, rank=refined.culprit_rank,
                             reason=refined.reason, was_rank=attempt.culprit_rank, was_node=attempt.culprit_node,
                             category=verdict.category.value)  # fmt: skip
        return refined

    def _end(self, kind: str, reason: str, **detail: Any) -> None:
        """The launcher's last decision: an event, and the outcome `nvrx-hpc status` shows."""
        self._outcome = f"{kind.removeprefix('launcher.')}: {reason}"
        self.events.emit(kind, reason=reason, **detail)

    async def _judge_node(self, attempt: Attempt, verdict: Any, early: EarlyProbe | None) -> NodeJudgement:
        """Whether the culprit node goes: only on evidence about the node (decision table in docs/launcher.md)."""
        node = attempt.culprit_node
        evidence = await gather_evidence(attempt, verdict, self.backend, self._env, self.events, early)
        now = time.time()
        self._failures.append({"node": node, "time": now, "reason": attempt.reason})
        times = [f["time"] for f in self._failures if f["node"] == node]
        judgement = judge_node(evidence, times, now, self.s.exclude_window_s, self.s.exclude_after)
        self.events.emit("launcher.node.judged", node=node, exclude=judgement.exclude, row=judgement.row,
                         reason=judgement.reason, finding=attempt.finding)
        return judgement

    async def _requeue_or_stop(self, reason: str) -> ExitCode:
        """Requeue, unless the partition can no longer run the job without the excluded nodes: then ask
        for fewer nodes when --min-nodes allows, else stop (never leave a job pending forever)."""
        excluded = sorted(self.pool.excluded) if self.pool else []
        needed = len(self.ctx.node_list)
        if not excluded:
            return self._requeue(reason)
        try:
            cap = await asyncio.to_thread(
                partition_capacity, self.backend, self.ctx.partition, excluded, needed
            )
        except NvrxError as exc:  # fail open: requeue as asked; Slurm will say if it cannot run it
            self.events.emit("launcher.capacity_unknown", reason=exc.message)
            return self._requeue(reason)
        self.events.emit("launcher.capacity", partition=cap.partition, usable=list(cap.usable), needed=needed,
                         excluded=excluded, reason=f"{len(cap.usable)} usable node(s) not excluded, {needed} needed")
        if cap.enough:
            return self._requeue(reason)
        smallest = (self.s.min_nodes or 0) + self.s.spares
        if self.s.min_nodes is not None and len(cap.usable) >= smallest:
            return self._requeue(reason, nodes=len(cap.usable))
        why = (
            f"cannot requeue: partition {cap.partition or '(default)'} has {len(cap.usable)} usable node(s) besides "
            f"the excluded {compress(excluded)}, and the job needs {needed}"
            + (f" (at least {smallest} with --min-nodes {self.s.min_nodes})" if self.s.min_nodes else "")
            + f"; {reason}"
        )
        self._end("launcher.stop", reason=why, exit_code=int(ExitCode.DO_NOT_REQUEUE), stranded=True)
        self._write_state(stopped=why)
        return ExitCode.DO_NOT_REQUEUE

    def _requeue(self, reason: str, nodes: int | None = None) -> ExitCode:
        excluded = sorted(self.pool.excluded) if self.pool else []
        self._write_state()
        self._end("launcher.requeue", reason=reason, exclude=excluded, nodes=nodes)
        # Requeueing its own job makes Slurm SIGTERM this batch script at once; the held job's updates and its
        # release must still happen (KillWait gives the seconds), or it pends with the old shape forever.
        previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            tasks = nodes * self.s.tasks_per_node if nodes is not None else None
            self.backend.requeue(self.ctx.job_id, exclude=excluded, nodes=nodes, tasks=tasks)
            if nodes is not None:
                self.events.emit("launcher.requeue.shrunk", nodes=nodes,
                                 reason=f"the partition holds only {nodes} usable nodes; --min-nodes allows it")
        except NvrxError as exc:
            self.events.emit("launcher.requeue_failed", reason=exc.message)
        finally:
            signal.signal(signal.SIGTERM, previous)
        return ExitCode.REQUEUE_EXCLUDING

    def _exclude(self, node: str, why: str) -> str | None:
        spare = self.pool.exclude(node, why)
        self.events.emit("launcher.node.excluded", node=node, reason=why, replaced_by=spare, mode=self.s.mode)
        if self.s.mode == "site":
            try:
                current = self.backend.node(node)
                if current.drained and not (current.reason or "").startswith("nvrx:"):
                    why_not = f"already drained: {current.reason}"
                    self.events.emit("launcher.node.drain_skipped", node=node, reason=why_not)
                else:
                    self.backend.drain([node], f"nvrx: {why}"[:200])
                    self.events.emit("launcher.node.drained", node=node, reason=f"nvrx: {why}")
            except NvrxError as exc:
                self.events.emit("launcher.node.drain_failed", node=node, reason=exc.message)
        return spare

    def _exclude_soon(self, node: str, why: str) -> None:
        """A node the running step lost in-process: excluded (and drained in site mode) off the event loop."""
        self._excluding.append(asyncio.ensure_future(asyncio.to_thread(self._exclude, node, why)))

    def _exclude_stragglers(self) -> bool:
        """Policy straggler.exclude_at_restart: a node that keeps straggling is replaced by a spare (never
        shrinks the job). True when a spare was used."""
        used = False
        for node in self.stragglers.nodes_to_exclude():
            if node in self.pool.active and self.pool.spares:
                used = self._exclude(node, "straggler: flagged in most recent windows") is not None or used
        return used

    # ------------------------------------------------------------------ one step

    async def _run_step(
        self, index: int, restart: int, env: dict[str, str], socket_template: str, plugin: bool
    ) -> Attempt:
        hub = self.hub
        while not hub.events.empty():  # what the last step's agents said after its end
            hub.events.get_nowait()
        self.stragglers.new_step()
        ip = self.s.inprocess
        store = f"{self._advertise_host()}:{self._store.port}" if ip.enabled else None
        layout = layout_step(self.s, self.pool.active, self.pool.spares, restart,
                             self._address_of(sort_hosts(self.pool.active)[0]), socket_template, plugin, store)
        nodes, spec = layout.nodes, layout.spec
        hub.broadcast(m.StepStart, nodes=nodes, restart=restart, status_s=agent_status_s(len(nodes)))
        hub.broadcast(m.LauncherTimeouts, nodes=nodes, timeouts=self.s.agent_timeouts())
        started = time.time()
        standby = await self._standby.take(restart, layout.training, self.s.tasks_per_node, layout.env)
        step = standby or SrunStep(training_step_argv(spec), {**env, **layout.env})
        world = len(layout.training) * self.s.tasks_per_node
        self.events.emit("launcher.step.started", attempt=index, restart=restart, nodes=layout.training,
                         world_size=world, log=str(spec.output), plugin=plugin and not standby, standby=bool(standby),
                         spare_nodes=[n for n in nodes if n not in layout.training])  # fmt: skip
        if standby is None:
            await step.start()
        watch = StepWatch(self.hub, self.events, self.s, self._clock)
        watch.pid_exits_are_deaths, watch.world = standby is not None, world
        watch.on_first_finding = lambda f: setattr(self, "_early", EarlyProbe.for_finding(f.node, f.kind, self._env))
        if self.s.standby:  # the next attempt's ranks import while this one trains (standby_step.py)
            watch.on_first_iteration = lambda: self._standby.prepare(
                restart + 1, sort_hosts(self.pool.active + self.pool.spares), spec, {**layout.env})
        if ip.enabled:  # refill steps top the spare tasks up after each in-process restart (refill.py)
            refill = Refill(layout, {**env, **layout.env}, self._store, namespace(str(self.ctx.job_id), restart),
                            self.events, world, ip.refill_max, restart, self.run_dir / "logs")
            watch.inprocess = self._inprocess = InprocessWatch(hub, self.events, nodes, ip, layout.width, world,
                                                               self._clock, self._exclude_soon, refill)
            step = StepGroup(step, refill, started, ip.hard_timeout_s)
        findings, max_iteration, rc = await watch.run(step, nodes)
        await asyncio.gather(*self._excluding)
        self._excluding.clear()
        self._rank_nodes.update(watch.rank_nodes)
        if rc and not findings and ip.enabled and self._inprocess.finished_despite(rc, self.run_dir, started):
            rc = 0
        self.events.emit("launcher.step.ended", attempt=index, restart=restart, returncode=rc,
                         duration_s=round(time.time() - started, 3), max_iteration=max_iteration)
        if rc == 0:
            # Every task exited 0: the training finished, whatever was reported on the way out.
            if findings:
                self.events.emit("launcher.step.findings_ignored", reason="the step exited 0",
                                 findings=[f.reason for f in findings])
            outcome = Outcome.STOPPED if self._stop_requested.is_set() else Outcome.SUCCEEDED
            return Attempt(outcome, max_iteration=max_iteration, started_at=started)
        if not findings:
            findings = [Finding("srun", time.time(), None, reason=f"training step exited with code {rc}")]
        culprit = pick_culprit(findings, self.s.comm_sections)
        hung = [f for f in findings if f.kind == "hung"]
        # Every hung rank waits inside a collective: the sections cannot tell who holds it up; the
        # flight-recorder dumps taken at hang time can (attribution reads them next).
        unsure = culprit.kind == "hung" and all(set(f.sections) & self.s.comm_sections for f in hung)
        self.events.emit(
            "launcher.culprit", node=culprit.node, rank=culprit.rank, reason=culprit.reason, finding=culprit.kind,
            findings=[f.__dict__ for f in findings], unsure=unsure,
        )  # fmt: skip
        return Attempt(Outcome.FAILED, culprit.node, culprit.reason, max_iteration, started, culprit.kind, culprit.rank,
                       unsure)

    def _on_time_limit_warning(self) -> None:
        """Slurm's --signal=B:USR1@N: ask every rank to checkpoint and exit, then requeue."""
        if self._stop_requested.is_set():
            return
        self._stop_requested.set()
        self.events.emit("launcher.time_limit_warning", reason="SIGUSR1 from Slurm: ranks asked to checkpoint and exit")
        self.hub.broadcast(m.RequestStop, reason="time limit")

    def _status_own(self) -> dict:
        return {
            "job": self.ctx.job_id, "run_dir": str(self.run_dir), "attempt": len(self.history),
            "restarts": self._restarts_total(), "pool": self.pool.to_dict() if self.pool else {},
            "history": [a.__dict__ for a in self.history], "outcome": self._outcome,
            "stragglers": self.stragglers.status() if self.stragglers else {},
        }  # fmt: skip

    def _publish_status(self, final: bool = False) -> None:
        try:
            self._status.write(self.hub.agents if self.hub else {}, self._status_own(), final=final)
        except OSError as exc:
            log.warning("cannot write status: %s", exc)

    async def _status_loop(self) -> None:
        while True:
            try:  # the file is written by a thread: 3 MB at 16k ranks
                await self._status.write_async(self.hub.agents if self.hub else {}, self._status_own())
            except OSError as exc:
                log.warning("cannot write status: %s", exc)
            # As often as the agents report: every second, every 4 s at 2,048 nodes (docs/scale.md).
            await asyncio.sleep(agent_status_s(len(self.pool.active) if self.pool else 0))

