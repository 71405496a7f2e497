"""Prometheus metrics for node health and rank liveness, served by the node agent (`--metrics-port`).

`HealthMetrics` owns its own `CollectorRegistry` (several agents or tests in one process never
collide); `start_metrics_server(port, metrics)` serves it at `http://<addr>:<port>/metrics` from a
daemon thread. Metrics (all labelled with `node`):

| metric | type | meaning |
|---|---|---|
| `nvrx_health_check_state{check,nvrx_health_check_state}` | stateset | last verdict: ok/skip/warn/error/fatal |
| `nvrx_health_check_duration_seconds{check}` | gauge | how long the check took last time |
| `nvrx_health_last_run_timestamp_seconds` | gauge | when the checks last ran (Unix time) |
| `nvrx_health_node_fatal` | gauge | 1 once a fatal finding was delivered, or the last run found one |
| `nvrx_health_xid_events_total{gpu,xid}` | counter | Xid events seen by the listeners |
| `nvrx_health_fatal_findings_total{check}` | counter | fatal findings delivered |
| `nvrx_rank_alive{rank}` | gauge | 1 while the rank is registered and not exited or hung |
| `nvrx_rank_last_heartbeat_timestamp_seconds{rank}` | gauge | the rank's last heartbeat (Unix time) |
| `nvrx_straggler_score{rank}` | gauge | the launcher's last straggler score of the rank (1: typical, lower: slower) |
| `nvrx_straggler_flagged{rank}` | gauge | 1 while the launcher flags the rank as a straggler |
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Enum, Gauge, make_wsgi_app

from nvrx_hpc.health.api import CheckResult, HealthReport, Verdict, XidEvent

__all__ = ["HealthMetrics", "MetricsServer", "start_metrics_server"]

_STATES = [v.value for v in (Verdict.OK, Verdict.SKIP, Verdict.WARN, Verdict.ERROR, Verdict.FATAL)]


class HealthMetrics:
    """The agent's metrics for one node. Thread-safe (prometheus-client metrics are)."""

    def __init__(self, node: str, registry: CollectorRegistry | None = None) -> None:
        self.node = node
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.check_state = Enum("nvrx_health_check_state", "Last verdict of each health check.",
                                ["node", "check"], states=_STATES, registry=r)  # fmt: skip
        self.check_duration = Gauge("nvrx_health_check_duration_seconds", "Duration of the last run of each check.",
                                    ["node", "check"], registry=r)  # fmt: skip
        self.last_run = Gauge("nvrx_health_last_run_timestamp_seconds", "When the checks last ran.", ["node"],
                              registry=r)  # fmt: skip
        self.node_fatal = Gauge("nvrx_health_node_fatal", "1 when the node was found unusable.", ["node"], registry=r)
        self.xids = Counter("nvrx_health_xid_events", "Xid events seen.", ["node", "gpu", "xid"], registry=r)
        self.fatal_findings = Counter("nvrx_health_fatal_findings", "Fatal findings delivered.", ["node", "check"],
                                      registry=r)  # fmt: skip
        self.rank_alive = Gauge("nvrx_rank_alive", "1 while the rank is alive.", ["node", "rank"], registry=r)
        self.rank_heartbeat = Gauge("nvrx_rank_last_heartbeat_timestamp_seconds", "Last heartbeat of the rank.",
                                    ["node", "rank"], registry=r)  # fmt: skip
        self.straggler_score = Gauge("nvrx_straggler_score", "Straggler score of the rank (1: typical).",
                                     ["node", "rank"], registry=r)  # fmt: skip
        self.straggler_flagged = Gauge("nvrx_straggler_flagged", "1 while the rank is flagged as a straggler.",
                                       ["node", "rank"], registry=r)  # fmt: skip
        self.node_fatal.labels(node).set(0)
        self._fatal_seen = False  # a delivered fatal finding keeps the node marked until the agent ends

    def observe_report(self, report: HealthReport) -> None:
        """Record every check's verdict and duration from one run."""
        for result in report.results:
            self.check_state.labels(self.node, result.name).state(result.verdict.value)
            self.check_duration.labels(self.node, result.name).set(result.duration_s)
        self.last_run.labels(self.node).set(report.started + report.duration_s)
        self.node_fatal.labels(self.node).set(1 if report.fatal or self._fatal_seen else 0)

    def observe_fatal(self, result: CheckResult) -> None:
        """A fatal finding delivered to the launcher (from a run or an Xid event)."""
        self.fatal_findings.labels(self.node, result.name).inc()
        self._fatal_seen = True
        self.node_fatal.labels(self.node).set(1)

    def observe_xid(self, event: XidEvent) -> None:
        gpu = str(event.gpu) if event.gpu is not None else (event.pci_bus_id or "unknown")
        self.xids.labels(self.node, gpu, str(event.xid)).inc()

    def set_rank(self, rank: int, *, alive: bool, last_heartbeat: float | None = None) -> None:
        """For the agent's rank registry: liveness and last heartbeat (Unix time) of one rank."""
        self.rank_alive.labels(self.node, str(rank)).set(1 if alive else 0)
        if last_heartbeat is not None:
            self.rank_heartbeat.labels(self.node, str(rank)).set(last_heartbeat)

    def set_straggler(self, rank: int, *, score: float | None, flagged: bool) -> None:
        """The launcher's straggler view of one rank (sent to the agents after every scored window)."""
        if isinstance(score, (int, float)):
            self.straggler_score.labels(self.node, str(rank)).set(float(score))
        self.straggler_flagged.labels(self.node, str(rank)).set(1 if flagged else 0)

    def remove_rank(self, rank: int) -> None:
        for gauge in (self.rank_alive, self.rank_heartbeat):
            try:
                gauge.remove(self.node, str(rank))
            except KeyError:
                pass


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


@dataclass
class MetricsServer:
    """A running metrics endpoint; `port` is the bound port (useful with port 0). Call `close()`."""

    server: WSGIServer
    thread: threading.Thread

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def start_metrics_server(port: int, metrics: HealthMetrics, *, addr: str = "0.0.0.0") -> MetricsServer:
    """Serve `metrics` at http://addr:port/metrics from a daemon thread. Port 0 picks a free port.

    Raises:
        OSError: the port is taken or the address cannot be bound.
    """
    app = make_wsgi_app(metrics.registry)
    server = make_server(addr, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name=f"nvrx-metrics-{port}", daemon=True)
    thread.start()
    return MetricsServer(server, thread)
