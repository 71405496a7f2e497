"""Helpers shared by the attribution unit tests."""

from __future__ import annotations

from pathlib import Path


def write_run(tmp_path: Path, files: dict[str, list[str]]) -> Path:
    """A run directory holding `files` (relative path -> lines), as a user would hand it to attribution."""
    run = tmp_path / "run"
    for name, lines in files.items():
        (run / name).parent.mkdir(parents=True, exist_ok=True)
        (run / name).write_text("\n".join(lines) + "\n")
    return run


def verdict_of(tmp_path: Path, files: dict[str, list[str]]):
    """The verdict attribution gives on a run directory holding `files`."""
    from nvrx_hpc.attribution.analyze import analyze_run

    return analyze_run(write_run(tmp_path, files)).verdict
