"""Host checks on this machine's real files, the DCGM parser, and the policy file: loading, merging, errors."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest
from _health_helpers import SimNode, policy

from nvrx_hpc.health.api import HealthPolicyError, Level, Verdict
from nvrx_hpc.health.checks_dcgm import parse_dcgm_json
from nvrx_hpc.health.checks_host import bb_root, probe_dir
from nvrx_hpc.health.policy import DEFAULT_POLICY_FILE, POLICY_PATH_ENV, load_policy, verdict_of


@pytest.fixture
def sim(tmp_path) -> SimNode:
    node = SimNode(tmp_path)
    yield node
    node.gpu.close()


# ---- burst buffer


@pytest.mark.parametrize(("template", "node", "root"), [
    ("/dev/shm/nvrx/%j", "n1", "/dev/shm/nvrx"),
    ("/tmp/c/bb/%n/%j", "n2", "/tmp/c/bb/n2"),
    ("/scratch/%n/job-%j/ckpt", "n3", "/scratch/n3"),
    ("/data/100%%/%j", "n1", "/data/100%"),
])  # fmt: skip
def test_bb_root(template, node, root):
    assert str(bb_root(template, node)) == root


def test_burst_buffer_ok_even_before_it_exists(sim, tmp_path):
    result = sim.run("host.burst_buffer", bb=str(tmp_path / "bb" / "%n" / "%j"))
    assert result.verdict is Verdict.OK
    assert f"(does not exist yet; {tmp_path} is writable)" in result.detail
    assert not (tmp_path / "bb").exists()  # the check never creates the root


def test_burst_buffer_unwritable_is_fatal(sim, tmp_path):
    (tmp_path / "file").write_text("not a directory")
    result = sim.run("host.burst_buffer", bb=str(tmp_path / "file" / "bb" / "%j"))
    assert result.verdict is Verdict.FATAL and "is not a directory" in result.detail
    pol = policy(host={"bb_unwritable": "warn"})
    assert sim.run("host.burst_buffer", pol, bb=str(tmp_path / "file" / "%j")).verdict is Verdict.WARN


def test_burst_buffer_low_space(sim, tmp_path):
    result = sim.run("host.burst_buffer", policy(host={"bb_min_free_gib": 1e9}), bb=str(tmp_path / "%j"))
    assert result.verdict is Verdict.FATAL and "below 1e+09 GiB" in result.detail


def test_probe_dir_leaves_nothing_behind(tmp_path):
    probed, problem = probe_dir(tmp_path)
    assert probed == tmp_path and problem is None
    assert list(tmp_path.iterdir()) == []


# ---- shm, memory, mounts


def test_shm_ok_and_low(sim):
    assert sim.run("host.shm").verdict is Verdict.OK
    low = sim.run("host.shm", policy(host={"shm_min_free_gib": 1e9}))
    assert low.verdict is Verdict.WARN and low.detail.startswith("shared memory /dev/shm:")


def test_memory(sim):
    assert sim.run("host.memory").verdict is Verdict.OK
    low = sim.run("host.memory", policy(host={"mem_min_available_pct": 100.0}))
    assert low.verdict is Verdict.WARN and "below 100%" in low.detail
    assert sim.run("host.memory", policy(host={"mem_min_available_pct": 100.0, "mem_low": "fatal"})).fatal


def test_mounts(sim, tmp_path):
    assert sim.run("host.mounts").verdict is Verdict.SKIP
    assert sim.run("host.mounts", policy(host={"required_mounts": ["/"]})).verdict is Verdict.OK
    missing = sim.run("host.mounts", policy(host={"required_mounts": ["/", str(tmp_path)]}))
    assert missing.verdict is Verdict.FATAL and missing.detail == f"not mounted: {tmp_path}"


# ---- DCGM output (handwritten in the DCGM 3.x layout; no dcgmi on this machine)

DCGM_SAMPLE = {
    "DCGM GPU Diagnostic": {
        "test_categories": [
            {"category": "Deployment", "tests": [
                {"name": "Denylist", "results": [{"status": "Pass"}]},
                {"name": "Page Retirement/Row Remap", "results": [
                    {"gpu_id": "1", "status": "Fail", "warnings": [{"warning": "GPU 1 has pending row remaps"}]},
                ]},
                {"name": "Persistence Mode", "results": [{"status": "Warn", "info": "persistence mode off"}]},
            ]},
        ],
    }
}  # fmt: skip


def test_parse_dcgm_json():
    failed, warned, seen = parse_dcgm_json(json.dumps(DCGM_SAMPLE))
    assert failed == ["Page Retirement/Row Remap: GPU 1 has pending row remaps"]
    assert warned == ["Persistence Mode: persistence mode off"]
    assert seen == 3
    with pytest.raises(ValueError):
        parse_dcgm_json("Error: unable to connect to host engine")


# ---- the policy file


def test_defaults_come_from_the_packaged_file():
    pol = load_policy(env={})
    assert pol.source == (str(DEFAULT_POLICY_FILE),)
    assert 79 in pol.xid.fatal and 13 in pol.xid.application
    assert pol.gate.timeout == "error" and pol.gate.epilog == "on_failure"


def test_site_file_merges_over_defaults(tmp_path):
    site = tmp_path / "health-policy.toml"
    site.write_text('[xid]\nfatal = [79]\n[host]\nrequired_mounts = ["/lustre"]\nbb_min_free_gib = 2\n')
    for pol in (load_policy(site, env={}), load_policy(env={POLICY_PATH_ENV: str(site)})):
        assert pol.xid.fatal == frozenset({79})
        assert pol.xid.application == frozenset({13, 31, 43, 45})  # kept from the defaults
        assert pol.host.required_mounts == ("/lustre",) and pol.host.bb_min_free_gib == 2.0
        assert pol.source[-1] == str(site)


@pytest.mark.parametrize(("text", "message"), [
    ("[xid]\nfatl = [1]\n", "unknown health policy key 'fatl'"),
    ("[xid]\nfatl = [1]\n", "did you mean 'fatal'?"),
    ("[gpu]\nmissing = 'drain'\n", "gpu.missing = 'drain'"),
    ("[ecc]\nuncorrected_fatal = -1\n", "greater than or equal to 0"),
    ("[gate]\ntimeout = 'warn'\n", "gate.timeout"),
    ("xid = 3\n", "must be a table"),
    ("[xid\n", "not valid TOML"),
])  # fmt: skip
def test_bad_policy_files_name_the_key(tmp_path, text, message):
    site = tmp_path / "p.toml"
    site.write_text(text)
    with pytest.raises(HealthPolicyError) as err:
        load_policy(site, env={})
    assert message in str(err.value)
    assert err.value.exit_code == 2


def test_missing_explicit_policy_file(tmp_path):
    with pytest.raises(HealthPolicyError, match="does not exist"):
        load_policy(env={POLICY_PATH_ENV: str(tmp_path / "nope.toml")})


def test_xid_policy_verdicts_and_action_words():
    xid = policy().xid
    assert xid.verdict(79) is Verdict.FATAL
    assert xid.verdict(13) is Verdict.WARN
    assert xid.verdict(12345) is Verdict.WARN
    assert [verdict_of(a) for a in ("ignore", "warn", "fatal")] == [Verdict.OK, Verdict.WARN, Verdict.FATAL]


def test_level_enum_values():
    assert [lv.value for lv in Level] == ["quick", "full"]
    assert os.fspath(DEFAULT_POLICY_FILE).endswith("nvrx_hpc/health/default_policy.toml")


@pytest.mark.skipif(os.geteuid() != 0, reason="becoming another user needs root")
def test_burst_buffer_of_the_site_is_no_fault_for_a_user_mode_agent(sim):
    """A user-mode agent runs as the job's user; the site's /dev/shm/nvrx (root's, 0755, made by a Prolog)
    is not writable to it. That is not the node's fault: no fatal finding, so no healthy node is excluded.
    A root-owned directory root cannot write into is still fatal (checked as root above)."""
    site = Path(tempfile.mkdtemp(prefix="nvrx-site-bb-", dir="/dev/shm"))
    try:
        site.chmod(0o755)
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child becomes `nobody` and runs the check as a user-mode agent would
            try:
                os.close(read)
                os.setgid(65534)
                os.setuid(65534)
                result = sim.run("host.burst_buffer", bb=str(site / "%j"))
                os.write(write, json.dumps([result.verdict.value, result.detail]).encode())
            finally:
                os._exit(0)
        os.close(write)
        with os.fdopen(read) as pipe:
            verdict, detail = json.loads(pipe.read())
        os.waitpid(pid, 0)
        assert verdict == "ok" and "is the site's (root's), not writable by uid 65534" in detail
    finally:
        site.rmdir()
