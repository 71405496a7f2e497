"""`nvrx-hpc ckpt ls|verify|inspect|scavenge`: look at, check and rescue checkpoints on disk."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer

from nvrx_hpc.cli._output import JsonOption, print_json, print_table, print_text, progress_bar
from nvrx_hpc.core.exit_codes import ExitCode

app = typer.Typer(help="Checkpoints in burst buffers and the shared directory: list, verify, inspect, scavenge.",
                  no_args_is_help=True)

BbDirs = Annotated[
    list[str] | None,
    typer.Option("--bb-dir", help="Burst-buffer directory (repeatable; globs allowed) [default: $NVRX_BB_DIR].",
                 show_default=False),
]
Shared = Annotated[Path | None, typer.Option("--shared-dir", help="Shared directory of drained versions.")]
Step = Annotated[int | None, typer.Option("--step", help="Version to use [default: the newest committed].")]


def _dirs(bb_dirs: list[str] | None) -> list[Path]:
    from nvrx_hpc.ckpt.catalog import expand_dirs

    patterns = bb_dirs or ([os.environ["NVRX_BB_DIR"]] if os.environ.get("NVRX_BB_DIR") else [])
    return expand_dirs(patterns)


@app.command("ls")
def ls(bb_dir: BbDirs = None, shared_dir: Shared = None, json_output: JsonOption = False) -> None:
    """List every version found, newest first: status, scheme, size, copies, whether it is in shared storage."""
    from nvrx_hpc.ckpt.catalog import list_versions

    rows = [asdict(r) for r in list_versions(_dirs(bb_dir), shared_dir)]
    cols = ["step", "status", "scheme", "ranks", "size_mib", "shards", "replicas", "parities", "in_shared", "created"]
    print_table(rows, cols, json_output)


@app.command()
def verify(
    bb_dir: BbDirs = None, shared_dir: Shared = None, step: Step = None, json_output: JsonOption = False
) -> None:
    """Read every copy of a version and check its checksums; exit 69 when it cannot be restored."""
    from nvrx_hpc.ckpt.catalog import verify_version

    with progress_bar(not json_output, "verifying") as progress:
        result = verify_version(_dirs(bb_dir), shared_dir, step, progress)
    if json_output:
        print_json(asdict(result))
    else:
        rows = [asdict(c) for c in result.checks]
        print_table(rows, ["rank", "kind", "ok", "reason", "path"], False, title=f"step {result.step}")
        print_text(result.message)
    if not result.restorable:
        raise typer.Exit(int(ExitCode.UNAVAILABLE))


@app.command()
def inspect(bb_dir: BbDirs = None, shared_dir: Shared = None, step: Step = None,
            rank: Annotated[int, typer.Option("--rank", help="Whose tensor table to show.")] = 0,
            json_output: JsonOption = False) -> None:
    """Show a version's manifest and one rank's tensors (path, dtype, shape, bytes, checksum)."""
    from nvrx_hpc.ckpt.catalog import inspect_version

    info = inspect_version(_dirs(bb_dir), shared_dir, step, rank)
    if json_output:
        print_json(info)
        return
    print_text(f"step {info['step']}: scheme {info['scheme']}, {info['world_size']} ranks, "
               f"{info['nbytes'] / (1 << 20):.1f} MiB, job {info['job_id'] or '-'}")
    print_table(info["shards"], ["rank", "domain", "nbytes", "ntensors", "digest"], False, title="shards")
    if info["tensors"] is None:
        print_text(f"no copy of rank {rank}'s shard found here")
    else:
        print_table(info["tensors"], ["path", "dtype", "shape", "nbytes", "xxh3"], False,
                    title=f"rank {rank} tensors ({info['tensors_from']})")


@app.command()
def scavenge(bb_dir: BbDirs = None,
             shared_dir: Annotated[Path, typer.Option("--shared-dir", help="Where to copy the version.")] = ...,
             step: Step = None, json_output: JsonOption = False) -> None:
    """Copy the newest version not yet in shared storage there (end of a batch script); exit 69 if incomplete."""
    from nvrx_hpc.ckpt.drain import scavenge as run_scavenge

    with progress_bar(not json_output, "scavenging") as progress:
        result = run_scavenge(_dirs(bb_dir), shared_dir, step=step, progress=progress)
    if json_output:
        print_json(asdict(result))
    else:
        print_text(result.message)
    if result.step is not None and not result.complete:
        raise typer.Exit(int(ExitCode.UNAVAILABLE))


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="ckpt")
