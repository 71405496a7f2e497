"""Xids: the kernel log's `NVRM: Xid` lines, a live kernel-log listener, and the policy judgement.

NVML delivers Xid events only after a listener registered for them, so Xids that happened earlier
(between jobs, before the agent started) are found in the kernel log. Lines look like

    NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, name=python, GPU has fallen off the bus.

as `dmesg` prints them (after a `[ seconds]` stamp) or as `/dev/kmsg` records (`prio,seq,usec,-;text`).
`XidTracker` applies the policy to a stream: a fatal Xid is fatal at once; an application Xid becomes
fatal when one GPU repeats it `application_repeat` times within `window_s`.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import re
import select
import stat
import threading
import time
from collections import defaultdict, deque
from pathlib import Path

from nvrx_hpc.health.api import Finding, Verdict, XidEvent
from nvrx_hpc.health.policy import XidPolicy

__all__ = [
    "XID_NAMES",
    "KMSG_PATH",
    "parse_xid_line",
    "read_kernel_xids",
    "KernelLogXidSource",
    "XidTracker",
    "judge_xids",
    "pci_key",
]

log = logging.getLogger(__name__)

KMSG_PATH = Path("/dev/kmsg")

# Short names for the detail line; the verdict comes from the policy, never from this table.
XID_NAMES = {
    13: "graphics engine exception",
    31: "GPU memory page fault",
    43: "GPU stopped processing",
    45: "preemptive cleanup",
    48: "double-bit ECC error",
    63: "row remap or page retirement event",
    64: "row remap or page retirement failure",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
    140: "unrecovered ECC error",
    154: "GPU recovery action changed",
}

_XID_RE = re.compile(r"NVRM: Xid \((?:PCI:)?(?P<pci>[0-9A-Fa-f:.]+)\):\s*(?P<xid>\d+)\s*,?\s*(?P<rest>.*)$")
_KMSG_RE = re.compile(r"^\d+,\d+,(?P<usec>\d+),[^;]*;(?P<text>.*)$")
_DMESG_RE = re.compile(r"^\[\s*(?P<sec>\d+\.\d+)\]\s*(?P<text>.*)$")


def pci_key(bus_id: str | None) -> str | None:
    """"PCI:0000:3B:00", "00000000:3b:00.0" -> "3b:00": the bus and device, comparable across sources."""
    if not bus_id:
        return None
    parts = bus_id.lower().removeprefix("pci:").split(":")
    if len(parts) < 2:
        return None
    return f"{parts[-2]}:{parts[-1].split('.')[0]}"


def parse_xid_line(line: str, *, source: str = "kernel log", boot_time: float | None = None) -> XidEvent | None:
    """One kernel-log line (dmesg, /dev/kmsg record or journal) -> XidEvent, or None if it holds no Xid.

    `boot_time` (wall-clock seconds at boot) turns dmesg/kmsg stamps into wall-clock times.
    """
    text, since_boot = line.rstrip("\n"), None
    for pattern, unit in ((_KMSG_RE, 1e-6), (_DMESG_RE, 1.0)):
        m = pattern.match(text)
        if m:
            since_boot = float(m.group("usec" if unit != 1.0 else "sec")) * unit
            text = m.group("text")
            break
    m = _XID_RE.search(text)
    if not m:
        return None
    when = boot_time + since_boot if boot_time is not None and since_boot is not None else math.nan
    rest = m.group("rest").strip().rstrip(".")
    return XidEvent(xid=int(m.group("xid")), pci_bus_id=m.group("pci"), detail=rest, source=source, time=when)


def _boot_time() -> float:
    """Wall-clock time of boot on the clock kernel-log stamps use (CLOCK_MONOTONIC)."""
    return time.time() - time.monotonic()


def read_kernel_xids(lookback_s: float, path: Path = KMSG_PATH) -> tuple[list[XidEvent], str | None]:
    """Xids in the kernel log younger than `lookback_s`, and a note when the log could not be read.

    `path` is /dev/kmsg (records since boot, as the kernel keeps them) or a text file such as
    /var/log/kern.log. Never raises for an unreadable log: the note says why.
    """
    boot = _boot_time()
    cutoff = time.time() - lookback_s
    events: list[XidEvent] = []
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        return [], f"kernel log {path} unreadable ({exc.strerror or exc})"
    try:
        if stat.S_ISCHR(os.fstat(fd).st_mode):
            lines = _drain_kmsg(fd)
        else:
            with os.fdopen(os.dup(fd), "r", errors="replace") as f:
                lines = f.read().splitlines()
    finally:
        os.close(fd)
    for line in lines:
        event = parse_xid_line(line, source=str(path), boot_time=boot)
        if event is not None and (math.isnan(event.time) or event.time >= cutoff):
            events.append(event)
    return events, None


def _drain_kmsg(fd: int) -> list[str]:
    lines = []
    while True:
        try:
            record = os.read(fd, 8192)
        except BlockingIOError:
            return lines
        except OSError as exc:
            if exc.errno == errno.EPIPE:  # records were overwritten while we read; go on
                continue
            raise
        if not record:
            return lines
        lines.append(record.decode("utf-8", "replace"))


class KernelLogXidSource:
    """Follows the kernel log from now on and yields new `NVRM: Xid` lines as events.

    `path` is /dev/kmsg (needs root, or kernel.dmesg_restrict=0) or a text log that is appended to.
    Raises OSError at construction when the log cannot be opened.
    """

    def __init__(self, path: Path = KMSG_PATH) -> None:
        self.path = Path(path)
        self.name = f"kernel log {self.path}"
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._kmsg = stat.S_ISCHR(os.fstat(self._fd).st_mode)
        self._pos = os.lseek(self._fd, 0, os.SEEK_END)
        self._partial = ""
        self._boot = _boot_time()
        self._lock = threading.Lock()

    def poll(self, timeout_s: float) -> list[XidEvent]:
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while True:
            with self._lock:
                if self._fd < 0:
                    return []
                lines = self._read_kmsg() if self._kmsg else self._read_file()
            events = [e for e in (parse_xid_line(x, source=self.name, boot_time=self._boot) for x in lines) if e]
            left = deadline - time.monotonic()
            if events or left <= 0:
                return events
            if self._kmsg:
                select.select([self._fd], [], [], min(left, 0.5))
            else:
                time.sleep(min(left, 0.1))

    def _read_kmsg(self) -> list[str]:
        return _drain_kmsg(self._fd)

    def _read_file(self) -> list[str]:
        size = os.fstat(self._fd).st_size
        if size < self._pos:  # truncated or rotated in place: start again from the top
            self._pos, self._partial = 0, ""
        if size == self._pos:
            return []
        chunk = os.pread(self._fd, size - self._pos, self._pos)
        self._pos += len(chunk)
        text = self._partial + chunk.decode("utf-8", "replace")
        *lines, self._partial = text.split("\n")
        return lines

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


class XidTracker:
    """Applies the Xid policy to a stream of events; thread-safe.

    `add(event)` returns (verdict, detail), or None for a duplicate: the same Xid on the same GPU
    within `dedup_s` (NVML and the kernel log both report each Xid).
    """

    def __init__(self, policy: XidPolicy, dedup_s: float = 5.0) -> None:
        self.policy = policy
        self.dedup_s = dedup_s
        self._seen: dict[tuple[str, int], deque[float]] = defaultdict(deque)
        self._lock = threading.Lock()

    @staticmethod
    def gpu_key(event: XidEvent) -> str:
        """The GPU an event is about: its PCI bus:device when known, else its index."""
        key = pci_key(event.pci_bus_id)
        if key is not None:
            return key
        return f"gpu{event.gpu}" if event.gpu is not None else "unknown"

    def add(self, event: XidEvent) -> tuple[Verdict, str] | None:
        when = event.time if math.isfinite(event.time) else time.time()
        with self._lock:
            times = self._seen[(self.gpu_key(event), event.xid)]
            if times and abs(when - times[-1]) < self.dedup_s:
                return None
            times.append(when)
            while times and when - times[0] > self.policy.window_s:
                times.popleft()
            count = len(times)
        name = XID_NAMES.get(event.xid, "see NVIDIA's Xid catalog")
        detail = f"Xid {event.xid} on {event.where()} ({name})"
        verdict = self.policy.verdict(event.xid)
        if event.xid in self.policy.application:
            detail += f", {count} time{'s' if count != 1 else ''} in {self.policy.window_s:g} s"
            if count >= self.policy.application_repeat:
                verdict = Verdict.FATAL
        return verdict, detail


def judge_xids(events: list[XidEvent], policy: XidPolicy, note: str | None = None) -> Finding:
    """The gpu.xid finding for events already collected (kernel log, simulated faults)."""
    tracker = XidTracker(policy)
    judged: list[tuple[Verdict, str]] = []
    for event in sorted(events, key=lambda e: e.time if math.isfinite(e.time) else 0.0):
        outcome = tracker.add(event)
        if outcome is not None:
            judged.append(outcome)
    evidence = {"events": [e.to_dict() for e in events], "window_s": policy.window_s}
    if note:
        evidence["note"] = note
    if not judged:
        detail = f"no Xid in the last {policy.window_s:g} s"
        return Finding(Verdict.OK, detail + (f" ({note})" if note else ""), evidence)
    worst = Verdict.worst(v for v, _ in judged)
    # Repeats of one application Xid keep only the last (highest) count.
    shown = list(dict.fromkeys(d.split(",")[0] for v, d in judged if v is worst))
    details = [next(d for v, d in reversed(judged) if v is worst and d.startswith(s)) for s in shown]
    return Finding(worst, "; ".join(details), evidence)
