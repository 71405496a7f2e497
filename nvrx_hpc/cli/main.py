"""Entry point: assembles the command groups and turns NvrxError into a message, a hint and an exit code.

One convention: every module of `nvrx_hpc.cli` has `register(app)`, which adds its command or its group."""

from __future__ import annotations

import logging
import os
import sys

import typer

from nvrx_hpc import __version__
from nvrx_hpc.cli import attribute, ckpt, cluster, config, health, hooks, node, serve, site, spank, straggler, submit
from nvrx_hpc.cli import run as run_cli
from nvrx_hpc.cli._output import print_error, print_text
from nvrx_hpc.core.config import load_config
from nvrx_hpc.core.errors import NvrxError
from nvrx_hpc.core.exit_codes import ExitCode

app = typer.Typer(
    name="nvrx-hpc",
    help="Keeps large PyTorch training jobs alive on Slurm clusters.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,  # help texts show defaults in brackets (`Partition [the cluster's default].`), not markup
)
for _module in (cluster, config, spank, ckpt, node, site, hooks, health, run_cli, attribute, serve, submit, straggler):
    _module.register(app)

_state = {"debug": False}


def _version(value: bool) -> None:
    if value:
        print_text(f"nvrx-hpc {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: bool = typer.Option(False, "--debug", help="Verbose logs and full tracebacks.", envvar="NVRX_DEBUG"),
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True, help="Print the version."),
) -> None:
    _state["debug"] = debug
    logging.basicConfig(format="nvrx-hpc: %(levelname)s %(name)s: %(message)s", stream=sys.stderr)
    logging.getLogger().setLevel(logging.DEBUG if debug else _configured_level())


def _configured_level() -> str:
    """`logging.level`; a bad config is left to the command, which reports it (or fails open in a hook).
    Read silently: what loading the config logs, the command's own load logs at the level read here."""
    logging.disable(logging.CRITICAL)
    try:
        return load_config().config.logging.level
    except NvrxError:
        return "WARNING"
    finally:
        logging.disable(logging.NOTSET)


def run() -> None:
    """Console-script entry: exit codes follow nvrx_hpc.core.exit_codes.ExitCode."""
    try:
        # Without standalone mode click returns typer.Exit's code instead of exiting.
        code = app(standalone_mode=False)
    except NvrxError as exc:
        if _state["debug"] or os.environ.get("NVRX_TRACEBACK"):
            raise
        print_error(exc.message, exc.hint)
        sys.exit(int(exc.exit_code))
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except typer.Abort:
        typer.echo("aborted", err=True)
        sys.exit(int(ExitCode.USAGE))
    except Exception as exc:  # click's usage errors and our bugs
        # Typer may vendor its own click, so recognise usage errors by shape, not by class.
        if callable(getattr(exc, "show", None)) and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            sys.exit(int(ExitCode.USAGE))
        if _state["debug"]:
            raise
        if isinstance(exc, ModuleNotFoundError) and exc.name:  # an install without one of the package's requirements
            print_error(f"this command needs the Python package '{exc.name}', which is not installed",
                        f"install it into this environment (pip install {exc.name}; nvrx-hpc requires torch>=2.4)")
            sys.exit(int(ExitCode.UNAVAILABLE))
        print_error(f"internal error: {type(exc).__name__}: {exc}", "rerun with --debug for the traceback; report it")
        sys.exit(int(ExitCode.INTERNAL))
    sys.exit(code if isinstance(code, int) else 0)
