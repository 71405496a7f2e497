"""The distribution is complete: the sdist and the wheel carry the templates and the SPANK sources, the wheel
works from a fresh venv with no checkout on sys.path, and the dependencies fit a site (no torch pin)."""

from __future__ import annotations

import json
import re
import shutil
import tarfile
import zipfile
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
CORPUS = REPO / "tests" / "fixtures" / "logs"


def _spank_sources() -> list[str]:
    names = [p.name for p in (REPO / "spank").iterdir() if p.suffix in (".c", ".h", ".lds", ".example")]
    return sorted([*names, "Makefile"])


def test_torch_is_a_lower_bound_and_extras_are_named_for_what_they_enable():
    extras = PYPROJECT["project"]["optional-dependencies"]
    assert {"mpi", "torch", "service", "fast", "all", "dev"} <= set(extras)
    everything = [r for reqs in extras.values() for r in reqs] + PYPROJECT["project"]["dependencies"]
    torch = [r for r in everything if re.match(r"torch\b", r)]
    assert torch == ["torch>=2.4"], torch  # never a pin: a GPU site keeps its own build
    assert any(r.startswith("hyperscan") for r in extras["fast"])
    assert any(r.startswith("mkdocs") for r in extras["dev"])
    assert extras["all"] == ["nvrx-hpc[mpi,torch,service,fast]"]
    # The CPU wheel is installed explicitly by setup (and .ci/run), never resolved unpinned.
    assert "torch==2.13.0" in (REPO / "scripts" / "setup.sh").read_text()
    assert "NVRX_TORCH=torch==2.13.0" in (REPO / ".ci" / "run").read_text()


def test_no_module_reads_paths_relative_to_a_checkout():
    offenders = []
    for path in (REPO / "nvrx_hpc").rglob("*.py"):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"parents\[\d\]|sbatch_templates|/ \"spank\"", line):
                offenders.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    assert not offenders, offenders


def test_sdist_and_wheel_carry_templates_and_spank_sources(wheel_env):
    with tarfile.open(wheel_env.sdist) as sdist:
        in_sdist = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    with zipfile.ZipFile(wheel_env.wheel) as wheel:
        in_wheel = set(wheel.namelist())
    wanted = [f"nvrx_hpc/data/spank/{name}" for name in _spank_sources()]
    wanted += ["nvrx_hpc/data/sbatch/pytorch.sbatch.j2", "nvrx_hpc/slurm/devcluster/slurm.conf.j2",
               "nvrx_hpc/health/default_policy.toml", "nvrx_hpc/py.typed"]
    assert not [w for w in wanted if w not in in_sdist], sorted(in_sdist)
    assert not [w for w in wanted if w not in in_wheel], sorted(in_wheel)
    assert not [n for n in in_wheel if n.endswith((".so", ".o", ".d"))]  # no build output travels
    assert not [n for n in in_wheel if "synth" in n]  # test-data generators live in benchmarks/_gen
    with zipfile.ZipFile(wheel_env.wheel) as wheel:
        metadata = next(wheel.read(n).decode() for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    requires = [line for line in metadata.splitlines() if line.startswith("Requires-Dist: torch")]
    assert requires == ['Requires-Dist: torch>=2.4; extra == "torch"'], requires


def test_the_wheel_is_what_the_venv_imports(wheel_env):
    done = wheel_env.run(["python", "-c", "import nvrx_hpc, sys; print(nvrx_hpc.__file__); print(sys.path)"])
    assert done.returncode == 0, done.stderr
    location = Path(done.stdout.splitlines()[0])
    assert location.is_relative_to(wheel_env.venv), done.stdout
    assert str(REPO) not in done.stdout.splitlines()[1]


def test_render_from_the_wheel(wheel_env):
    done = wheel_env.run(["nvrx-hpc", "render", "--nodes", "2", "--run-dir", "/scratch/r1", "--", "python", "t.py"])
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --nodes=2" in done.stdout and "nvrx_hpc run" in done.stdout, done.stdout


def test_worker_import_from_the_wheel_pulls_no_torch(wheel_env):
    code = ("import sys, nvrx_hpc; from nvrx_hpc import worker; "
            "heavy = [m for m in ('torch', 'mpi4py', 'numpy') if m in sys.modules]; print(nvrx_hpc.__file__, heavy)")
    done = wheel_env.run(["python", "-c", code])
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("[]") and str(wheel_env.venv) in done.stdout, done.stdout


def test_attribute_from_the_wheel(wheel_env, tmp_path):
    run = Path(shutil.copytree(CORPUS / "application_exception", tmp_path / "777"))
    done = wheel_env.run(["nvrx-hpc", "attribute", "--json", "--no-write", str(run)],
                         env={"NVRX_ATTR_CONFIG": "/dev/null"})
    assert done.returncode == 0, done.stderr
    expected = json.loads((CORPUS / "expected.json").read_text())["application_exception"]
    report = json.loads(done.stdout)
    assert report["category"] == expected["category"] and report["culprit"]["ranks"] == expected["ranks"]


def _need_slurm_headers():
    if shutil.which("slurmd") is None and shutil.which("srun") is None:
        pytest.skip("Slurm is not installed here")
    if not Path("/usr/include/slurm/spank.h").exists():
        pytest.skip("libslurm-dev is not installed here")


def test_site_install_dry_run_from_the_wheel_lists_every_file_and_writes_none(wheel_env, tmp_path):
    _need_slurm_headers()
    prefix = tmp_path / "root"
    prefix.mkdir()
    done = wheel_env.run(["nvrx-hpc", "site", "install", "--dry-run", "--prefix", str(prefix), "--json"])
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    files = {Path(f["path"]).relative_to(prefix).as_posix(): f for f in report["files"]}
    assert set(files) >= {"usr/local/lib/nvrx-hpc/nvrx_spank.so", "etc/slurm/plugstack.conf.d/nvrx.conf",
                          "etc/nvrx-hpc/prolog", "etc/nvrx-hpc/epilog", "etc/nvrx-hpc/config.toml",
                          "etc/nvrx-hpc/installed.json"}, files
    assert all(f["action"].startswith("would") for f in files.values())
    assert str(wheel_env.venv) in files["usr/local/lib/nvrx-hpc/nvrx_spank.so"]["detail"]  # the packaged sources
    assert f"Prolog={prefix}/etc/nvrx-hpc/prolog" in report["slurm_conf_lines"]
    assert list(prefix.iterdir()) == []


def test_site_install_refuses_headers_of_another_slurm_release(wheel_env, tmp_path):
    _need_slurm_headers()
    fake = tmp_path / "include" / "slurm"
    fake.mkdir(parents=True)
    (fake / "spank.h").write_text("/* stand-in */\n")
    (fake / "slurm_version.h").write_text("#define SLURM_VERSION_NUMBER 0x010203\n")  # Slurm 1.2.3
    prefix = tmp_path / "root"
    done = wheel_env.run(["nvrx-hpc", "site", "install", "--prefix", str(prefix), "--slurm-include",
                          str(fake.parent)])
    assert done.returncode == 69, (done.stdout, done.stderr)
    assert "headers" in done.stderr and "1.02.3" in done.stderr and "will not load into" in done.stderr
    assert "Traceback" not in done.stderr and not prefix.exists()

