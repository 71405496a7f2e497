"""The simulated GPU backend: healthy GPUs, plus the faults injected for this node (see `sim_faults`).

It implements the same `GpuBackend` protocol as the NVML backend, so the checks, the policy, the
drain and the exclusion code all run for real; only the readings are made up. It is chosen
explicitly (`health.gpu_backend = "sim"` or `NVRX_HEALTH__GPU_BACKEND=sim`), never as a fallback.

A healthy simulated node has 4 GPUs ("Simulated H100"), no ECC errors, 4 NVLinks up, PCIe gen 5 x16,
35 C, no processes. Faults are re-read whenever the node's file changes, so faults injected while
a monitor runs are seen on its next check (and new Xids by `SimXidSource` within half a second).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

from nvrx_hpc.health.api import (
    EccCounts,
    GpuFault,
    GpuIdentity,
    GpuProcess,
    HealthError,
    NvLink,
    PcieLink,
    RemappedRows,
    RetiredPages,
    XidEvent,
)
from nvrx_hpc.health.sim_faults import CLOCK_BITS, SimFault, fault_file, read_faults

__all__ = ["SimBackend", "SimXidSource", "SIM_DEFAULT_GPUS"]

SIM_DEFAULT_GPUS = 4
_NVLINKS = 4
_HANG_S = 3600.0
_IDLE = 0x1  # clock-event reason GpuIdle: benign


class SimBackend:
    """Simulated GPUs of `node`; faults from `<fault_dir>/<node>.json`."""

    name = "sim"

    def __init__(self, node: str, fault_dir: Path, *, hang_s: float = _HANG_S) -> None:
        self.node = node
        self.path = fault_file(Path(fault_dir), node)
        self.hang_s = hang_s
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._cache: tuple[tuple[int, int], list[SimFault]] | None = None
        self._reads: dict[tuple[str, int], int] = {}

    def describe(self) -> str:
        return f"sim (simulated GPUs of {self.node}, faults from {self.path})"

    # ---- faults --------------------------------------------------------------------------------
    def faults(self) -> list[SimFault]:
        try:
            st = self.path.stat()
            stamp = (st.st_mtime_ns, st.st_size)
        except FileNotFoundError:
            return []
        with self._lock:
            if self._cache is None or self._cache[0] != stamp:
                self._cache = (stamp, read_faults(self.path))
            return self._cache[1]

    def _last(self, key: str, gpu: int | None = None, default: Any = None) -> Any:
        for fault in reversed(self.faults()):
            if fault.key == key and (gpu is None or fault.gpu == gpu):
                return fault.value
        return default

    def _all(self, key: str, gpu: int) -> list[Any]:
        return [f.value for f in self.faults() if f.key == key and f.gpu == gpu]

    def _enter(self, check: str, gpu: int | None = None) -> None:
        """Apply hang/raise faults aimed at `check`, and GPU_IS_LOST for a lost GPU."""
        hangs = {f.value for f in self.faults() if f.key == "hang"}
        if check in hangs:
            if self._closed.wait(self.hang_s):
                raise HealthError(f"simulated hang in {check} released: the backend was closed")
        if check in {f.value for f in self.faults() if f.key == "raise"}:
            raise RuntimeError(f"simulated internal error in {check} (fault raise={check})")
        if gpu is not None and self._last("lost", gpu, 0):
            raise GpuFault(f"GPU {gpu} is lost (NVML: GPU is lost; simulated)", gpu=gpu)

    def _grow(self, what: str, gpu: int, per_read: int) -> int:
        with self._lock:
            count = self._reads.get((what, gpu), 0) + 1
            self._reads[(what, gpu)] = count
        return per_read * count

    # ---- GpuBackend -----------------------------------------------------------------------------
    def device_count(self) -> int:
        total = self._last("gpus", None, SIM_DEFAULT_GPUS)
        return max(total - self._last("missing", None, 0), 0)

    def expected_count(self) -> int | None:
        self._enter("gpu.count")
        return self._last("gpus", None, SIM_DEFAULT_GPUS)

    def identity(self, i: int) -> GpuIdentity:
        return GpuIdentity(i, f"GPU-sim-{self.node}-{i}", f"00000000:{0x18 + i:02X}:00.0", "Simulated H100")

    def ecc(self, i: int) -> EccCounts | None:
        self._enter("gpu.ecc", i)
        return EccCounts(self._last("ecc_corrected", i, 0), self._last("ecc_uncorrected", i, 0))

    def remapped_rows(self, i: int) -> RemappedRows | None:
        self._enter("gpu.remapped_rows", i)
        return RemappedRows(0, 0, bool(self._last("remap_pending", i, 0)), bool(self._last("remap_failed", i, 0)))

    def retired_pages(self, i: int) -> RetiredPages | None:
        self._enter("gpu.retired_pages", i)
        return RetiredPages(0, self._last("retired_dbe", i, 0), bool(self._last("retired_pending", i, 0)))

    def recovery_action(self, i: int) -> int | None:
        self._enter("gpu.recovery_action", i)
        return self._last("recovery_action", i, 0)

    def nvlinks(self, i: int) -> list[NvLink]:
        self._enter("gpu.nvlink", i)
        down = set(self._all("nvlink_down", i))
        per_read = self._last("nvlink_errors", i, 0)
        replay = self._grow("nvlink", i, per_read) if per_read else 0
        links = []
        for link in range(_NVLINKS):
            errors = {"replay": replay if link == 0 else 0, "recovery": 0, "crc_flit": 0, "crc_data": 0}
            links.append(NvLink(link, link not in down, errors))
        return links

    def pcie(self, i: int) -> PcieLink | None:
        self._enter("gpu.pcie", i)
        per_read = self._last("pcie_replays", i, 0)
        replays = self._grow("pcie", i, per_read) if per_read else 0
        return PcieLink(self._last("pcie_gen", i, 5), 5, self._last("pcie_width", i, 16), 16, replays)

    def clock_event_reasons(self, i: int) -> int | None:
        self._enter("gpu.clocks", i)
        bits = _IDLE
        for reason in self._all("clocks", i):
            bits |= CLOCK_BITS[reason]
        return bits

    def temperature_c(self, i: int) -> int | None:
        self._enter("gpu.temperature", i)
        return self._last("temp", i, 35)

    def processes(self, i: int) -> list[GpuProcess]:
        self._enter("gpu.processes", i)
        count = self._last("procs", i, 0)
        return [GpuProcess(100000 + n, 512.0) for n in range(count)]

    def memory_used_mib(self, i: int) -> float | None:
        self._enter("gpu.processes", i)
        return float(self._last("mem_used_mib", i, 0))

    def recent_xids(self, lookback_s: float) -> tuple[list[XidEvent], str | None]:
        self._enter("gpu.xid")
        cutoff = time.time() - lookback_s
        return [self._event(f) for f in self.faults() if f.key == "xid" and f.time >= cutoff], None

    def _event(self, fault: SimFault) -> XidEvent:
        pci = self.identity(fault.gpu).pci_bus_id
        return XidEvent(int(fault.value), fault.gpu, pci, "injected", "sim", fault.time)

    def xid_source(self) -> SimXidSource:
        return SimXidSource(self)

    def close(self) -> None:
        self._closed.set()


class SimXidSource:
    """New `xid=` faults of a simulated node, as a live Xid stream (polls the file every 0.2 s)."""

    def __init__(self, backend: SimBackend) -> None:
        self.backend = backend
        self.name = f"sim faults {backend.path}"
        self._last_seq = max((f.seq for f in backend.faults()), default=0)
        self._closed = threading.Event()

    def poll(self, timeout_s: float) -> list[XidEvent]:
        deadline = time.monotonic() + max(timeout_s, 0.0)
        while not self._closed.is_set():
            faults = self.backend.faults()
            if faults and max(f.seq for f in faults) < self._last_seq:
                self._last_seq = 0  # the file was cleared and refilled: start over
            new = [f for f in faults if f.seq > self._last_seq]
            if new:
                self._last_seq = max(f.seq for f in new)
                return [self.backend._event(f) for f in new if f.key == "xid"]
            left = deadline - time.monotonic()
            if left <= 0:
                return []
            self._closed.wait(min(left, 0.2))
        return []

    def close(self) -> None:
        self._closed.set()
