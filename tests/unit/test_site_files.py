"""`nvrx-hpc site install|check` without Slurm: the files' text, the slurm.conf lines, version checks, paths."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

from nvrx_hpc.core.config import NvrxConfig, load_config
from nvrx_hpc.deploy import SitePaths, Status, render, run_checks
from nvrx_hpc.deploy.check import _plugstack_plugins, _static_dir
from nvrx_hpc.slurm.api import SlurmVersion
from nvrx_hpc.slurm.parse_text import parse_show_config
from nvrx_hpc.slurm.runner import CommandRunner
from nvrx_hpc.slurm.spank_build import BuildError, header_version, release, require_same_release

REPO = Path(__file__).resolve().parents[2]

SHOW_CONFIG = """Configuration data as of 2026-12-03T08:00:00
AccountingStorageBackupHost = (null)
Epilog                  = /etc/slurm/site-epilog.sh
PlugStackConfig         = /etc/slurm/plugstack.conf
Prolog                  = /etc/nvrx-hpc/prolog
PrologEpilogTimeout     = 65534
PrologFlags             = Contain,X11
SchedulerParameters     = (null)
SLURM_VERSION           = 22.05.8

Cgroup Support Configuration:
AllowedDevicesFile      = /etc/slurm/cgroup_allowed_devices_file.conf
"""


def test_parse_show_config_reads_key_value_lines():
    conf = parse_show_config(SHOW_CONFIG)
    assert conf["Prolog"] == "/etc/nvrx-hpc/prolog" and conf["SLURM_VERSION"] == "22.05.8"
    assert conf["SchedulerParameters"] == "(null)" and "Configuration data as of" not in str(conf)


def test_slurm_conf_lines_are_only_the_missing_ones_and_lists_keep_their_values():
    lines = render.slurm_conf_lines(SitePaths.build(None, Path("/etc/slurm")), parse_show_config(SHOW_CONFIG))
    assert lines == ["Epilog=/etc/nvrx-hpc/epilog", "PrologFlags=Contain,X11,Alloc", "PrologEpilogTimeout=60",
                     "SchedulerParameters=nohold_on_prolog_fail"]
    done = {"Prolog": "/etc/nvrx-hpc/prolog", "Epilog": "/etc/nvrx-hpc/epilog", "PrologFlags": "Alloc",
            "PrologEpilogTimeout": "60", "SchedulerParameters": "nohold_on_prolog_fail"}
    assert render.slurm_conf_lines(SitePaths.build(None, Path("/etc/slurm")), done) == []


def test_prefix_puts_every_path_under_it(tmp_path):
    paths = SitePaths.build(tmp_path, Path("/etc/slurm"))
    for path in (paths.config, paths.prolog, paths.epilog, paths.plugin, paths.plugstack_entry, paths.manifest):
        assert path.is_relative_to(tmp_path), path
    assert SitePaths.build(None, Path("/etc/slurm")).plugin == Path("/usr/local/lib/nvrx-hpc/nvrx_spank.so")


def test_hook_wrapper_runs_the_absolute_interpreter_with_the_site_config(tmp_path):
    paths = SitePaths.build(None, Path("/etc/slurm"))
    text = render.hook_wrapper("epilog", "/opt/py 3/bin/python3", paths, "9.9")
    assert text.startswith("#!/bin/sh\n") and "export NVRX_CONFIG=/etc/nvrx-hpc/config.toml\n" in text
    assert text.endswith("exec '/opt/py 3/bin/python3' -m nvrx_hpc epilog\n")  # quoted: a path with a space
    script = tmp_path / "epilog"
    script.write_text(text.replace("'/opt/py 3/bin/python3'", sys.executable).replace(" epilog\n", " --version\n"))
    script.chmod(0o755)
    done = subprocess.run([str(script)], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)})  # slurmd's bare environment
    assert done.returncode == 0 and done.stdout.startswith("nvrx-hpc "), done.stderr


def test_commented_config_is_valid_toml_that_changes_nothing(tmp_path):
    text = render.commented_config("9.9")
    assert set(tomllib.loads(text)) == set(NvrxConfig.model_fields)  # the section headers, every key commented
    assert "# socket = \"/run/nvrx/%j/agent-%n.sock\"" in text and "# prolog_budget_s = 10.0" in text
    (tmp_path / "config.toml").write_text(text)
    resolved = load_config(path=tmp_path / "config.toml")
    assert not [s for s in resolved.sources.values() if s.startswith("file:")]  # no key set by the file


def test_plugstack_entry_uses_the_agents_socket_and_burst_buffer():
    config = NvrxConfig.model_validate({"agent": {"socket": "/var/run/x/%j/%n.sock", "bb_dir": "/nvme/%j"}})
    line = render.plugstack_entry(SitePaths.build(None, Path("/etc/slurm")), config, "9.9").splitlines()[-1]
    assert line == ("required /usr/local/lib/nvrx-hpc/nvrx_spank.so agent_socket=/var/run/x/%j/%n.sock "
                    "bb_dir=/nvme/%j timeout_ms=500 default=off")


def _headers(root: Path, number: str) -> Path:
    (root / "slurm").mkdir(parents=True)
    (root / "slurm" / "spank.h").write_text("")
    (root / "slurm" / "slurm_version.h").write_text(f"/* x */\n#define SLURM_VERSION_NUMBER {number}\n")
    return root


def test_header_version_and_release_mismatch(tmp_path):
    assert header_version(_headers(tmp_path / "a", "0x170b04")) == SlurmVersion(23, 11, 4)
    assert release(SlurmVersion(23, 2, 1)) == "23.02"
    require_same_release(SlurmVersion(22, 5, 2), SlurmVersion(22, 5, 8), tmp_path)  # micro may differ
    with pytest.raises(BuildError, match=r"are 23.11.4 but this node runs Slurm 22.05.8.*will not load into 22.05"):
        require_same_release(SlurmVersion(23, 11, 4), SlurmVersion(22, 5, 8), tmp_path / "a")
    with pytest.raises(BuildError, match="libslurm-dev"):
        header_version(tmp_path / "nothing")


def test_static_dir_and_plugstack_includes(tmp_path):
    assert _static_dir("/run/nvrx/%j/agent-%n.sock") == Path("/run/nvrx")
    assert _static_dir("/dev/shm/nvrx-%j") == Path("/dev/shm")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "nvrx.conf").write_text("# c\nrequired /p/nvrx_spank.so default=off\n")
    (tmp_path / "plugstack.conf").write_text(f"include {tmp_path}/d/*.conf\n")
    (tmp_path / "d" / "other.conf").write_text("optional /x/pyxis.so\n")
    (tmp_path / "d" / "skip.txt").write_text("required /not/included.so\n")
    assert _plugstack_plugins(tmp_path / "plugstack.conf") == ["/p/nvrx_spank.so", "/x/pyxis.so"]


def test_site_check_without_slurm_says_what_fails_and_never_raises(tmp_path):
    empty = tmp_path / "bin"
    empty.mkdir()
    lines = {line.name: line for line in run_checks(SitePaths.build(tmp_path / "root", Path("/etc/slurm")),
                                                    CommandRunner(env={"PATH": str(empty)}))}  # fmt: skip
    assert lines["package"].status is Status.OK and lines["config"].status is Status.OK
    for name in ("slurm", "plugin.file", "plugin.loadable", "prolog", "epilog"):
        assert lines[name].status is Status.FAIL and lines[name].fix, lines[name]
    assert "not installed" in lines["slurm"].detail
    assert lines["versions"].status is Status.WARN and "no install manifest" in lines["versions"].detail


def test_site_cli_install_usage_errors(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "nvrx_hpc", "site", "install", "--python", "python3", "--prefix",
                           str(tmp_path)], capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert done.returncode == 2 and "not an absolute path" in done.stderr and "Traceback" not in done.stderr
    done = subprocess.run([sys.executable, "-m", "nvrx_hpc", "site", "install", "--uninstall", "--prefix",
                           str(tmp_path)], capture_output=True, text=True, timeout=60, env=env)  # fmt: skip
    assert done.returncode == 2 and "nothing to uninstall" in done.stderr
