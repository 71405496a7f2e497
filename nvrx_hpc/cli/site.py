"""`nvrx-hpc site install|check`: set a Slurm node up for site mode, and check one (docs/site-install.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nvrx_hpc.cli._output import JsonOption, print_json, print_text
from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.deploy import SitePaths, Status, install, run_checks, uninstall
from nvrx_hpc.deploy.install import DEFAULT_INCLUDE

app = typer.Typer(help="Install site mode on a Slurm node (plugin, Prolog/Epilog, config), or check a node.",
                  no_args_is_help=True)

Prefix = Annotated[Path | None, typer.Option(
    "--prefix", help="Write every file under DIR instead of / (files name each other under DIR).",
    show_default=False)]
SlurmEtc = Annotated[Path | None, typer.Option(
    "--slurm-etc", help="Slurm's config directory [default: that of $SLURM_CONF, else /etc/slurm].",
    show_default=False)]


@app.command("install")
def install_cmd(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show every file it would write; write nothing.")] = False,
    prefix: Prefix = None,
    remove: Annotated[bool, typer.Option("--uninstall", help="Remove exactly what an install wrote.")] = False,
    slurm_include: Annotated[Path, typer.Option(
        "--slurm-include", help="Where slurm/spank.h and slurm/slurm_version.h are.")] = DEFAULT_INCLUDE,
    python: Annotated[str | None, typer.Option(
        "--python", help="Interpreter the Prolog/Epilog run [default: this one].", show_default=False)] = None,
    slurm_etc: SlurmEtc = None,
    as_json: JsonOption = False,
) -> None:
    """Build the SPANK plugin for this node's Slurm and install it with its plugstack entry, the
    Prolog/Epilog wrappers and a commented config; print the slurm.conf lines still to add. Run as root."""
    paths = SitePaths.build(prefix, slurm_etc)
    if remove:
        report = uninstall(paths, dry_run=dry_run)
    else:
        if python is not None and not python.startswith("/"):
            raise ConfigError(f"--python {python!r} is not an absolute path", hint="slurmd runs hooks with no PATH")
        report = install(paths, dry_run=dry_run, include_dir=slurm_include, python=python)
    if as_json:
        print_json(report.to_dict())
        return
    if report.versions:
        v = report.versions
        print_text(f"Slurm {v['slurm']} ({v['slurm_from']}), headers {v['headers']}, nvrx-hpc {v['nvrx_hpc']}")
    width = max((len(a.action) for a in report.actions), default=0)
    for action in report.actions:
        print_text(f"{action.action.ljust(width)}  {action.path}" + (f"  ({action.detail})" if action.detail else ""))
    for note in report.notes:
        print_text(f"note: {note}")
    if report.slurm_conf_lines:
        print_text("\nslurm.conf still needs (then `scontrol reconfigure`; restart slurmd for the plugin):")
        for line in report.slurm_conf_lines:
            print_text(f"  {line}")
    elif not remove:
        print_text("\nslurm.conf already has every line site mode needs")


@app.command("check")
def check_cmd(prefix: Prefix = None, slurm_etc: SlurmEtc = None, as_json: JsonOption = False) -> None:
    """Check this node: plugin present and loadable, Prolog/Epilog configured, versions agree, socket and
    burst-buffer directories, NVML. Exits 69 when a line fails."""
    lines = run_checks(SitePaths.build(prefix, slurm_etc))
    failed = any(line.status is Status.FAIL for line in lines)
    if as_json:
        print_json({"ok": not failed, "checks": [line.to_dict() for line in lines]})
    else:
        width = max(len(line.name) for line in lines)
        for line in lines:
            print_text(f"{line.status.value:<4}  {line.name.ljust(width)}  {line.detail}")
            if line.fix and line.status is not Status.OK:
                print_text(f"{'':<4}  {''.ljust(width)}  fix: {line.fix}")
    if failed:
        raise typer.Exit(int(ExitCode.UNAVAILABLE))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="site")
