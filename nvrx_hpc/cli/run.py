"""`nvrx-hpc run`, `nvrx-hpc agent`, `nvrx-hpc status`: the restart loop, the node agent, the live view."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from pathlib import Path

import typer

from nvrx_hpc.cli._output import JsonOption, print_json, print_table, print_text
from nvrx_hpc.core.config import load_config
from nvrx_hpc.core.errors import ConfigError, NvrxError
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.core.templates import expand_percent
from nvrx_hpc.core.wire import load_token
from nvrx_hpc.slurm.api import JobContext

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    @app.command(context_settings={"allow_interspersed_args": False})
    def run(
        command: list[str] = typer.Argument(None, help="The training command, after --."),
        spares: int | None = typer.Option(None, "--spares", min=0, help="Nodes held back to replace failed ones."),
        tasks_per_node: int | None = typer.Option(
            None, "--tasks-per-node", min=1, help="Ranks per node [from the allocation: SLURM_NTASKS_PER_NODE, ...]."
        ),
        max_restarts: int | None = typer.Option(None, "--max-restarts", min=0, help="In-allocation restarts."),
        min_nodes: int | None = typer.Option(None, "--min-nodes", min=1, help="Shrink down to this many nodes."),
        max_no_progress: int | None = typer.Option(
            None, "--max-no-progress", min=1, help="Stop after K stalled attempts."
        ),
        run_dir: Path | None = typer.Option(None, "--run-dir", help="Run directory [launcher.run_dir]."),
        mode: str | None = typer.Option(None, "--mode", help="user: exclude bad nodes; site: also drain them."),
        heartbeat_timeout: float | None = typer.Option(
            None, "--heartbeat-timeout", help="Seconds [agent.heartbeat_timeout_s; at its default, calibrated]."
        ),
        initial_timeout: float | None = typer.Option(None, "--initial-timeout", help="Seconds to the first heartbeat."),
        section_timeout: list[str] = typer.Option([], "--section-timeout", help="NAME=SECONDS (repeatable)."),
        stop_grace: float | None = typer.Option(None, "--stop-grace", min=0, help="SIGTERM to SIGKILL grace, seconds."),
        attribution: bool | None = typer.Option(
            None, "--attribution/--no-attribution", help="Stop at once on a failure attribution calls not restartable."
        ),
        health_interval: float | None = typer.Option(
            None, "--health-interval", min=0, help="Seconds between the agents' health checks (0: off)."
        ),
        exclude_after: int | None = typer.Option(
            None, "--exclude-after", min=1, help="Exclude a healthy node behind this many failures in the window."
        ),
        exclude_window: float | None = typer.Option(
            None, "--exclude-window", help="Seconds: --exclude-after's window."
        ),
        inprocess: bool | None = typer.Option(
            None, "--inprocess/--no-inprocess", help="Recover faults inside the ranks first (nvrx_hpc.inprocess)."
        ),
        spare_ranks: int | None = typer.Option(
            None, "--spare-ranks", min=0, help="Warm spare ranks per node for in-process restart."
        ),
        standby: bool | None = typer.Option(
            None, "--standby/--no-standby", help="Start the next attempt's ranks ahead (imports done) while one trains."
        ),
    ) -> None:
        """Run CMD as an srun step in this allocation and keep it alive through failures."""
        from nvrx_hpc.launcher.loop import Launcher
        from nvrx_hpc.launcher.settings import RunSettings
        from nvrx_hpc.launcher.shape import resolve_shape
        from nvrx_hpc.slurm.backend import get_backend
        from nvrx_hpc.slurm.runner import CommandRunner

        flags = {
            "launcher.spares": spares, "launcher.max_restarts": max_restarts, "launcher.min_nodes": min_nodes,
            "launcher.max_no_progress": max_no_progress, "launcher.mode": mode, "launcher.stop_grace_s": stop_grace,
            "launcher.section_timeouts": ",".join(section_timeout) or None, "launcher.attribution": attribution,
            "launcher.health_interval_s": health_interval, "launcher.exclude_after": exclude_after,
            "launcher.exclude_window_s": exclude_window, "agent.heartbeat_timeout_s": heartbeat_timeout,
            "agent.initial_timeout_s": initial_timeout, "inprocess.enabled": inprocess,
            "inprocess.spare_ranks": spare_ranks, "launcher.standby": standby,
        }  # fmt: skip
        resolved = load_config(overrides={key: value for key, value in flags.items() if value is not None})
        config = resolved.config
        ctx = JobContext.from_env(required=("job_id", "node_list"))
        if run_dir is None:
            run_dir = Path(config.launcher.run_path(ctx.submit_dir or os.getcwd(), str(ctx.job_id)))
        shape = resolve_shape(ctx, tasks_per_node, config.launcher.spares)  # before anything starts
        settings = RunSettings.from_config(
            resolved, command=list(command or []), run_dir=run_dir.absolute(), tasks_per_node=shape.tasks_per_node,
            cpus_per_task=shape.cpus_per_task, gpus_per_task=shape.gpus_per_task,
        )
        settings.validate(len(ctx.node_list))  # before anything starts
        print_text(f"nvrx-hpc run: job {ctx.job_id}: {shape.describe()}; run dir {settings.run_dir}")
        runner = CommandRunner(default_timeout=config.slurm.command_timeout_s)
        launcher = Launcher(settings, ctx, get_backend(config.slurm.backend, runner), runner)
        _raise_open_files_limit()
        code = asyncio.run(launcher.run())
        events = settings.run_dir / "events.jsonl"
        typer.echo(f"nvrx-hpc run: exit {int(code)} ({code.name}); events in {events}", err=True)
        raise typer.Exit(int(code))

    @app.command()
    def agent(
        launcher: str | None = typer.Option(None, "--launcher", help="HOST:PORT of the launcher."),
        token_file: Path | None = typer.Option(None, "--token-file", help="The job's token file (mode 0600)."),
        socket: str = typer.Option(..., "--socket", help="Unix socket path; %n node, %j job."),
        node: str | None = typer.Option(None, "--node", help="This node's Slurm name [$SLURMD_NODENAME]."),
        health_interval: float = typer.Option(0.0, "--health-interval", min=0, help="Health loop period (0: off)."),
        metrics_port: int | None = typer.Option(None, "--metrics-port", help="Serve Prometheus metrics here."),
        site: bool = typer.Option(False, "--site", help="Started by the Prolog: wait for `nvrx-hpc run` to attach."),
    ) -> None:
        """The node agent (one per node per job): started by `nvrx-hpc run`, or by the Prolog with --site."""
        from nvrx_hpc.agent.daemon import Agent, AgentSettings

        node = node or os.environ.get("SLURMD_NODENAME")
        job = os.environ.get("SLURM_JOB_ID", "")
        if not node:
            raise ConfigError("no node name: pass --node or run inside a Slurm step (SLURMD_NODENAME)")
        if site == (launcher is not None or token_file is not None):
            raise ConfigError("give either --site, or --launcher and --token-file")
        host, port, token = None, None, None
        if site:  # its log (beside the socket, kept by the Epilog's record) is all an admin will see of it
            logging.getLogger("nvrx_hpc").setLevel(logging.INFO)
        else:
            if launcher is None or token_file is None:
                raise ConfigError("--launcher and --token-file go together")
            host, sep, port_text = launcher.rpartition(":")
            if not sep or not port_text.isdigit():
                raise ConfigError(f"--launcher {launcher!r} must be HOST:PORT")
            port, token = int(port_text), load_token(token_file)
        settings = AgentSettings(
            node=node, job=job, socket_path=Path(expand_percent(socket, job_id=job, node=node)),
            launcher_host=host, launcher_port=port, token=token,
            health_interval_s=health_interval, metrics_port=metrics_port,
        )
        raise typer.Exit(asyncio.run(Agent(settings).run()))

    @app.command("agent-attach", hidden=True)
    def agent_attach(
        launcher: str = typer.Option(..., "--launcher", help="HOST:PORT of the launcher."),
        token_file: Path = typer.Option(..., "--token-file", help="The job's token file."),
        socket: str = typer.Option(..., "--socket", help="The site agents' socket template; %n node, %j job."),
        health_interval: float = typer.Option(0.0, "--health-interval", min=0, help="Health loop period (0: off)."),
        wait: float = typer.Option(30.0, "--wait", min=0, help="Seconds to wait for the agent to listen."),
    ) -> None:
        """Run by `nvrx-hpc run --mode site` on every node: attach the agent the Prolog started."""
        from nvrx_hpc.agent.site import SiteAgentFiles, attach

        node = os.environ.get("SLURMD_NODENAME", "")
        job = os.environ.get("SLURM_JOB_ID", "")
        if not node or not job:
            raise ConfigError("agent-attach runs inside a Slurm step (SLURMD_NODENAME, SLURM_JOB_ID)")
        path = Path(expand_percent(socket, job_id=job, node=node))
        try:
            answer = attach(path, launcher, token_file, health_interval, wait, SiteAgentFiles.at(path).pid_file)
        except NvrxError as exc:
            print_text(f"nvrx-attach {node} missing: {exc.message}")
            raise typer.Exit(int(ExitCode.UNAVAILABLE)) from None
        print_text(f"nvrx-attach {node} attached pid={answer.get('pid')}")

    @app.command()
    def status(
        job: str = typer.Argument(..., help="Job id."),
        run_dir: Path | None = typer.Option(None, "--run-dir", help="Run directory [from Slurm's WorkDir]."),
        as_json: JsonOption = False,
    ) -> None:
        """Live view of a job under `nvrx-hpc run`: ranks, heartbeats, sections, restarts, exclusions."""
        from nvrx_hpc.launcher.status import read_status

        directory = run_dir or run_dir_of(job)
        state = read_status(directory)
        if state is None:
            raise NvrxError(f"no status in {directory}", hint="is the job running under `nvrx-hpc run`? see --run-dir")
        if as_json:
            print_json(state)
            return
        age = time.time() - float(state.get("updated", 0))
        pool = state.get("pool", {})
        print_text(f"job {state.get('job')}  attempt {state.get('attempt')}  updated {age:.1f} s ago")
        if state.get("outcome"):
            print_text(f"outcome: {state['outcome']}")
        print_text(f"active {','.join(pool.get('active', []))}  spares {','.join(pool.get('spares', [])) or '-'}")
        for node, why in (pool.get("excluded") or {}).items():
            print_text(f"excluded {node}: {why}")
        rows = [
            {"rank": r, "node": v.get("node"), "state": v.get("state"), "iteration": v.get("iteration"),
             "last beat (s)": v.get("last_beat_age"), "sections": ",".join(v.get("sections") or [])}
            for r, v in sorted(state.get("ranks", {}).items(), key=lambda kv: int(kv[0]))
        ]  # fmt: skip
        print_table(rows, ["rank", "node", "state", "iteration", "last beat (s)", "sections"], json_output=False)
        for rank, flag in (state.get("stragglers") or {}).get("flagged", {}).items():
            print_text(f"straggler: rank {rank} on {flag.get('node')} ({flag.get('kind')}, score {flag.get('score')})")


def _raise_open_files_limit() -> None:
    """The launcher holds one socket per node agent: 2,048 nodes need more than the usual soft limit of
    1,024 open files. Raise the soft limit to the hard one (no privilege needed); docs/scale.md."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass  # a hard limit of infinity may be refused: keep the soft one


def run_dir_of(job: str) -> Path:
    """The run directory of a job, from Slurm's WorkDir and launcher.run_dir."""
    from nvrx_hpc.slurm.backend import get_backend

    config = load_config().config
    work_dir = get_backend(config.slurm.backend, timeout=config.slurm.command_timeout_s).job(job).work_dir
    if not work_dir:
        raise NvrxError(f"Slurm did not say where job {job} runs", hint="pass --run-dir")
    return Path(config.launcher.run_path(work_dir, job))
