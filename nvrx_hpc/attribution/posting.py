"""Posting backends: where a finished report goes besides the run directory.

`file` appends one JSON line per report; `webhook` POSTs report.json; `slack` POSTs a Slack-compatible
`{"text": ...}` message; `slurm_comment` sets the job's Comment through the Slurm adapter; `service`
submits the report to `nvrx-hpc serve`. HTTP attempts have a deadline and are retried with doubling
delays on network errors, 408, 425, 429 and 5xx. A backend that fails is logged and reported in the
results; it never raises and never stops the others.
"""

from __future__ import annotations

import json
import logging
import os
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nvrx_hpc.attribution.settings import AttributionSettings
from nvrx_hpc.core.errors import AttributionError

__all__ = ["PostResult", "post_report", "summary_line", "http_post", "RETRY_STATUS"]

log = logging.getLogger(__name__)
RETRY_STATUS = frozenset({408, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class PostResult:
    backend: str
    ok: bool
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"backend": self.backend, "ok": self.ok, "detail": self.detail}


def summary_line(report: Mapping[str, Any]) -> str:
    """One line: job, category, culprit, restartable, confidence, root cause."""
    c = report.get("culprit", {})
    where = ",".join(c.get("nodes", [])) or "-"
    ranks = ",".join(str(r) for r in c.get("ranks", [])[:8]) or "-"
    return (
        f"nvrx: job {report.get('job_id') or '?'} {report.get('category')} nodes={where} ranks={ranks} "
        f"restartable={'yes' if report.get('restartable') else 'no'} conf={report.get('confidence', 0):.2f}: "
        f"{report.get('root_cause', '')}"
    )


def http_post(
    url: str,
    payload: Any,
    *,
    headers: Mapping[str, str] | None = None,
    timeout: float = 5.0,
    retries: int = 3,
    backoff: float = 0.5,
    sleep: Callable[[float], None] = time.sleep,
) -> tuple[int, bytes]:
    """POST `payload` as JSON; return (status, body) of the first success.

    Raises:
        AttributionError: every attempt failed, or the server refused with a status not worth retrying.
    """
    if not url.startswith(("http://", "https://")):
        raise AttributionError(f"{url!r} is not an http(s) URL", hint="write it as http://host:port/path")
    body = json.dumps(payload, default=str).encode("utf-8")
    last = ""
    for attempt in range(retries + 1):
        if attempt:
            sleep(backoff * 2 ** (attempt - 1))
        req = urllib.request.Request(url, data=body, method="POST")
        req.add_header("Content-Type", "application/json")
        for k, v in (headers or {}).items():
            req.add_header(k, v)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            last = f"HTTP {exc.code} {exc.reason}"
            if exc.code not in RETRY_STATUS:
                raise AttributionError(f"POST {url} refused: {last}") from None
        except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as exc:
            last = str(getattr(exc, "reason", exc))
        log.info("POST %s attempt %d failed: %s", url, attempt + 1, last)
    raise AttributionError(f"POST {url} failed after {retries + 1} attempt(s): {last}")


def _need(value: str | None, key: str) -> str:
    if not value:
        raise AttributionError(f"no {key} set", hint=f"set attribution.{key} (NVRX_ATTRIBUTION__{key.upper()})")
    return value


def _file(report: Mapping[str, Any], s: AttributionSettings, **_: Any) -> str:
    path = Path(_need(s.file_path, "file_path"))
    path.parent.mkdir(parents=True, exist_ok=True)
    keys = ("job_id", "run_dir", "generated_at", "category", "root_cause", "culprit", "restartable", "confidence")
    line = json.dumps({k: report.get(k) for k in keys}, default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode("utf-8"))
    finally:
        os.close(fd)
    return f"appended to {path}"


def _http_kwargs(s: AttributionSettings) -> dict[str, Any]:
    return {"timeout": s.post_timeout_s, "retries": s.post_retries, "backoff": s.post_backoff_s}


def _webhook(report: Mapping[str, Any], s: AttributionSettings, **_: Any) -> str:
    headers = {"Authorization": f"Bearer {s.webhook_token}"} if s.webhook_token else {}
    status, _ = http_post(_need(s.webhook_url, "webhook_url"), dict(report), headers=headers, **_http_kwargs(s))
    return f"HTTP {status}"


def _slack(report: Mapping[str, Any], s: AttributionSettings, **_: Any) -> str:
    text = summary_line(report)
    if report.get("run_dir"):
        text += f"\nreport: {report['run_dir']}/report.html"
    status, _ = http_post(_need(s.slack_url, "slack_url"), {"text": text}, **_http_kwargs(s))
    return f"HTTP {status}"


def _slurm_comment(report: Mapping[str, Any], s: AttributionSettings, *, slurm: Any = None, **_: Any) -> str:
    job = report.get("job_id")
    if not job:
        raise AttributionError("the report names no job id, so there is no job to comment on")
    if slurm is None:  # the configured backend (slurm.backend), as everywhere else
        from nvrx_hpc.core.config import load_config
        from nvrx_hpc.slurm.backend import get_backend

        config = load_config().config
        slurm = get_backend(config.slurm.backend, timeout=config.slurm.command_timeout_s)
    c = report.get("culprit", {})
    ok = "yes" if report.get("restartable") else "no"
    text = (
        f"nvrx: {report.get('category')} nodes={','.join(c.get('nodes', [])) or '-'} "
        f"restartable={ok} conf={report.get('confidence', 0):.2f}"
    )
    slurm.set_comment(int(str(job).split("_")[0]), text[:250])
    return f"comment set on job {job}"


def _service(report: Mapping[str, Any], s: AttributionSettings, **_: Any) -> str:
    from nvrx_hpc.attribution.client import ServiceClient

    client = ServiceClient(_need(s.service_url, "service_url"), s.token(), timeout=s.post_timeout_s,
                           retries=s.post_retries, backoff=s.post_backoff_s)  # fmt: skip
    stored = client.submit(dict(report))
    return f"stored as report {stored.get('id')}"


_BACKENDS: dict[str, Callable[..., str]] = {
    "file": _file, "webhook": _webhook, "slack": _slack, "slurm_comment": _slurm_comment, "service": _service,
}  # fmt: skip


def post_report(
    report: Mapping[str, Any],
    settings: AttributionSettings,
    *,
    backends: Sequence[str] | None = None,
    slurm: Any = None,
) -> list[PostResult]:
    """Run each backend (default: `settings.post`) and say how each went. Never raises."""
    results = []
    for name in backends if backends is not None else settings.post:
        fn = _BACKENDS.get(name)
        if fn is None:
            results.append(PostResult(name, False, f"unknown backend; backends are {', '.join(_BACKENDS)}"))
            continue
        try:
            results.append(PostResult(name, True, fn(report, settings, slurm=slurm)))
        except Exception as exc:  # one failing backend must not stop the others
            detail = getattr(exc, "message", None) or f"{type(exc).__name__}: {exc}"
            log.warning("[job %s] posting to %s failed: %s", report.get("job_id", "?"), name, detail)
            results.append(PostResult(name, False, detail))
    return results
