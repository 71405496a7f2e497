"""Output for every command: rows as a rich table, lines of text, or with --json the same facts as JSON alone
on stdout; errors as one panel on stderr (`error:` and `hint:` lines). Commands print through here only."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

__all__ = [
    "JsonOption", "print_table", "print_json", "print_json_line", "print_result", "print_text", "print_error",
    "progress_bar",
]  # fmt: skip

JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON alone on stdout.")]


def print_json(obj: Any) -> None:
    """`obj` as one JSON document on stdout and nothing else (paths and other objects become strings)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


def print_json_line(obj: Any) -> None:
    """`obj` as one compact JSON line on stdout, for commands that stream records."""
    sys.stdout.write(json.dumps(obj, sort_keys=True, default=str) + "\n")
    sys.stdout.flush()


def print_text(line: str = "", *, nl: bool = True) -> None:
    """One line of plain text on stdout (`nl=False`: a text that carries its own newlines)."""
    typer.echo(line, nl=nl)


def print_result(obj: Any, json_output: bool, lines: Sequence[str] | str) -> None:
    """A command's result: `obj` as JSON with --json, otherwise `lines` of plain text."""
    if json_output:
        print_json(obj)
        return
    for line in [lines] if isinstance(lines, str) else lines:
        print_text(line)


def print_table(
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[str],
    json_output: bool,
    *,
    title: str | None = None,
) -> None:
    """Print `rows` (mappings keyed by `columns`).

    With `json_output`: a JSON array of objects holding just those columns. Otherwise a rich table
    whose headers are the column names; values print as plain text (never as rich markup), None as "-".
    Off a terminal the table is not wrapped to 80 columns, so that it can be grepped.
    """
    if json_output:
        print_json([{col: row.get(col) for col in columns} for row in rows])
        return
    console = Console()
    if not console.is_terminal:
        console = Console(width=1000, no_color=True, highlight=False)
    table = Table(title=title, title_justify="left", show_edge=False, highlight=False)
    for col in columns:
        table.add_column(col.replace("_", " "), overflow="fold")
    for row in rows:
        table.add_row(*(Text("-" if row.get(col) is None else str(row.get(col))) for col in columns))
    console.print(table)


@contextmanager
def progress_bar(enabled: bool, what: str) -> Iterator[Callable[[str, int, int], None] | None]:
    """A progress bar on stderr for long reads; yields the callback (None when disabled)."""
    if not enabled:
        yield None
        return
    with Progress(TextColumn(what), BarColumn(), DownloadColumn(), console=Console(stderr=True), transient=True) as p:
        task = p.add_task(what, total=None)
        yield lambda _phase, done, total: p.update(task, completed=done, total=total)


def print_error(message: str, hint: str | None = None) -> None:
    """The errors panel on stderr: `error: <what failed>` and, where there is one, `hint: <what to do next>`."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    if hint:
        typer.secho(f"hint: {hint}", err=True)
