"""`nvrx-hpc health`: run the node's health checks and show each verdict (rich table or JSON)."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from nvrx_hpc.cli._output import JsonOption, print_json, print_table
from nvrx_hpc.core.config import load_config
from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.health.api import Level
from nvrx_hpc.health.backends import GPU_BACKENDS
from nvrx_hpc.health.policy import load_policy
from nvrx_hpc.health.service import node_name, run_health

_COLUMNS = ["check", "level", "verdict", "detail", "seconds"]


def register(app: typer.Typer) -> None:
    @app.command()
    def health(
        level: Level = typer.Option(Level.QUICK, "--level", help="quick: seconds (the Prolog's set); full: + dcgmi."),
        as_json: JsonOption = False,
        table: bool = typer.Option(False, "--table", hidden=True, help="A table (the default; kept for old scripts)."),
        node: str | None = typer.Option(None, "--node", help="Node name [default: $SLURMD_NODENAME or hostname]."),
        backend: str | None = typer.Option(None, "--backend", help=f"GPU backend: {', '.join(GPU_BACKENDS)} "
                                           "[default: health.gpu_backend]."),
        check: list[str] = typer.Option([], "--check", help="Run only this check (repeatable)."),
        policy_file: Path | None = typer.Option(None, "--policy", help="Health policy TOML over the defaults."),
        budget: float | None = typer.Option(None, "--budget", min=0.1, help="Seconds before a check counts as hung."),
    ) -> None:
        """Run the health checks on this node; exits 69 when any check is fatal."""
        if as_json and table:
            raise ConfigError("--json and --table exclude each other", hint="give one of them")
        env = dict(os.environ)
        if backend is not None and backend not in GPU_BACKENDS:
            raise ConfigError(f"--backend {backend!r}: expected one of {', '.join(GPU_BACKENDS)}")
        config = load_config(env=env, overrides={"health.gpu_backend": backend} if backend else None).config
        policy = load_policy(policy_file, env=env)
        name = node or node_name(env)
        gpu_name = config.health.gpu_backend
        limit = budget if budget is not None else (None if level is Level.FULL else config.health.prolog_budget_s)
        report = run_health(config, node=name, level=level, policy=policy, env=env, checks=check or None,
                            budget_s=limit)  # fmt: skip
        if as_json:
            print_json(report.to_dict())
        else:
            rows = [
                {"check": r.name, "level": r.level.value, "verdict": r.verdict.value, "detail": r.detail,
                 "seconds": f"{r.duration_s:.2f}"}  # fmt: skip
                for r in report.results
            ]
            title = f"{name}: {report.verdict.value} (GPU backend {gpu_name}, {report.duration_s:.1f} s)"
            print_table(rows, _COLUMNS, False, title=title)
        if report.fatal:
            raise typer.Exit(int(ExitCode.UNAVAILABLE))
