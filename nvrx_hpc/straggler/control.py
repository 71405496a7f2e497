"""`<run dir>/straggler.json`: straggler settings changed while the job runs (`nvrx-hpc straggler set`).

The launcher reads it at every window, so a change takes effect within one window. Only the keys below
are accepted, each checked for type and range; anything else in the file is an error for `set` and is
ignored (with a warning in events.jsonl) by the launcher, which keeps its settings.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.safedir import read_regular_file
from nvrx_hpc.straggler.detector import StragglerSettings

__all__ = ["CONTROL_FILE", "read_control", "write_control", "apply_control", "check_control"]

CONTROL_FILE = "straggler.json"
_LIMIT = 64 * 1024


def check_control(values: dict[str, Any]) -> dict[str, Any]:
    """The accepted subset of `values`, validated. Raises ConfigError naming the bad key."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key == "enabled":
            if not isinstance(value, bool):
                raise ConfigError(f"straggler control: enabled must be true or false, got {value!r}")
        elif key == "threshold":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 1:
                raise ConfigError(f"straggler control: threshold must be a number in (0, 1], got {value!r}")
            value = float(value)
        elif key == "exclude_at_restart":
            if not isinstance(value, bool):
                raise ConfigError(f"straggler control: exclude_at_restart must be true or false, got {value!r}")
        else:
            raise ConfigError(f"straggler control: unknown key {key!r}",
                              hint="nvrx-hpc straggler set changes enabled, threshold and exclude_at_restart")
        out[key] = value
    return out


def read_control(run_dir: Path) -> dict[str, Any]:
    """What the file asks for; {} when there is no file. Raises ConfigError when it is not valid."""
    try:
        data = read_regular_file(Path(run_dir) / CONTROL_FILE, _LIMIT, own=True)
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise ConfigError(f"straggler control {Path(run_dir) / CONTROL_FILE}: {exc}") from None
    if len(data) > _LIMIT:
        raise ConfigError(f"straggler control {Path(run_dir) / CONTROL_FILE} is over {_LIMIT} bytes")
    try:
        values = json.loads(data)
    except ValueError as exc:
        raise ConfigError(f"straggler control {Path(run_dir) / CONTROL_FILE} is not JSON: {exc}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"straggler control {Path(run_dir) / CONTROL_FILE} is not a JSON object")
    return check_control(values)


def write_control(run_dir: Path, **changes: Any) -> dict[str, Any]:
    """Merge `changes` (None: leave as is) into the file, atomically; returns what it now holds."""
    current = read_control(run_dir)
    current.update(check_control({k: v for k, v in changes.items() if v is not None}))
    path = Path(run_dir) / CONTROL_FILE
    tmp = path.with_name(f".{CONTROL_FILE}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "w") as f:
        json.dump(current, f, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    return current


def apply_control(settings: StragglerSettings, control: dict[str, Any]) -> StragglerSettings:
    return dataclasses.replace(settings, **control) if control else settings
