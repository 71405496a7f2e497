"""Kernel-log Xid parsing and following, the Xid tracker, and the runner's budget for hanging checks."""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path

import pytest
from _health_helpers import SimNode, policy

from nvrx_hpc.health.api import Level, Verdict, XidEvent
from nvrx_hpc.health.registry import select_checks
from nvrx_hpc.health.runner import run_checks
from nvrx_hpc.health.xid import KMSG_PATH, KernelLogXidSource, XidTracker, parse_xid_line, pci_key, read_kernel_xids

LINE = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus."


@pytest.mark.parametrize(("line", "xid", "pci"), [
    (f"[ 1234.567890] {LINE}", 79, "0000:3b:00"),
    (f"4,2231,1234567890,-;{LINE}", 79, "0000:3b:00"),
    (f"Dec 02 12:00:00 gpu17 kernel: {LINE}", 79, "0000:3b:00"),
    ("NVRM: Xid (0000:86:00): 13, Graphics Exception: ESR 0x404600", 13, "0000:86:00"),
    ("NVRM: Xid (PCI:0000:ca:00): 154, GPU recovery action changed from 0x0 (None) to 0x2 (Node Reboot)", 154,
     "0000:ca:00"),
])  # fmt: skip
def test_parse_xid_lines(line, xid, pci):
    event = parse_xid_line(line)
    assert event is not None and event.xid == xid and event.pci_bus_id == pci


def test_parse_keeps_the_text_and_converts_boot_times():
    event = parse_xid_line(f"4,2231,2000000,-;{LINE}", boot_time=1000.0)
    assert event.time == pytest.approx(1002.0)
    assert event.detail == "pid=1234, name=python, GPU has fallen off the bus"
    assert math.isnan(parse_xid_line(LINE).time)


@pytest.mark.parametrize("line", ["", "NVRM: GPU at PCI:0000:3b:00: GPU-abc", "Xid 79 mentioned in passing"])
def test_lines_without_an_xid(line):
    assert parse_xid_line(line) is None


def test_pci_keys_match_across_sources():
    assert pci_key("PCI:0000:3B:00") == pci_key("00000000:3b:00.0") == "3b:00"
    assert pci_key(None) is None and pci_key("garbage") is None


def test_read_kernel_xids_from_a_text_log(tmp_path):
    log = tmp_path / "kern.log"
    recent = time.monotonic() - 10  # dmesg stamps are seconds since boot
    old = max(time.monotonic() - 7200, 0.5)
    log.write_text(f"hello\n{LINE}\n[{recent:.3f}] NVRM: Xid (PCI:0000:3c:00): 48, DBE\n"
                   f"[{old:.3f}] NVRM: Xid (PCI:0000:3d:00): 63, old\n")  # fmt: skip
    events, note = read_kernel_xids(3600, log)
    expected = [79, 48] if time.monotonic() - old > 3600 else [79, 48, 63]  # a young machine has no 2 h old line
    assert [e.xid for e in events] == expected and note is None


def test_read_kernel_xids_says_why_when_unreadable(tmp_path):
    events, note = read_kernel_xids(3600, tmp_path / "missing")
    assert events == [] and "unreadable" in note


@pytest.mark.skipif(not KMSG_PATH.exists(), reason="no /dev/kmsg")
def test_read_real_kmsg_does_not_raise():
    events, note = read_kernel_xids(60)
    assert isinstance(events, list) and (note is None or "unreadable" in note)


def test_kernel_log_source_follows_new_lines_only(tmp_path):
    log = tmp_path / "kern.log"
    log.write_text(f"{LINE}\n")  # an old Xid: not reported by a listener started later
    source = KernelLogXidSource(log)
    try:
        assert source.poll(0.05) == []
        with open(log, "a") as f:
            f.write("NVRM: Xid (PCI:0000:3b:00): 48, pid=1, DBE\nNVRM: Xid (PCI:0000:3b:00): 9")  # half a line
        assert [e.xid for e in source.poll(1.0)] == [48]
        with open(log, "a") as f:
            f.write("4, pid=2, rest\n")
        assert [e.xid for e in source.poll(1.0)] == [94]
    finally:
        source.close()
    assert source.poll(0.01) == []


def test_tracker_dedups_and_counts_repeats():
    tracker = XidTracker(policy(xid={"application_repeat": 2}).xid, dedup_s=5.0)
    now = time.time()
    first = XidEvent(13, gpu=0, pci_bus_id="00000000:18:00.0", time=now)
    assert tracker.add(first) == (Verdict.WARN, "Xid 13 on GPU 0 (graphics engine exception), 1 time in 3600 s")
    same_from_kmsg = XidEvent(13, pci_bus_id="PCI:0000:18:00", time=now + 1)
    assert tracker.add(same_from_kmsg) is None
    verdict, detail = tracker.add(XidEvent(13, gpu=0, pci_bus_id="0000:18:00", time=now + 60))
    assert verdict is Verdict.FATAL and "2 times" in detail
    assert tracker.add(XidEvent(79, gpu=1, time=now))[0] is Verdict.FATAL


# ---- runner


def test_hanging_check_is_reported_within_the_budget(tmp_path):
    sim = SimNode(tmp_path, hang_s=30)
    sim.inject("hang=gpu.ecc")
    checks = select_checks(Level.QUICK)
    start = time.monotonic()
    try:
        report = run_checks(checks, sim.context(), budget_s=3, backend="sim")
    finally:
        sim.gpu.close()  # releases the hung thread
    took = time.monotonic() - start
    assert took < 3 + 2, took  # the hung check alone would take 30 s
    assert "gpu.ecc" in report.timed_out
    hung = next(r for r in report.results if r.name == "gpu.ecc")
    assert hung.verdict is Verdict.ERROR and hung.detail.startswith("timed out: still running after the 3 s")
    assert report.verdict is Verdict.ERROR and not report.fatal
    assert [r.name for r in report.results] == [c.name for c in checks]


def test_timeouts_can_be_made_fatal_by_policy(tmp_path):
    sim = SimNode(tmp_path, hang_s=30)
    sim.inject("hang=gpu.temperature")
    try:
        report = run_checks(select_checks(Level.QUICK, ["gpu.temperature"]),
                            sim.context(policy(gate={"timeout": "fatal"})), budget_s=0.2, backend="sim")  # fmt: skip
    finally:
        sim.gpu.close()
    assert [r.name for r in report.fatal] == ["gpu.temperature"]


def test_a_hung_check_is_not_started_twice(tmp_path):
    sim = SimNode(tmp_path, hang_s=30)
    sim.inject("hang=gpu.ecc")
    inflight: dict[str, threading.Thread] = {}
    checks = select_checks(Level.QUICK, ["gpu.ecc", "gpu.count"])
    try:
        run_checks(checks, sim.context(), budget_s=0.2, backend="sim", inflight=inflight)
        first = inflight["gpu.ecc"]
        again = run_checks(checks, sim.context(), budget_s=0.2, backend="sim", inflight=inflight)
        assert inflight["gpu.ecc"] is first
        assert "still running from an earlier run" in again.results[0].detail
    finally:
        sim.gpu.close()
    first.join(5)
    assert not first.is_alive()


def test_report_serialises(tmp_path):
    sim = SimNode(tmp_path)
    report = run_checks(select_checks(Level.QUICK), sim.context(), budget_s=5, backend="sim")
    data = report.to_dict()
    assert data["verdict"] == "ok" and data["node"] == "n2" and len(data["results"]) == len(report.results)
    assert Path(str(tmp_path)).exists()
