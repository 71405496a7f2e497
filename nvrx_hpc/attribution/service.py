"""`nvrx-hpc serve`: the attribution service (FastAPI on uvicorn, SQLite by default).

Endpoints (all but /healthz need `Authorization: Bearer <token>`):
  GET  /healthz                    liveness
  POST /v1/reports                 store a report (report.json); answers its id and drain advice for its nodes
  GET  /v1/reports/{id}            one stored report
  GET  /v1/reports?job_id=&limit=  stored reports, newest first
  GET  /v1/nodes[?node=]           node history: culprit counts and whether to drain repeat offenders

Limits: bodies over `serve_max_body_bytes` get 413 before they are read whole; each token (or client
address) gets `rate_per_minute` requests a minute, then 429; a report must name a known category.
"""

# No `from __future__ import annotations`: FastAPI reads the endpoints' annotations at run time, and
# Request is imported inside create_app (FastAPI is an optional dependency).

import hmac
import threading
import time
from collections import deque
from typing import Any

from nvrx_hpc.attribution.api import Category
from nvrx_hpc.attribution.settings import AttributionSettings
from nvrx_hpc.attribution.store import ReportStore
from nvrx_hpc.core.errors import AttributionError, ConfigError

__all__ = ["create_app", "serve"]

_CATEGORIES = {c.value for c in Category}


class _RateLimiter:
    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._seen: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        now = time.monotonic()
        with self._lock:
            q = self._seen.setdefault(key, deque())
            while q and q[0] < now - 60:
                q.popleft()
            if len(q) >= self.per_minute:
                return False
            q.append(now)
            return True


def create_app(settings: AttributionSettings, store: ReportStore, *, token: str | None, rate_per_minute: int = 600):
    """The FastAPI application. `token` None refuses every authenticated call (there is no open mode).

    Raises:
        ConfigError: FastAPI is not installed (`pip install nvrx-hpc[service]`).
    """
    try:
        from fastapi import FastAPI, HTTPException, Query, Request
        from fastapi.responses import JSONResponse
    except ImportError:
        raise ConfigError(
            "the attribution service needs FastAPI and uvicorn", hint="pip install 'nvrx-hpc[service]'"
        ) from None

    app = FastAPI(title="nvrx-hpc attribution", version="1")
    limiter = _RateLimiter(rate_per_minute)
    max_body = settings.serve_max_body_bytes
    window_s = settings.drain_window_days * 86400

    @app.middleware("http")
    async def _limits(request: Request, call_next):
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_body):
            return JSONResponse({"detail": f"request body over {max_body} bytes"}, status_code=413)
        if request.url.path != "/healthz":
            auth = request.headers.get("authorization", "")
            given = auth[7:] if auth.lower().startswith("bearer ") else ""
            if token is None or not hmac.compare_digest(given.encode(), token.encode()):
                return JSONResponse({"detail": "missing or wrong token"}, status_code=401,
                                    headers={"WWW-Authenticate": "Bearer"})  # fmt: skip
            key = given[-8:] + (request.client.host if request.client else "")
            if not limiter.allow(key):
                return JSONResponse({"detail": "too many requests"}, status_code=429, headers={"Retry-After": "60"})
        return await call_next(request)

    async def _body(request: Request) -> dict[str, Any]:
        import json

        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > max_body:
                raise HTTPException(413, f"request body over {max_body} bytes")
            chunks.append(chunk)
        try:
            data = json.loads(b"".join(chunks) or b"null")
        except (ValueError, RecursionError) as exc:  # RecursionError: JSON nested deeper than Python recurses
            raise HTTPException(400, f"body is not JSON: {type(exc).__name__}") from None
        if not isinstance(data, dict):
            raise HTTPException(422, "a report is a JSON object")
        if not isinstance(data.get("category"), str) or data["category"] not in _CATEGORIES:
            raise HTTPException(422, f"category must be one of {sorted(_CATEGORIES)}")
        culprit = data.get("culprit", {})
        nodes = culprit.get("nodes", []) if isinstance(culprit, dict) else None
        if not isinstance(nodes, list) or not all(isinstance(n, str) for n in nodes):
            raise HTTPException(422, "culprit.nodes must be a list of node names")
        if not isinstance(data.get("job_id"), (str, int, type(None))):
            raise HTTPException(422, "job_id must be a string")
        return data

    @app.get("/healthz")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.post("/v1/reports", status_code=201)
    async def submit(request: Request) -> dict[str, Any]:
        report = await _body(request)
        rid = store.add(report, submitter=request.client.host if request.client else None)
        nodes = report.get("culprit", {}).get("nodes", [])
        advice = [h for n in nodes for h in store.node_history(node=n, window_s=window_s,
                                                               drain_after=settings.drain_after)]  # fmt: skip
        return {"id": rid, "job_id": report.get("job_id"), "nodes": advice}

    @app.get("/v1/reports/{rid}")
    def fetch(rid: int) -> dict[str, Any]:
        found = store.get(rid)
        if found is None:
            raise HTTPException(404, f"no report {rid}")
        return found

    @app.get("/v1/reports")
    def listing(job_id: str | None = None, limit: int = Query(100, ge=1, le=1000)) -> list[dict[str, Any]]:
        return store.list(job_id=job_id, limit=limit)

    @app.get("/v1/nodes")
    def nodes(node: str | None = None) -> list[dict[str, Any]]:
        return store.node_history(node=node, window_s=window_s, drain_after=settings.drain_after)

    return app


def serve(settings: AttributionSettings, *, host: str, port: int, db: str) -> None:
    """Run the service until interrupted.

    Raises:
        ConfigError: no token configured, or FastAPI/uvicorn missing.
        AttributionError: the database cannot be opened.
    """
    token = settings.token()
    if not token:
        raise ConfigError(
            "the attribution service needs a token",
            hint="set attribution.service_token or service_token_file (clients send the same); see docs/config.md",
        )
    try:
        import uvicorn
    except ImportError:
        raise ConfigError("the attribution service needs uvicorn", hint="pip install 'nvrx-hpc[service]'") from None
    store = ReportStore(db)
    app = create_app(settings, store, token=token)
    try:
        uvicorn.run(app, host=host, port=port, log_level="warning")
    except OSError as exc:
        raise AttributionError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    finally:
        store.close()
