"""The agent's health loop (`HealthMonitor`) on its own, and the Prometheus endpoint scraped over HTTP."""

from __future__ import annotations

import threading
import time
import urllib.request
from collections.abc import Callable

import pytest
from _health_helpers import SimNode, policy

from nvrx_hpc.health.api import CheckResult, HealthReport, Verdict
from nvrx_hpc.health.gpu_sim import SimXidSource
from nvrx_hpc.health.metrics import HealthMetrics, start_metrics_server
from nvrx_hpc.health.monitor import HealthMonitor, default_xid_sources
from nvrx_hpc.health.xid import KernelLogXidSource


def wait_until(what: str, ok: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not ok():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


class Collector:
    def __init__(self) -> None:
        self.items: list[CheckResult] = []
        self.lock = threading.Lock()

    def __call__(self, result: CheckResult) -> None:
        with self.lock:
            self.items.append(result)

    def names(self) -> list[str]:
        with self.lock:
            return [r.name for r in self.items]


@pytest.fixture
def sim(tmp_path) -> SimNode:
    return SimNode(tmp_path)


def test_default_sources_for_sim_are_the_fault_file_only(sim):
    sources = default_xid_sources(sim.gpu)
    assert len(sources) == 1 and isinstance(sources[0], SimXidSource)


def test_xid_during_a_run_is_delivered_once(sim):
    got = Collector()
    metrics = HealthMetrics("n2")
    with HealthMonitor(node="n2", gpu=sim.gpu, policy=policy(), on_fatal=got, interval_s=0.2, metrics=metrics) as mon:
        wait_until("a first run", lambda: mon.last_report is not None)
        assert got.items == []
        sim.inject("xid=79@1")
        wait_until("the Xid", lambda: got.items)
        time.sleep(0.5)  # several periodic runs see the same Xid in the fault file
        assert mon.running
    assert not mon.running
    assert got.names() == ["gpu.xid"]
    assert got.items[0].detail == "Xid 79 on GPU 1 (GPU has fallen off the bus)"
    assert got.items[0].evidence["event"]["source"] == "sim"
    assert mon.fatal_findings == got.items


def test_periodic_fatal_is_delivered_once_and_again_after_recovery(sim):
    got = Collector()
    mon = HealthMonitor(node="n2", gpu=sim.gpu, policy=policy(), on_fatal=got, interval_s=60, xid_sources=[])
    sim.inject("remap_pending=1@2")
    assert mon.run_once().verdict is Verdict.FATAL
    mon.run_once()
    assert got.names() == ["gpu.remapped_rows"]
    sim.inject("remap_pending=0@2")
    assert mon.run_once().verdict is Verdict.OK
    sim.inject("remap_pending=1@2")
    mon.run_once()
    assert got.names() == ["gpu.remapped_rows", "gpu.remapped_rows"]
    mon.stop()


def test_flaky_nvlink_turns_fatal_across_runs(sim):
    got = Collector()
    mon = HealthMonitor(node="n2", gpu=sim.gpu, policy=policy(nvlink={"repeat_fatal": 2}), on_fatal=got,
                        interval_s=60, xid_sources=[])  # fmt: skip
    sim.inject("nvlink_errors=4@0")
    verdicts = [next(r for r in mon.run_once().results if r.name == "gpu.nvlink").verdict for _ in range(3)]
    assert verdicts == [Verdict.OK, Verdict.WARN, Verdict.FATAL]
    assert got.names() == ["gpu.nvlink"]
    mon.stop()


def test_callback_errors_do_not_stop_the_monitor(sim):
    calls: list[CheckResult] = []

    def explode(result: CheckResult) -> None:
        calls.append(result)
        raise RuntimeError("launcher unreachable")

    reports: list[HealthReport] = []
    with HealthMonitor(node="n2", gpu=sim.gpu, policy=policy(), on_fatal=explode, on_report=reports.append,
                       interval_s=0.1) as mon:  # fmt: skip
        sim.inject("xid=48@0")
        wait_until("the Xid", lambda: calls)
        sim.inject("xid=79@3")
        wait_until("the second Xid", lambda: len(calls) >= 2)
        count = len(reports)
        wait_until("more runs", lambda: len(reports) > count + 1)
        assert mon.running


def test_kernel_log_listener_feeds_the_monitor(sim, tmp_path):
    log = tmp_path / "kern.log"
    log.write_text("")
    got = Collector()
    source = KernelLogXidSource(log)
    with HealthMonitor(node="n2", gpu=sim.gpu, policy=policy(), on_fatal=got, interval_s=60, xid_sources=[source]):
        with open(log, "a") as f:
            f.write("[ 99.1] NVRM: Xid (PCI:0000:19:00): 94, pid=7, Contained: SM (0x1)\n")
        wait_until("the kernel-log Xid", lambda: got.items)
    assert got.items[0].detail == "Xid 94 on PCI 0000:19:00 (contained ECC error)"


def test_interval_must_be_positive(sim):
    with pytest.raises(ValueError):
        HealthMonitor(node="n2", gpu=sim.gpu, policy=policy(), on_fatal=print, interval_s=0)


# ---- metrics over real HTTP


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        assert resp.status == 200
        return resp.read().decode()


def test_metrics_are_served_and_follow_the_monitor(sim):
    metrics = HealthMetrics("n2")
    server = start_metrics_server(0, metrics, addr="127.0.0.1")
    try:
        assert server.port > 0
        assert 'nvrx_health_node_fatal{node="n2"} 0.0' in scrape(server.port)
        got = Collector()
        sim.inject("temp=90@1")
        mon = HealthMonitor(node="n2", gpu=sim.gpu, policy=policy(), on_fatal=got, interval_s=60, metrics=metrics)
        with mon:
            wait_until("a first run", lambda: mon.last_report is not None)
            metrics.set_rank(0, alive=True, last_heartbeat=1700000000.0)
            metrics.set_rank(1, alive=False)
            text = scrape(server.port)
            state = 'nvrx_health_check_state{check="gpu.temperature",node="n2",nvrx_health_check_state="warn"} 1.0'
            assert state in text
            assert 'nvrx_health_check_state{check="gpu.ecc",node="n2",nvrx_health_check_state="ok"} 1.0' in text
            assert 'nvrx_health_check_duration_seconds{check="gpu.ecc",node="n2"}' in text
            assert 'nvrx_rank_alive{node="n2",rank="0"} 1.0' in text
            assert 'nvrx_rank_alive{node="n2",rank="1"} 0.0' in text
            assert 'nvrx_rank_last_heartbeat_timestamp_seconds{node="n2",rank="0"} 1.7e+09' in text

            sim.inject("xid=79@2")  # seen by the monitor's sim Xid listener
            wait_until("the Xid", lambda: got.items)
            text = scrape(server.port)
            assert 'nvrx_health_xid_events_total{gpu="2",node="n2",xid="79"} 1.0' in text
            assert 'nvrx_health_fatal_findings_total{check="gpu.xid",node="n2"} 1.0' in text
            assert 'nvrx_health_node_fatal{node="n2"} 1.0' in text
            metrics.remove_rank(1)
            assert 'rank="1"' not in scrape(server.port)
    finally:
        server.close()


def test_metrics_port_in_use_raises(sim):
    metrics = HealthMetrics("n2")
    first = start_metrics_server(0, metrics, addr="127.0.0.1")
    try:
        with pytest.raises(OSError):
            start_metrics_server(first.port, HealthMetrics("n3"), addr="127.0.0.1")
    finally:
        first.close()
