"""`nvrx-hpc site check`: is this node set up for site mode, and do Slurm, the plugin and the package agree?

Each check returns one line, ok / warn / fail, with what it saw and, when not ok, the fix. Checks never
raise: a check that cannot run says why in its own line. Slurm is asked only through the one runner.
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

import nvrx_hpc
from nvrx_hpc.core.config import NvrxConfig, load_config
from nvrx_hpc.core.errors import NvrxError
from nvrx_hpc.deploy.install import read_manifest
from nvrx_hpc.deploy.paths import SitePaths
from nvrx_hpc.slurm.api import SlurmVersion
from nvrx_hpc.slurm.commands import show_config, srun_help
from nvrx_hpc.slurm.runner import CommandRunner
from nvrx_hpc.slurm.spank_build import installed_slurm_version, release

__all__ = ["Status", "CheckLine", "run_checks"]

_INSTALL = "run `nvrx-hpc site install` as root on this node"


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"


@dataclass(frozen=True)
class CheckLine:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status.value, "detail": self.detail, "fix": self.fix}


@dataclass
class _Facts:
    """What several checks share, gathered once."""

    paths: SitePaths
    runner: CommandRunner
    manifest: dict
    config: NvrxConfig | None = None
    config_file: Path | None = None
    config_error: str = ""
    slurm: SlurmVersion | None = None
    slurm_error: str = ""
    slurm_conf: dict[str, str] | None = None
    slurm_conf_error: str = ""


def _gather(paths: SitePaths, runner: CommandRunner) -> _Facts:
    try:
        manifest = read_manifest(paths)
    except NvrxError:
        manifest = {}
    facts = _Facts(paths, runner, manifest)
    try:
        resolved = load_config(path=paths.config) if paths.config.is_file() else load_config()
        facts.config, facts.config_file = resolved.config, resolved.file
    except NvrxError as exc:
        facts.config_error = exc.message
    try:
        facts.slurm, _ = installed_slurm_version(runner)
    except NvrxError as exc:
        facts.slurm_error = exc.message
    try:
        facts.slurm_conf = show_config(runner, timeout=15)
    except NvrxError as exc:
        facts.slurm_conf_error = exc.message
    return facts


def _package(f: _Facts) -> CheckLine:
    where = Path(nvrx_hpc.__file__).parent
    return CheckLine("package", Status.OK, f"nvrx-hpc {nvrx_hpc.__version__} in {where}")


def _config(f: _Facts) -> CheckLine:
    if f.config is None:
        return CheckLine("config", Status.FAIL, f.config_error, f"fix {f.paths.config}; `nvrx-hpc config check`")
    where = f.config_file or "no site file, defaults"
    return CheckLine("config", Status.OK, f"valid ({where})")


def _slurm(f: _Facts) -> CheckLine:
    if f.slurm is None:
        return CheckLine("slurm", Status.FAIL, f.slurm_error, "install Slurm's client commands (slurm-client)")
    if f.slurm_conf is None:
        return CheckLine("slurm", Status.FAIL, f"Slurm {f.slurm} installed, but {f.slurm_conf_error}",
                         "is slurmctld up and SLURM_CONF right? `scontrol ping`")
    running = f.slurm_conf.get("SLURM_VERSION", "?")
    return CheckLine("slurm", Status.OK, f"Slurm {f.slurm} here, controller runs {running}")


def _plugstack_conf(f: _Facts) -> Path:
    """The plugstack.conf Slurm reads (that of a staged install under --prefix)."""
    if f.paths.prefix is not None:
        return f.paths.plugstack_conf
    return Path((f.slurm_conf or {}).get("PlugStackConfig") or f.paths.plugstack_conf)


def _plugstack_plugins(conf: Path, depth: int = 0) -> list[str]:
    """Every plugin path a plugstack.conf (and the files it includes) lists."""
    try:
        lines = conf.read_text(errors="replace").splitlines()
    except OSError:
        return []
    found: list[str] = []
    for line in lines:
        words = line.split("#", 1)[0].split()
        if len(words) >= 2 and words[0] == "include" and depth < 3:
            for path in sorted(glob.glob(words[1])):
                found += _plugstack_plugins(Path(path), depth + 1)
        elif len(words) >= 2 and words[0] in ("required", "optional"):
            found.append(words[1])
    return found


def _plugin_path(f: _Facts) -> Path:
    """The manifest's plugin; without one (installed by hand), the nvrx plugin plugstack names; else the default."""
    if f.manifest.get("plugin"):
        return Path(f.manifest["plugin"])
    named = [p for p in _plugstack_plugins(_plugstack_conf(f)) if Path(p).name == "nvrx_spank.so"]
    return Path(named[0]) if named else f.paths.plugin


def _plugin_file(f: _Facts) -> CheckLine:
    plugin = _plugin_path(f)
    if not plugin.is_file():
        return CheckLine("plugin.file", Status.FAIL, f"{plugin} is missing", _INSTALL)
    return CheckLine("plugin.file", Status.OK, f"{plugin} ({plugin.stat().st_size} bytes)")


def _plugstack(f: _Facts) -> CheckLine:
    plugin, conf = str(_plugin_path(f)), _plugstack_conf(f)
    if plugin in _plugstack_plugins(conf):
        return CheckLine("plugin.plugstack", Status.OK, f"{conf} names {plugin}")
    return CheckLine("plugin.plugstack", Status.FAIL, f"{conf} (and what it includes) does not name {plugin}",
                     f"{_INSTALL}; {conf} must `include {f.paths.plugstack_dir}/*.conf`")


def _loadable(f: _Facts) -> CheckLine:
    try:
        done = srun_help(f.runner, timeout=15)
    except NvrxError as exc:
        return CheckLine("plugin.loadable", Status.FAIL, exc.message, "install slurm-client")
    text = done.stdout + done.stderr
    if "--nvrx" in text:
        return CheckLine("plugin.loadable", Status.OK, "srun --help lists --nvrx")
    tail = " ".join(done.stderr.strip().splitlines()[-2:])
    return CheckLine("plugin.loadable", Status.FAIL, f"srun --help does not list --nvrx {tail}".strip(),
                     "srun did not load the plugin: check plugstack.conf and that it was built for this Slurm")


def _hook(kind: str) -> Callable[[_Facts], CheckLine]:
    key = kind.capitalize()

    def check(f: _Facts) -> CheckLine:
        name = kind
        if f.slurm_conf is None:
            return CheckLine(name, Status.FAIL, "cannot read Slurm's config (see the slurm line)", "scontrol ping")
        value = f.slurm_conf.get(key, "")
        wrapper = getattr(f.paths, kind)
        if value in ("", "(null)"):
            return CheckLine(name, Status.FAIL, f"slurm.conf sets no {key}", f"add {key}={wrapper} to slurm.conf")
        try:
            script = Path(value).read_text(errors="replace")
        except OSError as exc:
            return CheckLine(name, Status.WARN, f"{key}={value}, unreadable here: {exc.strerror}",
                             "run site check as root on a compute node")
        if f"nvrx_hpc {kind}" in script or f"nvrx-hpc {kind}" in script:
            return CheckLine(name, Status.OK, f"{key}={value} runs `nvrx-hpc {kind}`")
        return CheckLine(name, Status.WARN, f"{key}={value} does not call nvrx-hpc {kind}",
                         f"call `{wrapper}` from it (pass its exit status on), or set {key}={wrapper}")

    return check


def _prolog_flags(f: _Facts) -> CheckLine:
    flags = (f.slurm_conf or {}).get("PrologFlags", "").replace("(null)", "")
    if "alloc" in flags.lower().split(","):
        return CheckLine("prolog.flags", Status.OK, f"PrologFlags={flags}")
    return CheckLine("prolog.flags", Status.WARN, f"PrologFlags={flags or '(none)'} lacks Alloc: the health gate "
                     "runs only at a node's first step", "add Alloc to PrologFlags in slurm.conf")


def _versions(f: _Facts) -> CheckLine:
    if not f.manifest:
        return CheckLine("versions", Status.WARN, f"no install manifest at {f.paths.manifest}: versions unknown",
                         _INSTALL)
    built, package = f.manifest.get("slurm", "?"), f.manifest.get("nvrx_hpc", "?")
    problems = []
    if f.slurm is not None and not built.startswith(release(f.slurm) + "."):
        problems.append(f"plugin built for Slurm {built}, this node runs {f.slurm}")
    if package != nvrx_hpc.__version__:
        problems.append(f"installed by nvrx-hpc {package}, this is {nvrx_hpc.__version__}")
    plugin = f.manifest.get("plugin", "")
    recorded = f.manifest.get("files", {}).get(plugin)
    if recorded and Path(plugin).is_file() and _sha256(Path(plugin)) != recorded:
        problems.append(f"{plugin} is not the plugin site install built (replaced by hand?)")
    if problems:
        return CheckLine("versions", Status.FAIL, "; ".join(problems),
                         "rerun `nvrx-hpc site install` as root on this node to rebuild the plugin")
    return CheckLine("versions", Status.OK, f"Slurm {f.slurm}, plugin built for {built}, nvrx-hpc {package}")


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _static_dir(template: str) -> Path:
    """The part of a %-template path before its first placeholder: what must exist or be creatable."""
    parts = Path(template).parts
    first = next((i for i, part in enumerate(parts) if "%" in part), len(parts))
    return Path(*parts[:first]) if first else Path("/")


def _usable_dir(name: str, template: str | None) -> CheckLine:
    if template is None:
        return CheckLine(name, Status.FAIL, "no configuration to read it from", "fix the config first")
    base = _static_dir(template)
    if base.is_dir():
        ok = os.access(base, os.W_OK | os.X_OK)
        if ok or (base.stat().st_mode & 0o1777) == 0o1777:
            return CheckLine(name, Status.OK, f"{base} is usable ({template})")
        return CheckLine(name, Status.WARN, f"{base} exists but is not writable by this user ({template})",
                         "run site check as root, or make it writable (the Prolog runs as root)")
    ancestor = next(p for p in base.parents if p.exists())
    if os.access(ancestor, os.W_OK | os.X_OK):
        return CheckLine(name, Status.OK, f"{base} does not exist yet; {ancestor} lets it be created ({template})")
    return CheckLine(name, Status.FAIL, f"{base} does not exist and {ancestor} is not writable ({template})",
                     f"create {base} (root, mode 1777 or per-job by the Prolog), or change the config key")


def _socket_dir(f: _Facts) -> CheckLine:
    return _usable_dir("socket.dir", f.config.agent.socket if f.config else None)


def _bb_dir(f: _Facts) -> CheckLine:
    return _usable_dir("bb.dir", f.config.agent.bb_dir if f.config else None)


def _nvml(f: _Facts) -> CheckLine:
    backend = f.config.health.gpu_backend if f.config else "nvml"
    if backend != "nvml":
        return CheckLine("nvml", Status.OK, f"not used: health.gpu_backend = {backend}")
    from nvrx_hpc.health.gpu_nvml import NvmlBackend, pci_gpu_count

    try:
        count = NvmlBackend().device_count()
        return CheckLine("nvml", Status.OK, f"NVML answers: {count} GPU(s)")
    except NvrxError as exc:
        why = exc.message
    on_bus = pci_gpu_count()
    if on_bus:
        return CheckLine("nvml", Status.FAIL, f"{on_bus} NVIDIA GPU(s) on the PCI bus but {why}",
                         "load the NVIDIA driver (nvidia-smi must work) and pip install nvidia-ml-py")
    return CheckLine("nvml", Status.WARN, f"no NVIDIA GPU on this node: {why}",
                     "on CPU-only nodes set health.gpu_backend = \"none\" in the site config")


_CHECKS: tuple[Callable[[_Facts], CheckLine], ...] = (
    _package, _config, _slurm, _plugin_file, _plugstack, _loadable, _hook("prolog"), _hook("epilog"),
    _prolog_flags, _versions, _socket_dir, _bb_dir, _nvml,
)


def run_checks(paths: SitePaths, runner: CommandRunner | None = None) -> list[CheckLine]:
    """Every check, in order; a check that crashes becomes a fail line naming the error."""
    facts = _gather(paths, runner or CommandRunner())
    lines = []
    for check in _CHECKS:
        try:
            lines.append(check(facts))
        except Exception as exc:  # a bug in one check must not hide the others
            name = check.__name__.strip("_") if hasattr(check, "__name__") else "check"
            lines.append(CheckLine(name, Status.FAIL, f"the check itself failed: {type(exc).__name__}: {exc}",
                                   "report this as an nvrx-hpc bug"))
    return lines
