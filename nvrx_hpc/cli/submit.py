"""`nvrx-hpc render` / `nvrx-hpc submit`: the sbatch script of a training job, printed or submitted."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import typer

from nvrx_hpc.cli._output import print_text

__all__ = ["register"]


def _command(submit: bool) -> Callable[..., None]:
    # The options are plain values: SbatchVars validates them all, so a bad one is a ConfigError that
    # names the variable (exit 2), the same from the CLI and from Python.
    def command(
        command: list[str] = typer.Argument(None, help="The training command, after --."),
        nodes: int = typer.Option(..., "--nodes", help="Training nodes (the allocation holds nodes + spares)."),
        spares: int = typer.Option(0, "--spares", help="Spare nodes that replace failed ones."),
        tasks_per_node: int = typer.Option(1, "--tasks-per-node", help="Ranks per node."),
        time: str = typer.Option("60", "--time", help="Slurm time limit: MM, HH:MM:SS or D-HH:MM:SS."),
        partition: str | None = typer.Option(None, "--partition", help="Partition [the cluster's default]."),
        job_name: str = typer.Option("nvrx-train", "--job-name", help="Slurm job name."),
        run_dir: str = typer.Option(..., "--run-dir", help="Absolute run directory (script, events, output)."),
        max_restarts: int | None = typer.Option(None, "--max-restarts", help="In-allocation restarts."),
        min_nodes: int | None = typer.Option(None, "--min-nodes", help="Shrink down to this many nodes."),
        heartbeat_timeout: float | None = typer.Option(None, "--heartbeat-timeout", help="Seconds [calibrated]."),
        initial_timeout: float | None = typer.Option(None, "--initial-timeout", help="Seconds to the first heartbeat."),
        signal_grace: int = typer.Option(60, "--signal-grace", help="Seconds before the time limit for USR1."),
        python: str = typer.Option(sys.executable, "--python", help="Interpreter that runs nvrx-hpc on the nodes."),
        mode: str = typer.Option("user", "--mode", help="user, or site: sbatch --nvrx and the Prolog's agents."),
        template: Path | None = typer.Option(None, "--template", help="jinja2 template [pytorch.sbatch.j2]."),
    ) -> None:
        from nvrx_hpc.launcher.sbatch import build_vars, render_script

        variables = build_vars(
            nodes=nodes, spares=spares, tasks_per_node=tasks_per_node, time=time, partition=partition,
            job_name=job_name, run_dir=run_dir, command=list(command or []), max_restarts=max_restarts,
            min_nodes=min_nodes, heartbeat_timeout=heartbeat_timeout, initial_timeout=initial_timeout,
            signal_grace=signal_grace, python=python, mode=mode,
        )  # fmt: skip
        script = render_script(variables, template)
        if not submit:
            print_text(script, nl=False)
            return
        from nvrx_hpc.core.config import load_config
        from nvrx_hpc.launcher.sbatch import submit_script
        from nvrx_hpc.slurm.runner import CommandRunner

        timeout = load_config().config.slurm.command_timeout_s
        job, path = submit_script(script, variables.run_dir, CommandRunner(), timeout)
        typer.echo(f"submitted {path} as job {job}", err=True)
        print_text(job)

    return command


def register(app: typer.Typer) -> None:
    settings = {"allow_interspersed_args": False}
    render_help = "Print the sbatch script that runs CMD under `nvrx-hpc run` (docs/sbatch-template.md)."
    submit_help = "Write that script into --run-dir, submit it with sbatch and print the job id."
    app.command("render", context_settings=settings, help=render_help)(_command(submit=False))
    app.command("submit", context_settings=settings, help=submit_help)(_command(submit=True))
