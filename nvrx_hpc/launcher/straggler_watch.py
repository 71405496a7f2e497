"""The launcher's straggler watch: feeds the agents' section timings to the detector, scores one window
every `window_s`, and publishes the result (events.jsonl, status.json's flagged ranks, every rank's scores
in `stragglers.json`, the agents' metrics).

The settings a user changes while the job runs (`nvrx-hpc straggler set`, `<run dir>/straggler.json`)
are read before each window is scored, so they apply from that window on.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Generator
from pathlib import Path
from typing import Any

from nvrx_hpc.core import messages as m
from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.events import EventLog
from nvrx_hpc.straggler.control import apply_control, read_control
from nvrx_hpc.straggler.detector import RankScore, StragglerDetector, StragglerSettings

__all__ = ["StragglerWatch", "SCORES_FILE"]

log = logging.getLogger(__name__)

SCORES_FILE = "stragglers.json"  # in the run directory: every rank's last scores
SLICE = 256  # ranks scored between two turns of the event loop


class StragglerWatch:
    def __init__(self, settings: StragglerSettings, run_dir: Path, events: EventLog, hub: Any) -> None:
        self.base = settings  # from the configuration; the control file's keys go on top
        self.run_dir = Path(run_dir)
        self.events = events
        self.hub = hub
        self.detector = StragglerDetector(settings)
        self.flags: dict[int, RankScore] = {}
        self._control: dict[str, Any] = {}
        self._rejected: str | None = None

    @property
    def settings(self) -> StragglerSettings:
        return self.detector.settings

    def on_timings(self, node: str, msg: m.AgentStatus) -> None:
        """The hub's sink for the section timings an `ag.status` carries."""
        if self.settings.enabled:
            self.detector.add(node, msg.timings, msg.iterations)

    def new_step(self) -> None:
        """A restarted step renumbers ranks and warms up again: scores start over."""
        self.detector = StragglerDetector(self.settings)
        self._publish({})

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.settings.window_s)
            await self.tick_async()

    def tick(self) -> list[RankScore]:
        """Apply the control file, then score the window that ends now and publish it."""
        scores: list[RankScore] = []
        steps = self._tick(scores)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                self._write_scores(done.value)
                return scores

    async def tick_async(self) -> list[RankScore]:
        """`tick()` in slices of at most a few hundred ranks, the event loop running between them, and the file
        written by a thread: at 16k ranks the whole of it is ~0.2 s of Python, which a failure frame arriving
        meanwhile must not wait for. Timings keep arriving into the next window."""
        scores: list[RankScore] = []
        steps = self._tick(scores)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                await asyncio.to_thread(self._write_scores, done.value)
                return scores
            await asyncio.sleep(0)

    def _tick(self, scores: list[RankScore]) -> Generator[None, None, str]:
        """The window's work, yielding between slices; fills in `scores` and returns SCORES_FILE's text."""
        self._reload_control()
        flagged: dict[int, RankScore] = {}
        if self._scoring():
            for part in self.detector.close_window_in_parts(SLICE):
                scores += part
                flagged.update((x.rank, x) for x in part if x.flagged)
                yield
        self._publish(flagged)
        yield
        by_node: dict[str, dict[str, dict]] = {}  # what each agent is sent for its metrics: its own ranks only
        for i, x in enumerate(scores):
            if x.node:
                by_node.setdefault(x.node, {})[str(x.rank)] = {"score": round(x.score, 3), "flagged": x.flagged,
                                                               "kind": x.kind}  # fmt: skip
            if i % (2 * SLICE) == 2 * SLICE - 1:
                yield
        for i, (node, ranks) in enumerate(by_node.items()):
            self.hub.send(node, m.StragglerFlags, ranks=ranks)
            if i % (SLICE // 4) == SLICE // 4 - 1:
                yield
        body = []  # every rank's scores for SCORES_FILE
        for start in range(0, len(scores), 2 * SLICE):
            text = json.dumps({str(x.rank): x.to_dict() for x in scores[start : start + 2 * SLICE]},
                              separators=(",", ":"))  # fmt: skip
            body.append(text[1:-1])
            yield
        return f'{{"window":{self.detector.windows_closed},"scores":{{{",".join(body)}}}}}'

    def status(self) -> dict[str, Any]:
        """For status.json: the settings and the flagged ranks (every rank's scores: SCORES_FILE)."""
        s = self.settings
        return {
            "enabled": s.enabled, "threshold": s.threshold, "window_s": s.window_s, "windows": s.windows,
            "exclude_at_restart": s.exclude_at_restart, "windows_scored": self.detector.windows_closed,
            "flagged": {str(r): f.to_dict() for r, f in sorted(self.flags.items())}, "scores_file": SCORES_FILE,
        }  # fmt: skip

    def nodes_to_exclude(self) -> list[str]:
        """Nodes of flagged ranks, when the policy says to exclude them at the next restart."""
        if not self.settings.exclude_at_restart:
            return []
        return sorted({f.node for f in self.flags.values() if f.node})

    # ------------------------------------------------------------------ internals

    def _scoring(self) -> bool:
        if not self.settings.enabled:
            self.detector.clear_window()
        return self.settings.enabled

    def _publish(self, flagged: dict[int, RankScore]) -> None:
        """The ranks flagged now (rank -> its score): events for the newly flagged and the cleared."""
        for rank, x in flagged.items():
            if rank not in self.flags:
                self.events.emit("launcher.straggler", node=x.node, rank=rank, score=round(x.score, 3),
                                 classified_as=x.kind, self_score=round(x.self_score, 3),
                                 comm_score=round(x.comm_score, 3), window=self.detector.windows_closed)
        for rank, x in self.flags.items():
            if rank not in flagged:
                self.events.emit("launcher.straggler.cleared", node=x.node, rank=rank,
                                 window=self.detector.windows_closed)
        self.flags = flagged  # the scores themselves are not kept: SCORES_FILE has them

    def _write_scores(self, document: str) -> None:
        """Every rank's last scores, once a window (`nvrx-hpc straggler show`), atomically. One tick at a time
        calls it (from a thread, in `run`)."""
        path = self.run_dir / SCORES_FILE
        tmp = path.with_name(f".{SCORES_FILE}.tmp")
        try:
            tmp.write_text(document)
            os.replace(tmp, path)
        except OSError as exc:
            log.warning("cannot write %s: %s", path, exc)

    def _reload_control(self) -> None:
        try:
            control = read_control(self.run_dir)
        except ConfigError as exc:
            if exc.message != self._rejected:  # say it once, keep the settings in force
                self._rejected = exc.message
                self.events.emit("launcher.straggler.control_rejected", reason=exc.message)
            return
        self._rejected = None
        if control == self._control:
            return
        self._control = control
        settings = apply_control(self.base, control)
        self.detector.settings = settings
        if not settings.enabled:
            self._publish({})
        self.events.emit("launcher.straggler.settings", enabled=settings.enabled, threshold=settings.threshold,
                         exclude_at_restart=settings.exclude_at_restart, window=self.detector.windows_closed)
