"""Docs stay true: every relative link resolves, and every CLI command is documented somewhere in docs/."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from nvrx_hpc.cli.main import app

REPO = Path(__file__).resolve().parents[2]
DOC_FILES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)#\s]+)(?:#[^)]*)?\)")


def _commands(group, prefix: tuple[str, ...] = ()):
    for name, command in getattr(group, "commands", {}).items():
        if getattr(command, "commands", None):
            yield from _commands(command, (*prefix, name))
        else:
            yield " ".join(("nvrx-hpc", *prefix, name))


def test_relative_links_resolve():
    broken = []
    for doc in DOC_FILES:
        for target in LINK.findall(doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(REPO)} -> {target}")
    assert not broken, broken


def test_every_cli_command_is_documented():
    text = "\n".join(doc.read_text() for doc in DOC_FILES)
    commands = list(_commands(typer.main.get_command(app)))
    assert "nvrx-hpc cluster up" in commands
    missing = []
    for command in commands:
        parts = command.split()
        # "nvrx-hpc cluster up|down|status" style lists count too.
        pattern = r"\s+".join(re.escape(p) for p in parts[:-1]) + r"\s+(?:[\w-]+\|)*" + re.escape(parts[-1]) + r"\b"
        if not re.search(pattern, text):
            missing.append(command)
    assert not missing, f"undocumented commands: {missing}"
