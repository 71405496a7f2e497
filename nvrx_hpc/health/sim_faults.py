"""Injected GPU faults for the simulated backend: one JSON file per node in the dev cluster's state dir.

`nvrx-hpc cluster inject-gpu-fault n2 xid=79 ecc_uncorrected=2@1` appends faults to
`<state_dir>/gpu-faults/n2.json`; `nvrx-hpc cluster clear-gpu-faults n2` removes the file. A fault is
`KEY=VALUE` with an optional `@GPU` index (default 0). The file is replaced atomically, so a reader
never sees half of it; each fault has a sequence number so a listener can tell new Xids from old.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.health.api import CLOCK_EVENT_BITS as CLOCK_BITS

__all__ = ["SimFault", "FAULT_KEYS", "CLOCK_BITS", "parse_fault", "fault_file", "read_faults", "inject", "clear"]

_VERSION = 1

def _bool(text: str) -> int:
    lowered = text.lower()
    if lowered in ("1", "true", "yes", "on"):
        return 1
    if lowered in ("0", "false", "no", "off"):
        return 0
    raise ValueError("expected 1 or 0")


def _nonneg(text: str) -> int:
    value = int(text)
    if value < 0:
        raise ValueError("expected a number >= 0")
    return value


def _clock(text: str) -> str:
    if text not in CLOCK_BITS:
        raise ValueError(f"expected one of {', '.join(CLOCK_BITS)}")
    return text


def _check_name(text: str) -> str:
    if not text.startswith("gpu."):
        raise ValueError("expected a GPU check name such as gpu.ecc (host checks are never simulated)")
    return text


# key -> (parser, what it does); the order is the order of the docs.
FAULT_KEYS: dict[str, tuple[Callable[[str], Any], str]] = {
    "gpus": (_nonneg, "GPUs the simulated node has (default 4); node-wide"),
    "missing": (_nonneg, "GPUs gone from NVML (fallen off the bus); node-wide"),
    "lost": (_bool, "NVML answers GPU_IS_LOST for this GPU"),
    "xid": (_nonneg, "an Xid event on this GPU, now"),
    "ecc_uncorrected": (_nonneg, "volatile uncorrectable ECC errors"),
    "ecc_corrected": (_nonneg, "volatile corrected ECC errors"),
    "remap_pending": (_bool, "a row remap waits for a reset"),
    "remap_failed": (_bool, "row remapping failed"),
    "retired_pending": (_bool, "a page retirement waits for a reset"),
    "retired_dbe": (_nonneg, "pages retired for double-bit errors"),
    "recovery_action": (_nonneg, "NVML's recovery action field (1 reset, 2 reboot, ...)"),
    "nvlink_down": (_nonneg, "this NVLink (0-3) is down"),
    "nvlink_errors": (_nonneg, "replay errors added on every read of the NVLink counters"),
    "pcie_width": (_nonneg, "current PCIe width (max 16)"),
    "pcie_gen": (_nonneg, "current PCIe generation (max 5)"),
    "pcie_replays": (_nonneg, "PCIe replays added on every read"),
    "clocks": (_clock, "a clock-event reason: " + ", ".join(CLOCK_BITS)),
    "temp": (_nonneg, "GPU temperature in C (default 35)"),
    "procs": (_nonneg, "leftover compute processes"),
    "mem_used_mib": (_nonneg, "GPU memory in use, MiB"),
    "hang": (_check_name, "the simulated calls behind this check block (e.g. hang=gpu.ecc)"),
    "raise": (_check_name, "the simulated calls behind this check raise an internal error"),
}


@dataclass(frozen=True)
class SimFault:
    key: str
    value: Any
    gpu: int = 0
    seq: int = 0
    time: float = 0.0


def parse_fault(spec: str) -> SimFault:
    """"xid=79", "ecc_uncorrected=2@1", "hang=gpu.ecc" -> SimFault. Raises ConfigError naming the problem."""
    key, sep, rest = spec.partition("=")
    key = key.strip()
    if not sep or key not in FAULT_KEYS:
        known = ", ".join(FAULT_KEYS)
        raise ConfigError(f"bad GPU fault {spec!r}: expected KEY=VALUE[@GPU] with KEY one of {known}",
                          hint="for example: nvrx-hpc cluster inject-gpu-fault n2 xid=79")
    value_text, at, gpu_text = rest.partition("@")
    parser, _ = FAULT_KEYS[key]
    try:
        value = parser(value_text.strip())
        gpu = int(gpu_text) if at else 0
        if gpu < 0:
            raise ValueError("the GPU index must be >= 0")
    except ValueError as exc:
        raise ConfigError(f"bad GPU fault {spec!r}: {exc}", hint=f"{key}: {FAULT_KEYS[key][1]}") from None
    return SimFault(key, value, gpu)


def fault_file(fault_dir: Path, node: str) -> Path:
    if not node or "/" in node or node.startswith("."):
        raise ConfigError(f"bad node name {node!r} for a GPU fault file")
    return Path(fault_dir) / f"{node}.json"


def read_faults(path: Path) -> list[SimFault]:
    """The faults in one node's file; [] when there is none. A malformed file raises ConfigError."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot read GPU fault file {path}: {exc}",
                          hint="clear it with `nvrx-hpc cluster clear-gpu-faults`") from None
    if not isinstance(data, dict) or data.get("version") != _VERSION:
        raise ConfigError(f"GPU fault file {path} has an unknown shape or version",
                          hint="clear it with `nvrx-hpc cluster clear-gpu-faults`")
    return [SimFault(**item) for item in data.get("faults", [])]


def _write(path: Path, faults: list[SimFault]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"version": _VERSION, "node": path.stem, "faults": [asdict(f) for f in faults]}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(payload, out, indent=1)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def inject(fault_dir: Path, node: str, faults: Iterable[SimFault]) -> list[SimFault]:
    """Append faults to the node's file (stamping time and sequence numbers); returns the whole list."""
    path = fault_file(fault_dir, node)
    current = read_faults(path)
    seq = max((f.seq for f in current), default=0)
    now = time.time()
    for fault in faults:
        seq += 1
        current.append(SimFault(fault.key, fault.value, fault.gpu, seq, now))
    _write(path, current)
    return current


def clear(fault_dir: Path, nodes: Iterable[str] | None = None) -> list[str]:
    """Remove the fault files of `nodes` (None: every node); returns the nodes that had one."""
    fault_dir = Path(fault_dir)
    if nodes is None:
        paths = sorted(fault_dir.glob("*.json")) if fault_dir.is_dir() else []
    else:
        paths = [fault_file(fault_dir, n) for n in nodes]
    cleared = []
    for path in paths:
        try:
            path.unlink()
            cleared.append(path.stem)
        except FileNotFoundError:
            pass
    return cleared
