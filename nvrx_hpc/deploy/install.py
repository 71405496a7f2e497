"""`nvrx-hpc site install`: build the plugin against this node's Slurm, write its plugstack entry, the
Prolog/Epilog wrappers and a commented config, and remember exactly what was written (a manifest), so
that a rerun changes only what differs and `--uninstall` removes only what it installed."""

from __future__ import annotations

import hashlib
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import nvrx_hpc
from nvrx_hpc.core.config import load_config
from nvrx_hpc.core.errors import NvrxError, SlurmError
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.core.resources import spank_sources
from nvrx_hpc.deploy import render
from nvrx_hpc.deploy.paths import SitePaths
from nvrx_hpc.slurm.commands import show_config
from nvrx_hpc.slurm.runner import CommandRunner
from nvrx_hpc.slurm.spank_build import build_plugin, header_version, installed_slurm_version, require_same_release

__all__ = ["SiteError", "Action", "InstallReport", "install", "uninstall", "read_manifest", "DEFAULT_INCLUDE"]

DEFAULT_INCLUDE = Path("/usr/include")


class SiteError(NvrxError):
    """site install/uninstall cannot proceed as asked (not root, nothing installed, a file in the way)."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class Action:
    """One file: `written`, `replaced`, `unchanged`, `kept` (exists, not ours to overwrite), `removed`, ..."""

    action: str
    path: str
    detail: str = ""


@dataclass
class InstallReport:
    dry_run: bool
    actions: list[Action] = field(default_factory=list)
    slurm_conf_lines: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    versions: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {
            "dry_run": self.dry_run,
            "files": [a.__dict__ for a in self.actions],
            "slurm_conf_lines": self.slurm_conf_lines,
            "notes": self.notes,
            "versions": self.versions,
        }


@dataclass(frozen=True)
class _Planned:
    path: Path
    data: bytes | None  # None: only known after the build (dry run)
    mode: int
    what: str
    keep_existing: bool = False  # an admin's file (config.toml) is never overwritten


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _need_root(paths: SitePaths, dry_run: bool) -> None:
    if not dry_run and paths.prefix is None and os.geteuid() != 0:
        raise SiteError(
            "site install writes under /etc and /usr/local: run it as root",
            hint="sudo nvrx-hpc site install; or --dry-run to see the files; or --prefix DIR to stage them",
        )


def read_manifest(paths: SitePaths) -> dict:
    """What an earlier install wrote: {"files": {path: sha256}, "dirs": [...], ...}; empty when none."""
    try:
        data = json.loads(paths.manifest.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, ValueError) as exc:
        raise SiteError(f"cannot read the install manifest {paths.manifest}: {exc}",
                        hint="remove the files listed in docs/site-install.md by hand") from None
    return data if isinstance(data, dict) else {}


def _slurm_config(runner: CommandRunner) -> dict[str, str]:
    try:
        return show_config(runner, timeout=10)
    except SlurmError:
        return {}


def _plan(paths: SitePaths, plugin_bytes: bytes | None, python: str, version: str, notes: list[str]) -> list[_Planned]:
    resolved = load_config(path=paths.config) if paths.config.is_file() else load_config()
    text = {
        "prolog": render.hook_wrapper("prolog", python, paths, version),
        "epilog": render.hook_wrapper("epilog", python, paths, version),
    }
    planned = [
        _Planned(paths.plugin, plugin_bytes, 0o755, "SPANK plugin"),
        _Planned(paths.plugstack_entry, render.plugstack_entry(paths, resolved.config, version).encode(), 0o644,
                 "plugstack entry"),
        _Planned(paths.prolog, text["prolog"].encode(), 0o755, "Prolog wrapper"),
        _Planned(paths.epilog, text["epilog"].encode(), 0o755, "Epilog wrapper"),
        _Planned(paths.config, render.commented_config(version).encode(), 0o644, "site config", keep_existing=True),
    ]
    include = render.plugstack_include(paths)
    if not paths.plugstack_conf.exists():
        planned.append(_Planned(paths.plugstack_conf, include.encode(), 0o644, "plugstack.conf"))
    elif include.strip() not in paths.plugstack_conf.read_text(errors="replace"):
        notes.append(f"add this line to {paths.plugstack_conf}: {include.strip()}")
    return planned


def _write(planned: _Planned, created_dirs: list[str]) -> str:
    """Write one file atomically (a running slurmstepd keeps the old plugin's inode); returns the action."""
    data = planned.data or b""
    missing = [p for p in reversed(planned.path.parents) if not p.exists()]
    planned.path.parent.mkdir(parents=True, exist_ok=True)
    created_dirs.extend(str(p) for p in missing)
    try:
        old = planned.path.read_bytes()
    except FileNotFoundError:
        old = None
    if old == data:
        return "unchanged"
    if old is not None and planned.keep_existing:
        return "kept"
    fd, tmp = tempfile.mkstemp(dir=planned.path.parent, prefix=f".{planned.path.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, planned.mode)
        os.replace(tmp, planned.path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return "written" if old is None else "replaced"


def _save_manifest(paths: SitePaths, old: dict, record: dict) -> str:
    if {k: v for k, v in old.items() if k != "time"} == record:
        return "unchanged"
    paths.manifest.parent.mkdir(parents=True, exist_ok=True)
    paths.manifest.write_text(json.dumps({**record, "time": time.time()}, indent=2, sort_keys=True) + "\n")
    return "written"


def install(
    paths: SitePaths,
    *,
    dry_run: bool = False,
    include_dir: Path = DEFAULT_INCLUDE,
    python: str | None = None,
    runner: CommandRunner | None = None,
) -> InstallReport:
    """Install (or with dry_run, describe) every file; idempotent. Raises BuildError on a header mismatch."""
    _need_root(paths, dry_run)
    runner = runner or CommandRunner()
    version = nvrx_hpc.__version__
    python = python or sys.executable
    report = InstallReport(dry_run=dry_run)
    running, source = installed_slurm_version(runner)
    headers = header_version(include_dir)
    report.versions = {"slurm": str(running), "slurm_from": source, "headers": str(headers), "nvrx_hpc": version,
                       "python": python}
    require_same_release(headers, running, include_dir)
    with tempfile.TemporaryDirectory(prefix="nvrx-spank-build-") as build_dir:
        plugin_bytes = None
        if not dry_run:
            plugin_bytes = build_plugin(Path(build_dir), version=version, runner=runner,
                                        include_dir=include_dir).read_bytes()
        planned = _plan(paths, plugin_bytes, python, version, report.notes)
        manifest = read_manifest(paths)
        files: dict[str, str] = dict(manifest.get("files", {}))
        dirs: list[str] = list(manifest.get("dirs", []))
        if dry_run:
            for item in planned:
                detail = item.what if item.data is not None else (
                    f"{item.what}, built from {spank_sources()} against {include_dir}/slurm (Slurm {headers})")
                action = "would keep" if item.path.exists() and item.keep_existing else "would write"
                report.actions.append(Action(action, str(item.path), detail))
            report.actions.append(Action("would write", str(paths.manifest), "install manifest"))
        else:
            try:
                for item in planned:
                    action = _write(item, dirs)
                    report.actions.append(Action(action, str(item.path), item.what))
                    if action != "kept":
                        files[str(item.path)] = _sha(item.data or b"")
            finally:  # even after a failed write, so that --uninstall still finds what was written
                record = {"nvrx_hpc": version, "slurm": str(running), "headers": str(headers), "python": python,
                          "plugin": str(paths.plugin), "files": files, "dirs": list(dict.fromkeys(dirs))}
                action = _save_manifest(paths, manifest, record)
            report.actions.append(Action(action, str(paths.manifest), "install manifest"))
    report.slurm_conf_lines = render.slurm_conf_lines(paths, _slurm_config(runner))
    return report


def uninstall(paths: SitePaths, *, dry_run: bool = False) -> InstallReport:
    """Remove exactly the files the manifest lists, unless an admin changed them since; then empty dirs."""
    _need_root(paths, dry_run)
    manifest = read_manifest(paths)
    if not manifest:
        raise SiteError(f"nothing to uninstall: no manifest at {paths.manifest}",
                        hint="pass the same --prefix as at install time")
    report = InstallReport(dry_run=dry_run)
    verb = "would remove" if dry_run else "removed"
    for name, digest in sorted(manifest.get("files", {}).items()):
        path = Path(name)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            report.actions.append(Action("already gone", name))
            continue
        if _sha(data) != digest:
            report.actions.append(Action("kept", name, "changed since install; remove it by hand if unwanted"))
            continue
        if not dry_run:
            path.unlink()
        report.actions.append(Action(verb, name))
    if not dry_run:
        paths.manifest.unlink()
    report.actions.append(Action(verb, str(paths.manifest), "install manifest"))
    for name in sorted(manifest.get("dirs", []), key=lambda d: d.count("/"), reverse=True):
        directory = Path(name)
        if dry_run or not directory.is_dir():
            continue
        try:
            directory.rmdir()  # only when empty: an admin's own files keep it
            report.actions.append(Action(verb, name, "directory"))
        except OSError:
            report.actions.append(Action("kept", name, "directory not empty"))
    report.notes.append("remove the Prolog=, Epilog= and nvrx plugstack lines from slurm.conf if you added them")
    return report
