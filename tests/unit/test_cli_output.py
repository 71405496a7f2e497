"""One renderer: every command that reports takes --json, commands print only through cli/_output.py, every
group registers the same way, and --json prints JSON alone on stdout (health too: no switch by terminal)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import typer

from nvrx_hpc.cli.main import app

REPO = Path(__file__).resolve().parents[2]
CLI = REPO / "nvrx_hpc" / "cli"

# Commands without --json, and why: they run a process, stream, or print an artefact.
NO_JSON = {
    "agent": "the node agent daemon",
    "agent-attach": "internal, run by `nvrx-hpc run --mode site` on each node",
    "run": "the restart loop; its record is events.jsonl and `nvrx-hpc status --json`",
    "serve": "the attribution service",
    "prolog": "a Slurm hook; --dry-run prints JSON",
    "epilog": "a Slurm hook; --dry-run prints JSON",
    "spank listen": "streams one JSON line per message",
    "render": "prints the sbatch script",
    "submit": "prints the job id alone, like sbatch --parsable",
}


def _leaves(group, prefix=()):
    for name, command in getattr(group, "commands", {}).items():
        if getattr(command, "commands", None):
            yield from _leaves(command, (*prefix, name))
        else:
            yield " ".join((*prefix, name)), command


def nvrx(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.run([sys.executable, "-m", "nvrx_hpc", *args], capture_output=True, text=True, env=full,
                          timeout=120)  # fmt: skip


def test_every_reporting_command_takes_json():
    leaves = dict(_leaves(typer.main.get_command(app)))
    assert set(NO_JSON) <= set(leaves)
    lacking = [name for name, cmd in leaves.items()
               if name not in NO_JSON and "--json" not in [o for p in cmd.params for o in p.opts]]  # fmt: skip
    assert not lacking, lacking


def test_commands_print_only_through_the_output_module():
    direct = re.compile(r"typer\.echo\((?![^\n]*err=True)|sys\.stdout\.write|\bprint\(|Console\(|Table\(|json\.dumps")
    offenders = [f"{p.name}:{n}" for p in CLI.glob("*.py") if p.name != "_output.py"
                 for n, line in enumerate(p.read_text().splitlines(), 1)
                 if direct.search(line)]  # fmt: skip
    assert offenders == ["hooks.py:63"], offenders  # the hook's JSON line goes to its log file, not stdout


def test_every_module_registers_the_same_way():
    modules = sorted(p.stem for p in CLI.glob("*.py") if not p.stem.startswith("_") and p.stem != "main")
    text = (CLI / "main.py").read_text()
    for name in modules:
        assert re.search(r"^def register\(", (CLI / f"{name}.py").read_text(), re.M), name
        assert re.search(rf"\b{name}(_cli)?\b", text.split("for _module in")[1].splitlines()[0]), name
    assert "add_typer" not in text


def test_json_is_alone_on_stdout_and_health_does_not_switch_by_terminal(tmp_path):
    down = nvrx("cluster", "down", "--state-dir", str(tmp_path / "none"), "--json")
    assert down.returncode == 0, down.stderr
    assert json.loads(down.stdout) == {"state_dir": str(tmp_path / "none"), "stopped": []}
    check = nvrx("config", "check", "--json", env={"NVRX_CONFIG": "/dev/null"})
    assert json.loads(check.stdout) == {"ok": True, "file": "/dev/null", "keys_set": 0}
    table = nvrx("health", "--backend", "none", "--check", "gpu.count")  # stdout is a pipe here
    assert table.returncode == 0 and "gpu.count" in table.stdout
    assert not table.stdout.lstrip().startswith("{"), table.stdout
    assert json.loads(nvrx("health", "--json", "--backend", "none", "--check", "gpu.count").stdout)["results"]


def test_errors_share_one_panel():
    bad = nvrx("config", "show", "--set", "cluster.nodes")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.splitlines()[:2] == ["error: --set 'cluster.nodes' is not key=value",
                                           "hint: write it as --set cluster.nodes=8 (a dotted key, '=', the value)"]


def test_logging_level_of_the_config_sets_what_the_operator_sees():
    old_name = {"NVRX_GPU_BACKEND": "sim", "NVRX_CONFIG": "/dev/null"}
    default = nvrx("config", "check", env=old_name)
    assert default.returncode == 0 and default.stderr.count("NVRX_GPU_BACKEND is deprecated") == 1, default.stderr
    quiet = nvrx("config", "check", env={**old_name, "NVRX_LOGGING__LEVEL": "error"})
    assert quiet.returncode == 0 and "deprecated" not in quiet.stderr, quiet.stderr
