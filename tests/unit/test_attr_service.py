"""The attribution service on a real uvicorn server on 127.0.0.1: token auth, request limits, submit and
fetch, node history with drain advice, and `nvrx-hpc attribute --server` / `nvrx-hpc serve` end to end."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
uvicorn = pytest.importorskip("uvicorn")

from nvrx_hpc.attribution.client import ServiceClient  # noqa: E402
from nvrx_hpc.attribution.service import create_app  # noqa: E402
from nvrx_hpc.attribution.settings import AttributionSettings  # noqa: E402
from nvrx_hpc.attribution.store import ReportStore  # noqa: E402
from nvrx_hpc.core.errors import AttributionError  # noqa: E402
from nvrx_hpc.core.exit_codes import ExitCode  # noqa: E402

TOKEN = "test-token-123"
REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO / "tests" / "fixtures" / "logs"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Running:
    def __init__(self, tmp: Path, rate: int = 600, max_body: int = 64 * 1024) -> None:
        settings = AttributionSettings(serve_max_body_bytes=max_body, drain_after=3)
        self.store = ReportStore(tmp / "svc.sqlite")
        app = create_app(settings, self.store, token=TOKEN, rate_per_minute=rate)
        port = _free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(10)
        self.store.close()


@pytest.fixture
def svc(tmp_path):
    running = Running(tmp_path)
    yield running
    running.stop()


def request(url: str, body: bytes | None = None, token: str | None = TOKEN, headers=None) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, method="POST" if body is not None else "GET")
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    req.add_header("Content-Type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def report(category: str, nodes: list[str], job: str = "1") -> dict:
    return {"job_id": job, "category": category, "root_cause": "x", "restartable": True, "confidence": 0.8,
            "culprit": {"nodes": nodes, "ranks": [0], "gpus": []}}  # fmt: skip


def test_auth_is_required_except_for_healthz(svc):
    assert request(f"{svc.url}/healthz", token=None) == (200, {"status": "ok"})
    assert request(f"{svc.url}/v1/nodes", token=None)[0] == 401
    assert request(f"{svc.url}/v1/nodes", token="wrong")[0] == 401
    assert request(f"{svc.url}/v1/nodes")[0] == 200


def test_submit_fetch_and_list(svc):
    status, body = request(f"{svc.url}/v1/reports", json.dumps(report("gpu_hardware", ["n3"], "99")).encode())
    assert status == 201 and body["job_id"] == "99" and body["nodes"][0]["node"] == "n3"
    status, got = request(f"{svc.url}/v1/reports/{body['id']}")
    assert status == 200 and got["report"]["category"] == "gpu_hardware"
    assert request(f"{svc.url}/v1/reports/999999")[0] == 404
    status, listing = request(f"{svc.url}/v1/reports?job_id=99")
    assert status == 200 and [r["id"] for r in listing] == [body["id"]]
    assert request(f"{svc.url}/v1/reports?limit=0")[0] == 422


def test_request_limits(svc):
    big = json.dumps({**report("host", ["n1"]), "pad": "x" * 70_000}).encode()
    assert request(f"{svc.url}/v1/reports", big)[0] == 413
    assert request(f"{svc.url}/v1/reports", b"[1, 2]")[0] == 422
    assert request(f"{svc.url}/v1/reports", b"{not json")[0] == 400
    bad = report("cosmic_rays", ["n1"])
    status, body = request(f"{svc.url}/v1/reports", json.dumps(bad).encode())
    assert status == 422 and "category must be one of" in body["detail"]


def test_node_history_recommends_draining_repeat_offenders(svc):
    for i in range(3):
        request(f"{svc.url}/v1/reports", json.dumps(report("gpu_hardware", ["n3"], str(i))).encode())
        request(f"{svc.url}/v1/reports", json.dumps(report("application", ["n4"], str(i))).encode())
    history = {h["node"]: h for h in ServiceClient(svc.url, TOKEN).nodes()}
    assert history["n3"]["drain"] and history["n3"]["culprit_count"] == 3 and "nvrx:" in history["n3"]["reason"]
    assert not history["n4"]["drain"] and history["n4"]["culprit_count"] == 3  # the workload's fault, not n4's
    with pytest.raises(AttributionError, match="HTTP 401"):
        ServiceClient(svc.url, "wrong").nodes()


def test_rate_limit(tmp_path):
    running = Running(tmp_path, rate=3)
    try:
        codes = [request(f"{running.url}/v1/nodes")[0] for _ in range(5)]
        assert codes == [200, 200, 200, 429, 429]
    finally:
        running.stop()


def _cli(*args: str, **env: str) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("NVRX_")}
    full.update({"NVRX_ATTR_CONFIG": "/dev/null", "PYTHONPATH": str(REPO), **env})
    return subprocess.run([sys.executable, "-m", "nvrx_hpc", *args], capture_output=True, text=True, env=full,
                          timeout=60)  # fmt: skip


def test_attribute_server_client(svc, tmp_path):
    run = shutil.copytree(CORPUS / "gpu_ecc_cascade", tmp_path / "555")
    done = _cli("attribute", str(run), "--server", svc.url, "--json", NVRX_ATTR_SERVICE_TOKEN=TOKEN)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out["service"]["job_id"] == "555" and out["service"]["nodes"][0]["node"] == "n2"
    rid = str(out["service"]["id"])
    fetched = _cli("attribute", "--server", svc.url, "--fetch", rid, NVRX_ATTR_SERVICE_TOKEN=TOKEN)
    assert json.loads(fetched.stdout)["report"]["culprit"]["ranks"] == [5]
    nodes = _cli("attribute", "--server", svc.url, "--nodes", "--json", NVRX_ATTR_SERVICE_TOKEN=TOKEN)
    assert [n["node"] for n in json.loads(nodes.stdout)] == ["n2"]
    refused = _cli("attribute", str(run), "--server", svc.url, "--no-write", NVRX_ATTR_SERVICE_TOKEN="nope")
    assert refused.returncode == ExitCode.USAGE and "HTTP 401" in refused.stderr


def test_serve_command(tmp_path):
    assert "needs a token" in _cli("serve", "--db", str(tmp_path / "a.sqlite")).stderr
    port = _free_port()
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    full = {k: v for k, v in os.environ.items() if not k.startswith("NVRX_")}
    full.update({"NVRX_ATTR_CONFIG": "/dev/null", "PYTHONPATH": str(REPO)})
    proc = subprocess.Popen([sys.executable, "-m", "nvrx_hpc", "serve", "--port", str(port), "--db",
                             str(tmp_path / "s.sqlite"), "--token-file", str(token)], env=full,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                assert request(f"http://127.0.0.1:{port}/v1/nodes") == (200, [])
                break
            except (urllib.error.URLError, ConnectionError):
                assert time.monotonic() < deadline and proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.2)
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.mark.parametrize("body", [
    b"[" * 30_000 + b"]" * 30_000,  # nested deeper than Python recurses (and under the size limit)
    json.dumps({**report("host", ["n1"]), "category": ["host"]}).encode(),  # unhashable category
    json.dumps({**report("host", ["n1"]), "culprit": {"nodes": 5}}).encode(),
    json.dumps({**report("host", ["n1"]), "culprit": [1]}).encode(),
    json.dumps({**report("host", ["n1"]), "job_id": {"x": 1}}).encode(),
])  # fmt: skip
def test_hostile_service_input_is_a_client_error(svc, body):
    status, _ = request(f"{svc.url}/v1/reports", body)
    assert status in (400, 422)
    assert request(f"{svc.url}/healthz", token=None)[0] == 200
