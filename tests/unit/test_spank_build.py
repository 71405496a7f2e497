"""The SPANK plugin builds cleanly with -Werror, exports only what Slurm looks up, and its C unit tests pass.

Builds into a temporary directory (`make O=...`), so a plugin a running cluster has loaded is never touched.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

SPANK_DIR = Path(__file__).resolve().parents[2] / "spank"
ALLOWED_DATA = {"plugin_name", "plugin_type", "plugin_version", "spank_plugin_version"}
CALLBACKS = {"slurm_spank_init", "slurm_spank_init_post_opt", "slurm_spank_user_init",
             "slurm_spank_task_post_fork", "slurm_spank_task_exit", "slurm_spank_exit"}


def _have_toolchain() -> str | None:
    for tool in ("make", "cc", "nm", "readelf"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    if not Path("/usr/include/slurm/spank.h").exists():
        return "no <slurm/spank.h> (apt-get install libslurm-dev)"
    return None


pytestmark = pytest.mark.skipif(_have_toolchain() is not None, reason=str(_have_toolchain()))


def _make(*args: str) -> subprocess.CompletedProcess:
    done = subprocess.run(["make", "-C", str(SPANK_DIR), *args], capture_output=True, text=True, timeout=180)
    print(f"$ make {' '.join(args)}\nrc={done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("spank")
    done = _make("WERROR=1", "NVRX_VERSION=9.8.7-test", f"O={out}")
    assert done.returncode == 0
    assert "warning:" not in done.stderr
    return out / "nvrx_spank.so"


def _tool(*argv: str) -> str:
    return subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=True).stdout


def test_exports_only_the_plugin_symbols_and_callbacks(built):
    exported = {line.split()[-1] for line in _tool("nm", "-D", "--defined-only", str(built)).splitlines()}
    assert exported == ALLOWED_DATA | CALLBACKS


def test_needs_no_libslurm_and_is_stripped_and_hardened(built):
    dynamic = _tool("readelf", "-dW", str(built))
    needed = [line for line in dynamic.splitlines() if "(NEEDED)" in line]
    assert not any("slurm" in line for line in needed), needed
    assert "BIND_NOW" in dynamic
    headers = _tool("readelf", "-lW", str(built))
    assert "GNU_RELRO" in headers
    stack = next(line for line in headers.splitlines() if "GNU_STACK" in line)
    assert stack.split()[-2] == "RW", "non-executable stack"
    assert ".symtab" not in _tool("readelf", "-SW", str(built)), "stripped"


def test_version_is_injected(built):
    assert b"9.8.7-test" in built.read_bytes()


def test_c_unit_tests_pass(tmp_path):
    done = _make("WERROR=1", f"O={tmp_path}", "check")
    assert done.returncode == 0
    assert ", 0 failed" in done.stdout


def test_clean_removes_what_it_built(tmp_path):
    assert _make(f"O={tmp_path}").returncode == 0
    assert (tmp_path / "nvrx_spank.so").exists()
    assert _make(f"O={tmp_path}", "clean").returncode == 0
    assert not (tmp_path / "nvrx_spank.so").exists() and not (tmp_path / "build").exists()
