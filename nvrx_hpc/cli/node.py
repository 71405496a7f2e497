"""`nvrx-hpc node list|drain|undrain|recheck`: nodes and the drains nvrx-hpc owns (reason `nvrx:`)."""

from __future__ import annotations

import os
import sys

import typer

from nvrx_hpc.cli._output import JsonOption, print_result, print_table
from nvrx_hpc.core.config import load_config
from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.health.api import NotOurDrain
from nvrx_hpc.health.drain import REASON_PREFIX, drain_node, is_ours, undrain_node
from nvrx_hpc.slurm.api import SlurmBackend
from nvrx_hpc.slurm.backend import get_backend

app = typer.Typer(help="Slurm nodes and the drains nvrx-hpc owns (reasons starting with 'nvrx:').")

_YES = typer.Option(False, "--yes", "-y", help="Do it without asking (required off a terminal).")


def _slurm() -> SlurmBackend:
    config = load_config().config
    return get_backend(config.slurm.backend, timeout=config.slurm.command_timeout_s)


def _confirm(what: str, yes: bool) -> None:
    if yes:
        return
    if not sys.stdin.isatty():
        raise ConfigError(f"refusing to {what} without --yes (not on a terminal)", hint="rerun with --yes")
    typer.confirm(f"{what}?", abort=True)


@app.command("list")
def list_nodes(as_json: JsonOption = False) -> None:
    """Every node with its state and reason; `owner` is nvrx for drains nvrx-hpc made."""
    rows = []
    for n in _slurm().list_nodes():
        owner = ("nvrx" if is_ours(n.reason) else "other") if (n.drained or n.down) else ""
        rows.append({"node": n.name, "state": n.state, "flags": ",".join(sorted(n.flags)), "owner": owner,
                     "reason": n.reason or ""})  # fmt: skip
    print_table(rows, ["node", "state", "flags", "owner", "reason"], as_json)


@app.command()
def drain(
    nodes: list[str] = typer.Argument(..., help="Node names."),
    reason: str = typer.Option(..., "--reason", "-r", help="Why; stored as 'nvrx: manual: <reason>'."),
    yes: bool = _YES,
    as_json: JsonOption = False,
) -> None:
    """Drain nodes with an nvrx-owned reason; a node drained by someone else keeps its reason."""
    text = reason.strip()
    if not text:
        raise ConfigError("--reason must not be empty", hint="say why, e.g. --reason 'GPU 3 hot'")
    full = text if text.startswith(REASON_PREFIX) else f"{REASON_PREFIX} manual: {text}"
    _confirm(f"drain {', '.join(nodes)} ({full})", yes)
    slurm = _slurm()
    rows = [drain_node(slurm, node, full).to_dict() for node in nodes]
    print_result(rows, as_json, [f"{r['node']}: {r['action']}" + (f" ({r['reason']})" if r["reason"] else "")
                                 + (f": {r['error']}" if r["error"] else "") for r in rows])  # fmt: skip
    if any(row["action"] == "failed" for row in rows):
        raise typer.Exit(int(ExitCode.UNAVAILABLE))


@app.command()
def undrain(
    nodes: list[str] = typer.Argument(..., help="Node names."), yes: bool = _YES, as_json: JsonOption = False
) -> None:
    """Resume nodes nvrx-hpc drained; refuses any node drained for another reason (exit 2)."""
    _confirm(f"undrain {', '.join(nodes)}", yes)
    slurm = _slurm()
    refused: list[NotOurDrain] = []
    rows = []
    for node in nodes:
        try:
            rows.append(undrain_node(slurm, node).to_dict())
        except NotOurDrain as exc:
            refused.append(exc)
            rows.append({"node": node, "action": "refused", "reason": None, "error": exc.message})
    print_result(rows, as_json, [f"{r['node']}: {r['action']}" + (f" (was: {r['reason']})" if r["action"] == "resumed"
                                 else "") for r in rows if r["action"] != "refused"])  # fmt: skip
    if refused:
        raise refused[0] if len(refused) == 1 else NotOurDrain(
            "; ".join(e.message for e in refused), hint=refused[0].hint
        )


@app.command()
def recheck(
    undrain_on_pass: bool | None = typer.Option(
        None, "--undrain/--no-undrain", help="Resume an nvrx drain when all checks pass [default: policy]."
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Check only; never drain or resume."),
    as_json: JsonOption = False,
) -> None:
    """On the node itself (e.g. as HealthCheckProgram): quick checks, drain on fatal, undrain on pass."""
    from nvrx_hpc.health.gate import gate

    outcome = gate("recheck", dict(os.environ), dry_run=dry_run, undrain=undrain_on_pass)
    verdict = outcome.report.verdict.value if outcome.report else "-"
    text = f"{outcome.node}: {verdict}, {outcome.action}" + (f" ({outcome.reason})" if outcome.reason else "")
    print_result(outcome.to_dict(), as_json, text + (f": {outcome.detail}" if outcome.detail else ""))
    raise typer.Exit(int(outcome.exit_code))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="node")
