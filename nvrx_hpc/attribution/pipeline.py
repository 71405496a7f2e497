"""One attribution run from start to end, as `nvrx-hpc attribute` and the Epilog's detached child do it:
analyse, write the report files, post them, optionally submit to the service. Within a time budget."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nvrx_hpc.attribution.analyze import analyze
from nvrx_hpc.attribution.posting import PostResult, post_report
from nvrx_hpc.attribution.render import write_reports
from nvrx_hpc.attribution.settings import AttributionSettings
from nvrx_hpc.core.errors import AttributionError, NvrxError

__all__ = ["Outcome", "run_attribution", "slurm_job_facts"]

log = logging.getLogger(__name__)


@dataclass
class Outcome:
    report: dict[str, Any]
    written: list[Path] = field(default_factory=list)
    posted: list[PostResult] = field(default_factory=list)
    service: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            **self.report,
            "written": [str(p) for p in self.written],
            "posted": [p.to_dict() for p in self.posted],
            "service": self.service,
        }


def slurm_job_facts(job_id: str, timeout: float) -> tuple[str | None, tuple[str, ...]]:
    """(state, nodes) of a job as Slurm reports it; (None, ()) if Slurm cannot say (it never raises)."""
    try:
        from nvrx_hpc.slurm.backend import get_backend

        info = get_backend("cli", timeout=timeout).job(int(job_id.split("_")[0]))
        return info.state, tuple(info.nodes)
    except (NvrxError, ValueError, OSError) as exc:
        log.info("[job %s] Slurm could not tell the job's state: %s", job_id, exc)
        return None, ()


class _Budget:
    """SIGALRM after `seconds`: the analysis stops with an AttributionError instead of overstaying."""

    def __init__(self, seconds: float | None) -> None:
        self.seconds = seconds

    def _fire(self, _sig: int, _frame: Any) -> None:
        # Fire again every 0.2 s from now on: a reader that catches the first error and moves on to the next
        # file must not get the rest of the run for free.
        signal.setitimer(signal.ITIMER_REAL, 0.2)
        raise AttributionError(f"the analysis ran past its budget of {self.seconds:g} s")

    def __enter__(self) -> _Budget:
        if self.seconds:
            self._old = signal.signal(signal.SIGALRM, self._fire)
            signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *_: Any) -> None:
        if self.seconds:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, self._old)


def _chown_like(paths: Sequence[Path], directory: Path) -> None:
    """Give files written as root (`nvrx-hpc attribute` run by hand) to the owner of the run directory; a file
    swapped for a symlink meanwhile is not followed (the Epilog itself never writes as root)."""
    if os.geteuid() != 0:
        return
    st = directory.stat()
    for p in paths:
        try:
            os.chown(p, st.st_uid, st.st_gid, follow_symlinks=False)
        except OSError as exc:
            log.info("cannot chown %s: %s", p, exc)


def run_attribution(
    paths: Sequence[Path],
    settings: AttributionSettings,
    *,
    out_dir: Path | None = None,
    write: bool = True,
    backends: Sequence[str] | None = None,
    server: str | None = None,
    job_id: str | None = None,
    ask_slurm: bool = False,
    budget_s: float | None = None,
) -> Outcome:
    """Analyse `paths`, write the reports (into `out_dir`, else the run directory), post, submit.

    Raises:
        AttributionError: bad input, an unwritable report directory, or the budget ran out.
    """
    with _Budget(budget_s):
        state, nodes = slurm_job_facts(job_id, settings.epilog_slurm_timeout_s) if ask_slurm and job_id else (None, ())
        report = analyze(paths, job_id=job_id, job_state=state, job_nodes=nodes, engine=settings.engine)
        data = report.to_dict()
        outcome = Outcome(data)
        target = out_dir or (Path(report.run_dir) if report.run_dir else None)
        if write and target is not None:
            if out_dir is not None:
                try:
                    out_dir.mkdir(parents=True, exist_ok=True)
                except OSError as exc:
                    raise AttributionError(f"cannot create --out {out_dir}: {exc.strerror or exc}") from None
            outcome.written = write_reports(data, target)
            _chown_like(outcome.written, target)
        outcome.posted = post_report(data, settings, backends=backends)
        if server:
            from nvrx_hpc.attribution.client import ServiceClient

            client = ServiceClient(server, settings.token(), timeout=settings.post_timeout_s,
                                   retries=settings.post_retries, backoff=settings.post_backoff_s)  # fmt: skip
            outcome.service = client.submit(data)
    return outcome
