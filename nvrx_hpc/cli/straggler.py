"""`nvrx-hpc straggler set|show`: change the straggler settings of a running job, see its scores."""

from __future__ import annotations

from pathlib import Path

import typer

from nvrx_hpc.cli._output import JsonOption, print_json, print_table, print_text
from nvrx_hpc.core.errors import NvrxError

app = typer.Typer(help="Straggler detection of a job under `nvrx-hpc run`: settings and flagged ranks.",
                  no_args_is_help=True)

RunDir = typer.Option(None, "--run-dir", help="Run directory [from Slurm's WorkDir].")


def _directory(job: str, run_dir: Path | None) -> Path:
    from nvrx_hpc.cli.run import run_dir_of

    return run_dir or run_dir_of(job)


@app.command("set")
def set_(
    job: str = typer.Argument(..., help="Job id."),
    threshold: float | None = typer.Option(None, "--threshold", help="Flag below this score, in (0, 1]."),
    enabled: bool | None = typer.Option(None, "--on/--off", help="Score and flag, or not."),
    exclude: bool | None = typer.Option(
        None, "--exclude/--no-exclude", help="Exclude a flagged rank's node at the next restart."
    ),
    run_dir: Path | None = RunDir,
    as_json: JsonOption = False,
) -> None:
    """Change the settings while the job runs; the launcher applies them from its next window."""
    from nvrx_hpc.straggler.control import write_control

    directory = _directory(job, run_dir)
    if not directory.is_dir():
        raise NvrxError(f"no run directory {directory}", hint="is the job running under `nvrx-hpc run`? see --run-dir")
    now = write_control(directory, enabled=enabled, threshold=threshold, exclude_at_restart=exclude)
    if as_json:
        print_json(now)
    else:
        print_text("straggler settings of job " + job + ": " + (", ".join(f"{k}={v}" for k, v in now.items()) or
                                                                "configuration defaults"))


@app.command()
def show(job: str = typer.Argument(..., help="Job id."), run_dir: Path | None = RunDir,
         as_json: JsonOption = False) -> None:
    """The settings in force, and every rank's last score (flagged ranks first)."""
    from nvrx_hpc.launcher.status import read_status

    directory = _directory(job, run_dir)
    state = read_status(directory)
    if state is None:
        raise NvrxError(f"no status in {directory}", hint="is the job running under `nvrx-hpc run`? see --run-dir")
    view = dict(state.get("stragglers") or {})
    view["scores"] = _scores(directory / str(view.get("scores_file") or "stragglers.json"))
    if as_json:
        print_json(view)
        return
    print_text(f"enabled {view.get('enabled')}  threshold {view.get('threshold')}  window {view.get('window_s')} s"
               f"  windows scored {view.get('windows_scored')}  exclude at restart {view.get('exclude_at_restart')}")
    scores = view.get("scores") or {}
    rows = [{"rank": r, **v} for r, v in sorted(scores.items(), key=lambda kv: (not kv[1]["flagged"], int(kv[0])))]
    print_table(rows, ["rank", "node", "flagged", "kind", "score", "self_score", "comm_score", "below"], False)


def _scores(path: Path) -> dict:
    """Every rank's last scores, as the launcher wrote them after its last window ({} before the first)."""
    import json

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data.get("scores") or {} if isinstance(data, dict) else {}


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="straggler")
