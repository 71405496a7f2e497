"""Path templates shared by the config, the agent and the SPANK side: `%j`/`%n` and `{submit_dir}`/`{job_id}`.

The `%` form matches what the C plugin expands (spank/nvrx_common.c), so both sides agree on paths.
Validators raise ValueError (pydantic turns it into a config error naming the key).
"""

from __future__ import annotations

import string

__all__ = ["absolute_path", "percent_template", "run_dir_template", "expand_percent"]

_PERCENT_CODES = ("j", "n", "%")
_RUN_DIR_FIELDS = ("submit_dir", "job_id")


def absolute_path(path: str) -> str:
    if not path.startswith("/"):
        raise ValueError(f"must be an absolute path (starting with /), got {path!r}")
    return path


def _check_percent_codes(path: str) -> None:
    i = 0
    while i < len(path):
        if path[i] == "%":
            code = path[i + 1 : i + 2]
            if code not in _PERCENT_CODES:
                raise ValueError(
                    f"unknown placeholder %{code} in {path!r}; allowed: %j (job id), %n (node name), %% (a %)"
                )
            i += 2
        else:
            i += 1


def percent_template(path: str) -> str:
    """`%j` job id, `%n` node name, `%%` a literal `%`; the template must hold `%j`."""
    _check_percent_codes(path)
    if "%j" not in path.replace("%%", ""):
        raise ValueError(f"{path!r} must contain %j so that jobs do not share it")
    return path


def run_dir_template(path: str) -> str:
    """`{submit_dir}` and `{job_id}` only, no format specs; the template must hold `{job_id}`."""
    try:
        parts = list(string.Formatter().parse(path))
    except ValueError as exc:
        raise ValueError(f"bad braces in {path!r}: {exc}") from None
    names = set()
    for _text, name, spec, conv in parts:
        if name is None:
            continue
        if name not in _RUN_DIR_FIELDS or spec or conv:
            allowed = "{submit_dir}, {job_id}"
            raise ValueError(f"unknown placeholder {{{name}}} in {path!r}; allowed: {allowed}")
        names.add(name)
    if "job_id" not in names:
        raise ValueError(f"{path!r} must contain {{job_id}} so that jobs do not share it")
    return path


def expand_percent(template: str, job_id: str = "", node: str = "") -> str:
    """Expand `%j`, `%n` and `%%`; an unknown placeholder is a ValueError."""
    _check_percent_codes(template)
    out, i = [], 0
    while i < len(template):
        if template[i] == "%":
            out.append({"j": job_id, "n": node, "%": "%"}[template[i + 1]])
            i += 2
        else:
            out.append(template[i])
            i += 1
    return "".join(out)
