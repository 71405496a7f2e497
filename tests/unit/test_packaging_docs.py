"""The docs build as a site: mkdocs --strict fails on a broken link or anchor and on a page left out of the nav."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def test_mkdocs_strict_build(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs comes with the dev extra")
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    warnings = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0 and not warnings, done.stderr[-3000:]
    for page in ("index", "quickstart", "admin-quickstart", "site-install"):
        assert (tmp_path / "site" / ("" if page == "index" else page) / "index.html").is_file(), page


def test_every_page_is_in_the_nav():
    nav = (REPO / "mkdocs.yml").read_text()
    missing = [p.name for p in (REPO / "docs").glob("*.md") if f" {p.name}" not in nav]
    assert not missing, f"add to mkdocs.yml's nav: {missing}"
