"""`nvrx-hpc config`: show the effective configuration and where each value came from, or check it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from nvrx_hpc.cli._output import JsonOption, print_json, print_result, print_table
from nvrx_hpc.core.config import load_config, parse_overrides

app = typer.Typer(
    help="Show or check the configuration (defaults < site TOML < NVRX_<SECTION>__<FIELD> env < flags).",
    no_args_is_help=True,
)

ConfigPath = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="Site TOML to read instead of $NVRX_CONFIG or /etc/nvrx-hpc/config.toml; it must exist.",
        show_default=False,
    ),
]


@app.command()
def show(
    config: ConfigPath = None,
    json_output: JsonOption = False,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a key: --set cluster.nodes=8 (repeatable).", show_default=False),
    ] = None,
) -> None:
    """Print every key, its effective value and its source (default, file:PATH, env:NAME or flag)."""
    resolved = load_config(path=config, overrides=parse_overrides(set_ or []))
    if json_output:
        print_json(resolved.to_dict())
        return
    rows = [{"key": key, **entry} for key, entry in resolved.to_dict().items()]
    title = f"config file: {resolved.file}" if resolved.file else "config file: none (defaults)"
    print_table(rows, ["key", "value", "source"], json_output=False, title=title)


@app.command()
def check(config: ConfigPath = None, json_output: JsonOption = False) -> None:
    """Validate the file and NVRX_* variables; exit 0 with "config ok", or 2 with what is wrong."""
    resolved = load_config(path=config)
    changed = sum(1 for source in resolved.sources.values() if source != "default")
    where = str(resolved.file) if resolved.file else "no config file"
    data = {"ok": True, "file": str(resolved.file) if resolved.file else None, "keys_set": changed}
    print_result(data, json_output, f"config ok ({where}; {changed} of {len(resolved.sources)} keys set)")


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="config")
