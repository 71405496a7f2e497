"""The Prolog/Epilog gate and the drain ownership rules, with simulated GPUs and an in-memory Slurm;
plus the real `nvrx-hpc prolog` process failing open and keeping its budget."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from _health_helpers import MemorySlurm

from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.health.api import CheckResult, Level, NotOurDrain, Verdict
from nvrx_hpc.health.drain import MAX_REASON, drain_node, drain_reason, undrain_node
from nvrx_hpc.health.gate import agent_flag_path, gate, job_failed, write_agent_flag
from nvrx_hpc.health.sim_faults import inject, parse_fault

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def env(tmp_path) -> dict[str, str]:
    return {
        "NVRX_CLUSTER__STATE_DIR": str(tmp_path),
        "NVRX_HEALTH__GPU_BACKEND": "sim",
        "NVRX_AGENT__BB_DIR": f"{tmp_path}/bb/%n/%j",
        "NVRX_AGENT__SOCKET": f"{tmp_path}/run/%j/agent-%n.sock",
        "SLURMD_NODENAME": "n2",
        "SLURM_JOB_ID": "42",
        "PATH": os.environ["PATH"],
    }


def fault(tmp_path: Path, *specs: str, node: str = "n2") -> None:
    inject(tmp_path / "gpu-faults", node, [parse_fault(s) for s in specs])


# ---- drain ownership


def test_drain_reason_is_one_line_and_bounded():
    result = CheckResult("gpu.ecc", Level.QUICK, Verdict.FATAL, "GPU 1: 2 errors\nand more " + "x" * 300)
    reason = drain_reason(result)
    assert reason.startswith("nvrx: gpu.ecc: GPU 1: 2 errors and more x") and "\n" not in reason
    assert len(reason) == MAX_REASON and reason.endswith("...")


def test_drain_leaves_a_foreign_drain_alone_and_keeps_ours():
    slurm = MemorySlurm("n1", "n2", "n3")
    slurm.admin_drain("n1", "bad PSU")
    assert drain_node(slurm, "n1", "nvrx: gpu.xid: x").action == "left-alone"
    assert slurm.node("n1").reason == "bad PSU" and not slurm.calls
    assert drain_node(slurm, "n2", "nvrx: gpu.xid: first").action == "drained"
    again = drain_node(slurm, "n2", "nvrx: gpu.ecc: second")
    assert again.action == "already-ours" and slurm.node("n2").reason == "nvrx: gpu.xid: first"
    slurm.fail_drain = True
    failed = drain_node(slurm, "n3", "nvrx: gpu.xid: x")
    assert failed.action == "failed" and "permission denied" in failed.error


def test_undrain_only_our_drains():
    slurm = MemorySlurm("n1", "n2", "n3")
    slurm.admin_drain("n1", "NHC: check_fs_mount_rw /home failed")
    with pytest.raises(NotOurDrain) as err:
        undrain_node(slurm, "n1")
    assert "only undrains nodes whose reason starts with 'nvrx:'" in err.value.message
    assert "scontrol update NodeName=n1 State=RESUME" in err.value.hint
    assert err.value.exit_code == ExitCode.USAGE
    slurm.drain(["n2"], "nvrx: gpu.xid: x")
    assert undrain_node(slurm, "n2").action == "resumed" and not slurm.node("n2").drained
    assert undrain_node(slurm, "n3").action == "not-drained"


# ---- the gate


def test_prolog_passes_a_healthy_node(env):
    slurm = MemorySlurm("n2")
    outcome = gate("prolog", env, slurm=slurm)
    assert outcome.action == "pass" and outcome.exit_code == ExitCode.OK and not slurm.calls
    assert outcome.report.verdict is Verdict.OK and outcome.level == "quick"


def test_prolog_drains_on_fatal_and_exits_94(env, tmp_path):
    fault(tmp_path, "xid=79@1")
    slurm = MemorySlurm("n2")
    outcome = gate("prolog", env, slurm=slurm)
    assert outcome.action == "drained" and outcome.exit_code == ExitCode.REQUEUE_EXCLUDING
    assert slurm.node("n2").reason == "nvrx: gpu.xid: Xid 79 on GPU 1 (GPU has fallen off the bus)"
    assert outcome.to_dict()["drain"]["action"] == "drained"


def test_prolog_on_an_admin_drained_node_keeps_the_reason_but_still_refuses_the_job(env, tmp_path):
    fault(tmp_path, "ecc_uncorrected=1")
    slurm = MemorySlurm("n2")
    slurm.admin_drain("n2", "maintenance")
    outcome = gate("prolog", env, slurm=slurm)
    assert outcome.action == "left-alone" and outcome.exit_code == ExitCode.REQUEUE_EXCLUDING
    assert slurm.node("n2").reason == "maintenance"


def test_prolog_still_refuses_the_job_when_the_drain_fails(env, tmp_path):
    fault(tmp_path, "xid=79")
    slurm = MemorySlurm("n2")
    slurm.fail_drain = True
    outcome = gate("prolog", env, slurm=slurm)
    assert outcome.action == "drain-failed" and outcome.exit_code == ExitCode.REQUEUE_EXCLUDING


def test_dry_run_never_drains(env, tmp_path):
    fault(tmp_path, "xid=79")
    slurm = MemorySlurm("n2")
    outcome = gate("prolog", env, slurm=slurm, dry_run=True)
    assert outcome.action == "dry-run" and outcome.exit_code == 0 and outcome.reason.startswith("nvrx: gpu.xid")
    assert not slurm.calls


def test_user_level_off_and_full(env, tmp_path):
    fault(tmp_path, "xid=79")
    off = gate("prolog", {**env, "SPANK_NVRX_HEALTH": "off"}, slurm=MemorySlurm("n2"))
    assert off.action == "skipped" and "--nvrx-health=off" in off.detail
    policy_file = tmp_path / "p.toml"
    policy_file.write_text("[gate]\nallow_user_off = false\n")
    forced = gate("prolog", {**env, "SPANK_NVRX_HEALTH": "off", "NVRX_HEALTH_POLICY": str(policy_file)},
                  slurm=MemorySlurm("n2"))  # fmt: skip
    assert forced.action == "drained"
    full = gate("prolog", {**env, "SPANK_NVRX_HEALTH": "full"}, slurm=MemorySlurm("n2"))
    assert full.level == "full" and "gpu.dcgm" in [r.name for r in full.report.results]


def test_epilog_rechecks_only_after_a_failure_or_an_agent_flag(env, tmp_path):
    fault(tmp_path, "remap_pending=1")
    ok_env = {**env, "SLURM_JOB_EXIT_CODE": "0", "SLURM_JOB_EXIT_CODE2": "0:0"}
    skipped = gate("epilog", ok_env, slurm=MemorySlurm("n2"))
    assert skipped.action == "skipped" and skipped.exit_code == 0

    slurm = MemorySlurm("n2")
    failed = gate("epilog", {**env, "SLURM_JOB_EXIT_CODE": "256", "SLURM_JOB_EXIT_CODE2": "1:0"}, slurm=slurm)
    assert failed.action == "drained" and failed.exit_code == ExitCode.OK  # our reason stands: exit 0

    from nvrx_hpc.core.config import load_config

    flag = agent_flag_path(load_config(env=env).config, "42", "n2")
    assert flag == tmp_path / "run" / "42" / "health-flag-n2.json"
    write_agent_flag(flag, CheckResult("gpu.xid", Level.QUICK, Verdict.FATAL, "Xid 79 on GPU 0"))
    flagged = gate("epilog", ok_env, slurm=MemorySlurm("n2"))
    assert flagged.action == "drained" and not flag.exists()


def test_epilog_exits_non_zero_when_its_drain_fails(env, tmp_path):
    fault(tmp_path, "xid=79")
    slurm = MemorySlurm("n2")
    slurm.fail_drain = True
    outcome = gate("epilog", {**env, "SLURM_JOB_EXIT_CODE2": "0:9"}, slurm=slurm)
    assert outcome.action == "drain-failed" and outcome.exit_code == ExitCode.REQUEUE_EXCLUDING


@pytest.mark.parametrize(("variables", "failed"), [
    ({"SLURM_JOB_EXIT_CODE2": "0:0", "SLURM_JOB_EXIT_CODE": "0"}, False),
    ({"SLURM_JOB_EXIT_CODE2": "3:0"}, True),
    ({"SLURM_JOB_EXIT_CODE2": "0:9"}, True),
    ({"SLURM_JOB_EXIT_CODE": "768"}, True),
    ({"SLURM_JOB_DERIVED_EC": "1:0"}, True),
    ({}, False),
])  # fmt: skip
def test_job_failed(variables, failed):
    assert job_failed(variables) is failed


def test_recheck_undrains_only_our_drain_when_everything_passes(env, tmp_path):
    slurm = MemorySlurm("n2")
    slurm.drain(["n2"], "nvrx: gpu.xid: Xid 79 on GPU 0")
    kept = gate("recheck", env, slurm=slurm)  # policy default: undrain_on_pass = false
    assert kept.action == "pass" and slurm.node("n2").drained
    resumed = gate("recheck", env, slurm=slurm, undrain=True)
    assert resumed.action == "resumed" and not slurm.node("n2").drained
    slurm.admin_drain("n2", "maintenance")
    assert gate("recheck", env, slurm=slurm, undrain=True).action == "pass"
    assert slurm.node("n2").reason == "maintenance"
    fault(tmp_path, "xid=79")
    fatal = gate("recheck", env, slurm=MemorySlurm("n2"))
    assert fatal.action == "drained" and fatal.exit_code == ExitCode.UNAVAILABLE


def test_our_own_failures_fail_open(env):
    bad = gate("prolog", {**env, "NVRX_HEALTH__PROLOG_BUDGET_S": "-1"}, slurm=MemorySlurm("n2"))
    assert bad.action == "error" and bad.exit_code == 0 and "prolog_budget_s" in bad.detail
    bad_backend = gate("prolog", {**env, "NVRX_GPU_BACKEND": "cuda"}, slurm=MemorySlurm("n2"))
    assert bad_backend.action == "error" and bad_backend.exit_code == 0


# ---- the real hook process


def hook(kind: str, env: dict[str, str], *args: str, timeout: float = 60) -> tuple[subprocess.CompletedProcess, float]:
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "nvrx_hpc", kind, *args], capture_output=True, text=True,
                          timeout=timeout, env={**env, "PYTHONPATH": str(REPO)}, check=False)  # fmt: skip
    return done, time.monotonic() - start


def test_prolog_process_fails_open_on_a_crashing_check_and_records_it(env, tmp_path):
    fault(tmp_path, "raise=gpu.clocks")
    log = tmp_path / "hooks.jsonl"
    done, _ = hook("prolog", {**env, "NVRX_HOOK_LOG": str(log)})
    assert done.returncode == 0, done.stderr
    assert "health check gpu.clocks crashed" in done.stderr
    record = json.loads(log.read_text().splitlines()[-1])
    assert record["hook"] == "prolog" and record["job"] == "42" and record["node"] == "n2"
    crashed = next(f for f in record["health"]["findings"] if f["check"] == "gpu.clocks")
    assert crashed["verdict"] == "error" and record["health"]["action"] == "pass"


def test_prolog_process_keeps_its_budget_when_a_check_hangs(env, tmp_path):
    fault(tmp_path, "hang=gpu.nvlink")
    log = tmp_path / "hooks.jsonl"
    done, took = hook("prolog", {**env, "NVRX_HOOK_LOG": str(log), "NVRX_HEALTH__PROLOG_BUDGET_S": "8"})
    assert done.returncode == 0, done.stderr
    assert took < 8 + 4, took  # the budget counts from the process start; the hung check never returns
    health = json.loads(log.read_text().splitlines()[-1])["health"]
    assert "gpu.nvlink" in health["timed_out"] and health["action"] == "pass"


def test_prolog_dry_run_prints_the_decision(env, tmp_path):
    fault(tmp_path, "temp=99", "ecc_uncorrected=4@3")
    done, _ = hook("prolog", env, "--dry-run")
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["action"] == "dry-run"
    assert out["reason"] == "nvrx: gpu.ecc: GPU 3: 4 uncorrectable ECC errors since the driver loaded"
    assert out["report"]["verdict"] == "fatal"
