"""Every GPU check against the simulated backend, through the real runner, with each policy branch."""

from __future__ import annotations

import time

import pytest
from _health_helpers import SimNode, policy

from nvrx_hpc.health.api import Level, Verdict
from nvrx_hpc.health.backends import NoGpuBackend
from nvrx_hpc.health.gpu_nvml import NvmlBackend
from nvrx_hpc.health.registry import REGISTRY, CheckContext, all_checks, select_checks
from nvrx_hpc.health.runner import run_one

all_checks()  # the check modules register on first use: a test run alone must not find REGISTRY empty

GPU_CHECKS = [
    "gpu.count", "gpu.xid", "gpu.ecc", "gpu.remapped_rows", "gpu.retired_pages", "gpu.recovery_action",
    "gpu.nvlink", "gpu.pcie", "gpu.clocks", "gpu.temperature", "gpu.processes",
]  # fmt: skip


@pytest.fixture
def sim(tmp_path) -> SimNode:
    node = SimNode(tmp_path)
    yield node
    node.gpu.close()


def test_registry_levels_and_order():
    quick = [c.name for c in select_checks(Level.QUICK)]
    full = [c.name for c in select_checks(Level.FULL)]
    assert quick[: len(GPU_CHECKS)] == GPU_CHECKS
    assert {"host.burst_buffer", "host.shm", "host.memory", "host.mounts"} <= set(quick)
    assert "gpu.dcgm" not in quick and "gpu.dcgm" in full


@pytest.mark.parametrize("check", GPU_CHECKS)
def test_healthy_sim_node_is_ok(sim, check):
    result = sim.run(check)
    assert result.verdict is Verdict.OK, result
    assert result.name == check and result.duration_s >= 0


@pytest.mark.parametrize("check", GPU_CHECKS)
def test_without_a_backend_gpu_checks_skip_clearly(tmp_path, check):
    ctx = CheckContext("n1", NoGpuBackend(), policy())
    result = run_one(REGISTRY[check], ctx)
    assert result.verdict is Verdict.SKIP
    assert "GPU checks are off" in result.detail


def test_nvml_without_gpu_says_no_gpu_nvml():
    """This machine has no GPU: NVML's library is missing, and the checks say so (no crash, no fallback)."""
    ctx = CheckContext("n1", NvmlBackend(), policy())
    count = run_one(REGISTRY["gpu.count"], ctx)
    assert count.verdict is Verdict.SKIP and count.detail.startswith("no GPU/NVML:")
    ecc = run_one(REGISTRY["gpu.ecc"], ctx)
    assert ecc.verdict is Verdict.SKIP and "no GPU/NVML" in ecc.detail
    xid = run_one(REGISTRY["gpu.xid"], ctx)  # the kernel log is still read
    assert xid.verdict in (Verdict.OK, Verdict.WARN, Verdict.FATAL) and "no GPU/NVML" in xid.detail


# ---- gpu.count


def test_count_missing_gpu_is_fatal_by_default_and_follows_policy(sim):
    sim.inject("missing=1")
    result = sim.run("gpu.count")
    assert result.verdict is Verdict.FATAL
    assert result.detail.startswith("3 of 4 GPUs visible to NVML (1 missing")
    assert sim.run("gpu.count", policy(gpu={"missing": "warn"})).verdict is Verdict.WARN


def test_count_expected_from_policy_wins(sim):
    result = sim.run("gpu.count", policy(gpu={"expected_count": 8}))
    assert result.verdict is Verdict.FATAL and "4 of 8 GPUs" in result.detail
    assert result.evidence["expected_from"] == "policy gpu.expected_count"


def test_count_zero_gpus_skips(sim):
    sim.inject("gpus=0")
    assert sim.run("gpu.count").verdict is Verdict.SKIP


# ---- gpu.xid


def test_fatal_xid_is_fatal_at_once(sim):
    sim.inject("xid=79@1")
    result = sim.run("gpu.xid")
    assert result.verdict is Verdict.FATAL
    assert result.detail == "Xid 79 on GPU 1 (GPU has fallen off the bus)"
    assert result.evidence["events"][0]["xid"] == 79


def test_application_xid_warns_then_repeats_to_fatal(sim):
    sim.inject("xid=13@2")
    once = sim.run("gpu.xid")
    assert once.verdict is Verdict.WARN and "1 time in 3600 s" in once.detail
    sim.inject("xid=13@2")
    time.sleep(0.01)
    sim.inject("xid=13@2")
    # The tracker de-duplicates the same Xid within 5 s (NVML and the kernel log both report it).
    assert sim.run("gpu.xid", policy(xid={"application_repeat": 2})).verdict is Verdict.WARN
    rows = [{"key": "xid", "value": 13, "gpu": 2, "seq": i, "time": time.time() - 60 * i} for i in range(1, 4)]
    _write_faults(sim, rows)
    fatal = sim.run("gpu.xid")
    assert fatal.verdict is Verdict.FATAL and "3 times in 3600 s" in fatal.detail


def test_unknown_xid_follows_policy_and_old_xids_are_ignored(sim):
    sim.inject("xid=999")
    assert sim.run("gpu.xid").verdict is Verdict.WARN
    assert sim.run("gpu.xid", policy(xid={"unknown": "ignore"})).verdict is Verdict.OK
    assert sim.run("gpu.xid", policy(xid={"unknown": "fatal"})).verdict is Verdict.FATAL
    _write_faults(sim, [{"key": "xid", "value": 79, "gpu": 0, "seq": 1, "time": time.time() - 7200}])
    assert sim.run("gpu.xid").verdict is Verdict.OK


def _write_faults(sim: SimNode, rows: list[dict]) -> None:
    import json

    path = sim.dir / f"{sim.node}.json"
    path.write_text(json.dumps({"version": 1, "node": sim.node, "faults": rows}))


# ---- ECC, remapping, retirement, recovery action


def test_ecc_thresholds(sim):
    sim.inject("ecc_uncorrected=2@3")
    result = sim.run("gpu.ecc")
    assert result.verdict is Verdict.FATAL and result.detail.startswith("GPU 3: 2 uncorrectable ECC errors")
    assert sim.run("gpu.ecc", policy(ecc={"uncorrected_fatal": 5})).verdict is Verdict.OK
    assert sim.run("gpu.ecc", policy(ecc={"uncorrected_fatal": 0})).verdict is Verdict.OK
    sim.inject("ecc_corrected=20000@1")
    warn = sim.run("gpu.ecc", policy(ecc={"uncorrected_fatal": 0}))
    assert warn.verdict is Verdict.WARN and "GPU 1: 20000 corrected" in warn.detail


@pytest.mark.parametrize(("fault", "key", "text"), [
    ("remap_pending=1", "pending", "row remap pending"),
    ("remap_failed=1", "failed", "row remapping failed"),
])  # fmt: skip
def test_remapped_rows_branches(sim, fault, key, text):
    sim.inject(fault)
    assert sim.run("gpu.remapped_rows").verdict is Verdict.FATAL
    assert text in sim.run("gpu.remapped_rows").detail
    assert sim.run("gpu.remapped_rows", policy(remapped_rows={key: "warn"})).verdict is Verdict.WARN
    assert sim.run("gpu.remapped_rows", policy(remapped_rows={key: "ignore"})).verdict is Verdict.OK


def test_retired_pages_branches(sim):
    sim.inject("retired_dbe=2")
    assert sim.run("gpu.retired_pages").verdict is Verdict.WARN
    assert sim.run("gpu.retired_pages", policy(retired_pages={"dbe_warn": 0})).verdict is Verdict.OK
    sim.inject("retired_pending=1")
    assert sim.run("gpu.retired_pages").verdict is Verdict.FATAL


def test_recovery_action(sim):
    sim.inject("recovery_action=2@1")
    result = sim.run("gpu.recovery_action")
    assert result.verdict is Verdict.FATAL and result.detail == "GPU 1: recovery action NODE_REBOOT required"
    assert sim.run("gpu.recovery_action", policy(recovery_action={"required": "warn"})).verdict is Verdict.WARN


# ---- NVLink and PCIe


def test_nvlink_down(sim):
    sim.inject("nvlink_down=2@0")
    result = sim.run("gpu.nvlink")
    assert result.verdict is Verdict.FATAL and result.detail == "GPU 0: NVLink 2 is down"
    assert sim.run("gpu.nvlink", policy(nvlink={"link_down": "warn"})).verdict is Verdict.WARN


def test_nvlink_growth_is_judged_per_window_and_repeats_to_fatal(sim):
    sim.inject("nvlink_errors=3@1")
    assert sim.run("gpu.nvlink").verdict is Verdict.OK  # first sample: no window yet
    second = sim.run("gpu.nvlink")
    assert second.verdict is Verdict.WARN and "NVLink 0 replay errors grew by 3 (1 window in a row)" in second.detail
    pol = policy(nvlink={"repeat_fatal": 2})
    assert sim.run("gpu.nvlink", pol).verdict is Verdict.FATAL
    assert sim.run("gpu.nvlink", policy(nvlink={"growth_warn": 10})).verdict is Verdict.OK  # below threshold


def test_nvlink_full_level_samples_twice(sim):
    sim.inject("nvlink_errors=5")
    result = sim.run("gpu.nvlink", policy(nvlink={"sample_s": 0.01}), level=Level.FULL)
    assert result.verdict is Verdict.WARN


def test_pcie_width_gen_and_replays(sim):
    sim.inject("pcie_width=8@2", "pcie_gen=3@2")
    quick = sim.run("gpu.pcie")
    assert quick.verdict is Verdict.WARN and quick.detail == "GPU 2: PCIe x8, below its x16"
    assert sim.run("gpu.pcie", policy(pcie={"width_below_max": "ignore"})).verdict is Verdict.OK
    full = sim.run("gpu.pcie", policy(pcie={"width_below_max": "ignore", "gen_below_max": "warn"}), Level.FULL)
    assert full.verdict is Verdict.WARN and "gen 3, below its gen 5" in full.detail


def test_pcie_replay_growth(sim):
    sim.inject("pcie_replays=500")
    sim.run("gpu.pcie")
    assert sim.run("gpu.pcie").verdict is Verdict.WARN
    assert sim.run("gpu.pcie", policy(pcie={"replay_repeat_fatal": 2})).verdict is Verdict.FATAL


# ---- clocks, temperature, processes


@pytest.mark.parametrize("reason", ["hw_slowdown", "sw_thermal", "hw_thermal", "power_brake"])
def test_clock_event_reasons(sim, reason):
    sim.inject(f"clocks={reason}@1")
    result = sim.run("gpu.clocks")
    assert result.verdict is Verdict.WARN and result.detail == f"GPU 1: clocks held down by {reason.replace('_', ' ')}"
    assert sim.run("gpu.clocks", policy(clocks={reason: "fatal"})).verdict is Verdict.FATAL
    assert sim.run("gpu.clocks", policy(clocks={reason: "ignore"})).verdict is Verdict.OK


def test_temperature_limits(sim):
    sim.inject("temp=90@0")
    assert sim.run("gpu.temperature").verdict is Verdict.WARN
    fatal = sim.run("gpu.temperature", policy(temperature={"fatal_c": 88}))
    assert fatal.verdict is Verdict.FATAL and fatal.detail == "GPU 0: 90 C (limit 88 C)"
    assert sim.run("gpu.temperature", policy(temperature={"warn_c": 0})).verdict is Verdict.OK


def test_leftover_processes_and_memory(sim):
    sim.inject("procs=2@3")
    result = sim.run("gpu.processes")
    assert result.verdict is Verdict.WARN and result.detail.startswith("GPU 3: 2 compute processes left")
    assert sim.run("gpu.processes", policy(processes={"leftover": "fatal"})).verdict is Verdict.FATAL
    sim.inject("procs=0@3", "mem_used_mib=4096@1")
    mem = sim.run("gpu.processes")
    assert mem.verdict is Verdict.WARN and mem.detail == "GPU 1: 4096 MiB of memory in use with no process"
    assert sim.run("gpu.processes", policy(processes={"memory_used_mib": 0})).verdict is Verdict.OK


# ---- backend faults that are findings, and our own failures


def test_lost_gpu_is_fatal_for_every_per_gpu_check(sim):
    sim.inject("lost=1@1")
    result = sim.run("gpu.ecc")
    assert result.verdict is Verdict.FATAL and "GPU 1 is lost" in result.detail


def test_a_check_that_raises_is_an_error_not_a_drain(sim):
    sim.inject("raise=gpu.temperature")
    result = sim.run("gpu.temperature")
    assert result.verdict is Verdict.ERROR
    assert result.detail.startswith("check crashed: RuntimeError: simulated internal error")


def test_dcgm_is_skipped_on_sim(sim):
    result = sim.run("gpu.dcgm", level=Level.FULL)
    assert result.verdict is Verdict.SKIP and "nvml backend only" in result.detail
