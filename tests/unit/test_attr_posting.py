"""Posting backends against a real local HTTP server: webhook retries with backoff, no retry on 4xx,
timeouts, the Slack-compatible message, the file backend, the Slurm comment through a backend object,
and one failing backend never stops the others."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from nvrx_hpc.attribution.posting import http_post, post_report, summary_line
from nvrx_hpc.attribution.settings import AttributionSettings, load_settings
from nvrx_hpc.core.errors import AttributionError, ConfigError

REPORT = {
    "job_id": "77", "run_dir": "/runs/77", "category": "gpu_hardware", "root_cause": "Xid 79 on n3",
    "culprit": {"nodes": ["n3"], "ranks": [5], "gpus": ["n3:0"]}, "restartable": True, "confidence": 0.9,
}  # fmt: skip


class Hook:
    """A local HTTP server that answers with `statuses` in turn (then 200) and keeps what it got."""

    def __init__(self, statuses=(), delay: float = 0.0) -> None:
        self.statuses = list(statuses)
        self.delay = delay
        self.requests: list[tuple[str, dict, dict]] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.requests.append((self.path, dict(self.headers), body))
                time.sleep(hook.delay)
                status = hook.statuses.pop(0) if hook.statuses else 200
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b'{"ok": true}')

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    servers = []

    def make(*statuses, delay=0.0):
        servers.append(Hook(statuses, delay))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def settings(**kw) -> AttributionSettings:
    return AttributionSettings(post_backoff_s=0.01, post_timeout_s=2, **kw)


def test_webhook_retries_5xx_then_succeeds(hook):
    h = hook(503, 502)
    sleeps = []
    status, _ = http_post(h.url, REPORT, retries=3, backoff=0.5, sleep=sleeps.append)
    assert status == 200 and len(h.requests) == 3 and sleeps == [0.5, 1.0]
    assert h.requests[-1][2]["category"] == "gpu_hardware"


def test_webhook_gives_up_and_4xx_is_not_retried(hook):
    h = hook(500, 500, 500)
    with pytest.raises(AttributionError, match="failed after 3 attempt"):
        http_post(h.url, REPORT, retries=2, backoff=0, sleep=lambda s: None)
    h2 = hook(400)
    with pytest.raises(AttributionError, match="refused: HTTP 400"):
        http_post(h2.url, REPORT, retries=3, sleep=lambda s: None)
    assert len(h2.requests) == 1


def test_webhook_timeout_counts_as_a_failed_attempt(hook):
    h = hook(delay=1.0)
    started = time.monotonic()
    with pytest.raises(AttributionError, match="failed after 2 attempt"):
        http_post(h.url, REPORT, timeout=0.2, retries=1, backoff=0, sleep=lambda s: None)
    assert time.monotonic() - started < 10  # two 0.2 s timeouts, not the server's delay


def test_backends_each_do_their_job(hook, tmp_path):
    web, slack = hook(), hook()

    class FakeSlurm:  # the adapter's SlurmBackend seam: only set_comment is used
        comments: list = []

        def set_comment(self, job_id, text):
            self.comments.append((job_id, text))

    slurm = FakeSlurm()
    s = settings(webhook_url=web.url, webhook_token="t0k", slack_url=slack.url, file_path=str(tmp_path / "r.jsonl"),
                 post=("file", "webhook", "slack", "slurm_comment"))  # fmt: skip
    results = post_report(REPORT, s, slurm=slurm)
    assert [(r.backend, r.ok) for r in results] == [("file", True), ("webhook", True), ("slack", True),
                                                    ("slurm_comment", True)]  # fmt: skip
    assert web.requests[0][1]["Authorization"] == "Bearer t0k" and web.requests[0][2]["job_id"] == "77"
    assert slack.requests[0][2]["text"].startswith("nvrx: job 77 gpu_hardware nodes=n3 ranks=5")
    line = json.loads((tmp_path / "r.jsonl").read_text())
    assert line["category"] == "gpu_hardware" and line["culprit"]["nodes"] == ["n3"]
    assert slurm.comments == [(77, "nvrx: gpu_hardware nodes=n3 restartable=yes conf=0.90")]


def test_a_failing_backend_never_blocks_the_others(hook, tmp_path):
    web = hook()
    s = settings(webhook_url=web.url, slack_url="http://127.0.0.1:9/none", post_retries=0)
    results = post_report(REPORT, s, backends=["slack", "service", "bogus", "webhook"])
    assert [(r.backend, r.ok) for r in results] == [("slack", False), ("service", False), ("bogus", False),
                                                    ("webhook", True)]  # fmt: skip
    assert "no service_url set" in results[1].detail and "unknown backend" in results[2].detail
    assert len(web.requests) == 1


def test_summary_line():
    assert summary_line(REPORT) == "nvrx: job 77 gpu_hardware nodes=n3 ranks=5 restartable=yes conf=0.90: Xid 79 on n3"


def test_settings_precedence_and_errors(tmp_path):
    f = tmp_path / "config.toml"
    f.write_text('[attribution]\npost = ["file"]\nwebhook_url = "http://file"\npost_retries = 1\n')
    env = {"NVRX_ATTRIBUTION__POST": "webhook, slack", "NVRX_ATTRIBUTION__POST_RETRIES": "4"}
    s = load_settings(env, overrides={"post_retries": 2}, path=f)
    assert s.post == ("webhook", "slack") and s.webhook_url == "http://file" and s.post_retries == 2
    assert load_settings({"NVRX_ATTR_POST_RETRIES": "4"}, path=f).post_retries == 4  # the old name, deprecated
    with pytest.raises(ConfigError, match=r"post_retries = '99' \(from environment variable NVRX_ATTR_POST_RETRIES\)"):
        load_settings({"NVRX_ATTR_POST_RETRIES": "99"}, path=f)
    with pytest.raises(ConfigError, match="does not exist"):
        load_settings({"NVRX_ATTR_CONFIG": str(tmp_path / "nope.toml")})
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    assert load_settings({"NVRX_ATTR_SERVICE_TOKEN_FILE": str(token)}, path=f).token() == "s3cret"
    with pytest.raises(ConfigError, match="cannot read the service token"):
        AttributionSettings(service_token_file=str(tmp_path / "missing")).token()
    assert load_settings({}, path=Path("/dev/null")).post == ()
