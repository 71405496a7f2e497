"""Client of `nvrx-hpc serve` (standard library only, so that compute nodes need nothing extra)."""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from nvrx_hpc.attribution.posting import http_post
from nvrx_hpc.core.errors import AttributionError

__all__ = ["ServiceClient"]


class ServiceClient:
    """Talks to the attribution service at `url` with `token`. Every call has a deadline.

    Raises (every method):
        AttributionError: the service is unreachable, refuses the token, or answers an error.
    """

    def __init__(
        self, url: str, token: str | None, *, timeout: float = 5.0, retries: int = 2, backoff: float = 0.5
    ) -> None:
        if not url.startswith(("http://", "https://")):
            raise AttributionError(f"service URL {url!r} is not http(s)", hint="e.g. --server http://head:8731")
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def submit(self, report: dict[str, Any]) -> dict[str, Any]:
        """Store a report; returns {"id", "job_id", "nodes": [node history with drain advice]}."""
        _, body = http_post(
            f"{self.url}/v1/reports", report, headers=self._headers(), timeout=self.timeout,
            retries=self.retries, backoff=self.backoff,
        )  # fmt: skip
        return json.loads(body)

    def _get(self, path: str, **query: Any) -> Any:
        params = {k: v for k, v in query.items() if v is not None}
        url = f"{self.url}{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        req = urllib.request.Request(url, headers=self._headers())
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode("utf-8", "replace")
            hint = "check attribution.service_token" if exc.code == 401 else None
            raise AttributionError(f"GET {url}: HTTP {exc.code}: {detail}", hint=hint) from None
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            raise AttributionError(
                f"GET {url} failed: {getattr(exc, 'reason', exc)}", hint="is `nvrx-hpc serve` running there?"
            ) from None

    def get(self, report_id: int) -> dict[str, Any]:
        return self._get(f"/v1/reports/{int(report_id)}")

    def reports(self, job_id: str | None = None, limit: int = 100) -> list[dict[str, Any]]:
        return self._get("/v1/reports", job_id=job_id, limit=limit)

    def nodes(self, node: str | None = None) -> list[dict[str, Any]]:
        return self._get("/v1/nodes", node=node)
