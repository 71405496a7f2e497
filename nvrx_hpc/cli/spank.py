"""`nvrx-hpc spank listen`: receive what the SPANK plugin sends, as a node agent would (debugging, demo)."""

from __future__ import annotations

import threading
import time

import typer

from nvrx_hpc.cli._output import print_json_line
from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.slurm.hostlist import expand
from nvrx_hpc.slurm.spank_listener import SpankListener
from nvrx_hpc.slurm.spank_messages import StepEnd

app = typer.Typer(help="Tools around the SPANK plugin.")


@app.command()
def listen(
    socket: str = typer.Option(..., "--socket", help="Socket path template, %n = node name (e.g. /tmp/s/%n.sock)."),
    nodes: str = typer.Option(..., "--nodes", help="Nodes to listen for, as a hostlist: n[1-2]."),
    timeout: float = typer.Option(60.0, "--timeout", min=0.1, help="Give up after this many seconds."),
    steps: int = typer.Option(
        0, "--steps", min=0, help="Stop once every node ended this many job steps (0: run until --timeout)."
    ),
) -> None:
    """Print every message from the plugin as one JSON line on stdout."""
    names = expand(nodes)
    if "%n" not in socket and len(names) > 1:
        raise ConfigError(f"--socket {socket!r} has no %n, so all {len(names)} nodes would share one socket")
    lock = threading.Lock()
    ended: dict[str, int] = dict.fromkeys(names, 0)
    done = threading.Event()

    def on_message(node: str, message) -> None:
        with lock:
            print_json_line({"socket": node, **message.model_dump()})
            if isinstance(message, StepEnd) and message.step != "batch":
                ended[node] += 1
                if steps and all(count >= steps for count in ended.values()):
                    done.set()

    with SpankListener.for_nodes(socket, names, on_message):
        typer.echo(f"listening for {', '.join(names)} on {socket}", err=True)
        deadline = time.monotonic() + timeout
        while not done.wait(0.1) and time.monotonic() < deadline:
            pass
    if steps and not done.is_set():
        typer.echo(f"timed out after {timeout:g} s; step ends seen per node: {ended}", err=True)
        raise typer.Exit(int(ExitCode.UNAVAILABLE))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="spank")
