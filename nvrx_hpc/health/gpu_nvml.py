"""The real GPU backend: NVML through nvidia-ml-py (module `pynvml`), plus NVML's Xid event listener.

NVML is opened on first use, so a machine without a GPU pays nothing until a check asks; without the
library or driver every call raises `GpuUnavailable("no GPU/NVML: ...")` and the GPU checks report
`skip` with that text. NVML is thread-safe, and each check runs in its own thread: no lock is held
around NVML calls, so one hung call cannot block the others. NOT_SUPPORTED answers become None;
GPU_IS_LOST and RESET_REQUIRED become `GpuFault` (a fatal finding); other errors a `HealthError`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from nvrx_hpc.core.errors import HealthError
from nvrx_hpc.health.api import (
    EccCounts,
    GpuFault,
    GpuIdentity,
    GpuProcess,
    GpuUnavailable,
    NvLink,
    PcieLink,
    RemappedRows,
    RetiredPages,
    XidEvent,
)
from nvrx_hpc.health.xid import pci_key, read_kernel_xids

__all__ = ["NvmlBackend", "NvmlXidSource", "pci_gpu_count"]

log = logging.getLogger(__name__)

_PCI_DEVICES = Path("/sys/bus/pci/devices")
_NVLINK_COUNTERS = {"replay": 0, "recovery": 1, "crc_flit": 2, "crc_data": 3, "ecc_data": 4}
_NOT_THERE = object()


def pci_gpu_count(root: Path = _PCI_DEVICES) -> int | None:
    """NVIDIA display controllers (vendor 0x10de, class 0x03xxxx) on the PCI bus; None if sysfs is unreadable.

    A GPU that fell off the bus usually stays enumerated here while NVML loses it, so this is what
    the node should have.
    """
    try:
        devices = list(root.iterdir())
    except OSError:
        return None
    count = 0
    for dev in devices:
        try:
            vendor = (dev / "vendor").read_text().strip().lower()
            klass = (dev / "class").read_text().strip().lower()
        except OSError:
            continue
        if vendor == "0x10de" and klass.startswith("0x03"):
            count += 1
    return count


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class NvmlBackend:
    """GPUs of this node through NVML."""

    name = "nvml"

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._nvml: Any = None
        self._handles: dict[int, Any] = {}

    def describe(self) -> str:
        return "nvml (NVIDIA Management Library through nvidia-ml-py)"

    # ---- plumbing --------------------------------------------------------------------------------
    def _lib(self) -> Any:
        with self._lock:
            if self._nvml is not None:
                return self._nvml
            try:
                import pynvml
            except ImportError:
                raise GpuUnavailable(
                    "no GPU/NVML: the nvidia-ml-py package is not installed",
                    hint="pip install nvidia-ml-py (module pynvml)",
                ) from None
            try:
                pynvml.nvmlInit()
            except pynvml.NVMLError as exc:
                raise GpuUnavailable(
                    f"no GPU/NVML: {exc} (NVML error {getattr(exc, 'value', '?')})",
                    hint="on a GPU node: is the NVIDIA driver loaded (nvidia-smi)? Elsewhere: "
                    "set health.gpu_backend = 'none', or 'sim' on the dev cluster",
                ) from None
            self._nvml = pynvml
            return pynvml

    def _call(self, fn_name: str, *args: Any, gpu: int | None = None) -> Any:
        """Call pynvml.<fn_name>; NOT_SUPPORTED -> _NOT_THERE; lost GPU -> GpuFault; other -> HealthError."""
        nvml = self._lib()
        fn: Callable[..., Any] | None = getattr(nvml, fn_name, None)
        if fn is None:
            return _NOT_THERE
        try:
            return fn(*args)
        except nvml.NVMLError as exc:
            code = getattr(exc, "value", None)
            if code in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                return _NOT_THERE
            if code in (nvml.NVML_ERROR_GPU_IS_LOST, nvml.NVML_ERROR_RESET_REQUIRED):
                raise GpuFault(f"GPU {gpu}: NVML {fn_name} answered {exc}", gpu=gpu) from None
            raise HealthError(f"NVML {fn_name} failed on GPU {gpu}: {exc} (NVML error {code})") from None

    def _handle(self, i: int) -> Any:
        handle = self._handles.get(i)
        if handle is None:
            handle = self._call("nvmlDeviceGetHandleByIndex", i, gpu=i)
            self._handles[i] = handle
        return handle

    def _read(self, fn_name: str, i: int, *args: Any) -> Any:
        value = self._call(fn_name, self._handle(i), *args, gpu=i)
        return None if value is _NOT_THERE else value

    # ---- GpuBackend ------------------------------------------------------------------------------
    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def expected_count(self) -> int | None:
        return pci_gpu_count()

    def identity(self, i: int) -> GpuIdentity:
        pci = self._read("nvmlDeviceGetPciInfo", i)
        bus = _text(getattr(pci, "busId", "")) if pci is not None else ""
        return GpuIdentity(
            i, _text(self._read("nvmlDeviceGetUUID", i) or ""), bus, _text(self._read("nvmlDeviceGetName", i) or "")
        )

    def ecc(self, i: int) -> EccCounts | None:
        n = self._lib()
        unc = self._read("nvmlDeviceGetTotalEccErrors", i, n.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, n.NVML_VOLATILE_ECC)
        cor = self._read("nvmlDeviceGetTotalEccErrors", i, n.NVML_MEMORY_ERROR_TYPE_CORRECTED, n.NVML_VOLATILE_ECC)
        if unc is None and cor is None:
            return None
        return EccCounts(int(cor or 0), int(unc or 0))

    def remapped_rows(self, i: int) -> RemappedRows | None:
        rows = self._read("nvmlDeviceGetRemappedRows", i)
        if rows is None:
            return None
        corr, unc, pending, failed = rows
        return RemappedRows(int(corr), int(unc), bool(pending), bool(failed))

    def retired_pages(self, i: int) -> RetiredPages | None:
        n = self._lib()
        dbe = self._read("nvmlDeviceGetRetiredPages", i, n.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR)
        if dbe is None:
            return None
        sbe = self._read("nvmlDeviceGetRetiredPages", i, n.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS)
        pending = self._read("nvmlDeviceGetRetiredPagesPendingStatus", i)
        return RetiredPages(len(sbe or []), len(dbe), bool(pending))

    def recovery_action(self, i: int) -> int | None:
        n = self._lib()
        field = getattr(n, "NVML_FI_DEV_GET_GPU_RECOVERY_ACTION", 230)
        values = self._read("nvmlDeviceGetFieldValues", i, [field])
        if not values or values[0].nvmlReturn != 0:
            return None
        return int(values[0].value.uiVal)

    def nvlinks(self, i: int) -> list[NvLink]:
        n = self._lib()
        links = []
        for link in range(n.NVML_NVLINK_MAX_LINKS):
            try:
                state = self._read("nvmlDeviceGetNvLinkState", i, link)
            except GpuFault:
                raise
            except HealthError:  # INVALID_ARGUMENT past the last link on some drivers
                break
            if state is None:
                continue
            errors = {}
            for name, counter in _NVLINK_COUNTERS.items():
                value = self._read("nvmlDeviceGetNvLinkErrorCounter", i, link, counter)
                if value is not None:
                    errors[name] = int(value)
            links.append(NvLink(link, state == n.NVML_FEATURE_ENABLED, errors))
        return links

    def pcie(self, i: int) -> PcieLink | None:
        gen = self._read("nvmlDeviceGetCurrPcieLinkGeneration", i)
        width = self._read("nvmlDeviceGetCurrPcieLinkWidth", i)
        if gen is None or width is None:
            return None
        replays = self._read("nvmlDeviceGetPcieReplayCounter", i)
        return PcieLink(
            int(gen),
            int(self._read("nvmlDeviceGetMaxPcieLinkGeneration", i) or gen),
            int(width),
            int(self._read("nvmlDeviceGetMaxPcieLinkWidth", i) or width),
            None if replays is None else int(replays),
        )

    def clock_event_reasons(self, i: int) -> int | None:
        value = self._read("nvmlDeviceGetCurrentClocksEventReasons", i)
        if value is None:
            value = self._read("nvmlDeviceGetCurrentClocksThrottleReasons", i)
        return None if value is None else int(value)

    def temperature_c(self, i: int) -> int | None:
        value = self._read("nvmlDeviceGetTemperature", i, self._lib().NVML_TEMPERATURE_GPU)
        return None if value is None else int(value)

    def processes(self, i: int) -> list[GpuProcess]:
        procs = self._read("nvmlDeviceGetComputeRunningProcesses", i) or []
        out = []
        for p in procs:
            used = getattr(p, "usedGpuMemory", None)
            out.append(GpuProcess(int(p.pid), None if used is None else used / 2**20))
        return out

    def memory_used_mib(self, i: int) -> float | None:
        info = self._read("nvmlDeviceGetMemoryInfo", i)
        return None if info is None else info.used / 2**20

    def recent_xids(self, lookback_s: float) -> tuple[list[XidEvent], str | None]:
        events, note = read_kernel_xids(lookback_s)
        try:
            by_pci = {pci_key(self.identity(i).pci_bus_id): i for i in range(self.device_count())}
        except GpuUnavailable as exc:
            return events, "; ".join(filter(None, [note, f"{exc.message}; kernel log only"]))
        except HealthError:
            return events, note
        return [_with_gpu(e, by_pci.get(pci_key(e.pci_bus_id))) for e in events], note

    def xid_source(self) -> NvmlXidSource:
        return NvmlXidSource(self)

    def close(self) -> None:
        with self._lock:
            if self._nvml is not None:
                try:
                    self._nvml.nvmlShutdown()
                except Exception:  # shutting down a broken NVML must not raise
                    log.debug("nvmlShutdown failed", exc_info=True)
                self._nvml = None
                self._handles.clear()


def _with_gpu(event: XidEvent, gpu: int | None) -> XidEvent:
    if gpu is None:
        return event
    return XidEvent(event.xid, gpu, event.pci_bus_id, event.detail, event.source, event.time)


class NvmlXidSource:
    """NVML's event set: Xid critical errors on every GPU that supports them, from registration on."""

    name = "nvml events"

    def __init__(self, backend: NvmlBackend) -> None:
        self.backend = backend
        n = backend._lib()
        self._n = n
        self._set = n.nvmlEventSetCreate()
        self._index: dict[Any, int] = {}
        self.registered: list[int] = []
        for i in range(backend.device_count()):
            handle = backend._handle(i)
            supported = backend._read("nvmlDeviceGetSupportedEventTypes", i)
            if supported is not None and not supported & n.nvmlEventTypeXidCriticalError:
                continue
            try:
                n.nvmlDeviceRegisterEvents(handle, n.nvmlEventTypeXidCriticalError, self._set)
            except n.NVMLError as exc:
                log.warning("GPU %d: cannot register for Xid events: %s", i, exc)
                continue
            self.registered.append(i)

    def poll(self, timeout_s: float) -> list[XidEvent]:
        n = self._n
        if self._set is None:
            return []
        try:
            data = n.nvmlEventSetWait_v2(self._set, max(int(timeout_s * 1000), 1))
        except n.NVMLError as exc:
            if getattr(exc, "value", None) == n.NVML_ERROR_TIMEOUT:
                return []
            raise HealthError(f"NVML event wait failed: {exc}") from None
        try:
            gpu = int(n.nvmlDeviceGetIndex(data.device))
        except n.NVMLError:
            gpu = None
        pci = self.backend.identity(gpu).pci_bus_id if gpu is not None else None
        return [XidEvent(int(data.eventData), gpu, pci, "NVML event", "nvml", time.time())]

    def close(self) -> None:
        if self._set is not None:
            try:
                self._n.nvmlEventSetFree(self._set)
            except Exception:  # freeing on a lost GPU may fail; nothing to do
                log.debug("nvmlEventSetFree failed", exc_info=True)
            self._set = None
