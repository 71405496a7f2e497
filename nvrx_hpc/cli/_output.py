"""Output for every command: rows as a rich table on stdout, or with --json as JSON alone on stdout."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["print_table", "print_json"]


def print_json(obj: Any) -> None:
    """`obj` as one JSON document on stdout and nothing else (paths and other objects become strings)."""
    sys.stdout.write(json.dumps(obj, indent=2, default=str) + "\n")
    sys.stdout.flush()


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
