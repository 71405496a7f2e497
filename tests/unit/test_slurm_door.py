"""One door to Slurm: outside nvrx_hpc.slurm no product module spells a Slurm command line."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "nvrx_hpc"
SLURM_COMMANDS = {"srun", "sbatch", "salloc", "scontrol", "sinfo", "squeue", "scancel", "sacct", "sacctmgr", "sstat"}


def _argv_literals(tree: ast.AST):
    """List and tuple literals whose first element is a string naming a Slurm command."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
            first = node.elts[0]
            if isinstance(first, ast.Constant) and first.value in SLURM_COMMANDS and len(node.elts) > 1:
                yield node.lineno, first.value


def test_only_the_slurm_package_builds_slurm_command_lines():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if (PACKAGE / "slurm") in path.parents:
            continue
        for line, command in _argv_literals(ast.parse(path.read_text(), str(path))):
            found.append(f"{path.relative_to(PACKAGE.parent)}:{line}: {command}")
    assert found == [], "run Slurm through nvrx_hpc.slurm (backend or commands):\n" + "\n".join(found)


def test_the_scan_finds_an_argv_when_there_is_one():
    tree = ast.parse('run(["scontrol", "show", "config"])\nx = ("srun", "--help")\nnames = ["srun"]')
    assert sorted(c for _, c in _argv_literals(tree)) == ["scontrol", "srun"]
