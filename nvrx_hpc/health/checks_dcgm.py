"""`gpu.dcgm`: NVIDIA DCGM's diagnostics (`dcgmi diag -r LEVEL -j`) at level full, when the site has dcgmi.

Level 1 takes seconds (deployment checks, pending retirements/remaps); level 2 (about 2 minutes) is
NVIDIA's suggestion after a failed job. The JSON layout changed across DCGM releases, so the parser
walks the whole document for test entries with a `status` and keeps the failed and warned ones.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from typing import Any

from nvrx_hpc.core.errors import HealthError
from nvrx_hpc.health.api import Finding, Level, Verdict
from nvrx_hpc.health.policy import verdict_of
from nvrx_hpc.health.registry import CheckContext, register

__all__ = ["parse_dcgm_json"]


def _first_text(entry: dict[str, Any]) -> str:
    for key in ("warnings", "errors"):
        items = entry.get(key)
        if isinstance(items, list) and items:
            item = items[0]
            return str(item.get("warning") or item.get("error") or item) if isinstance(item, dict) else str(item)
    return str(entry.get("info") or entry.get("warning") or "").strip()


def parse_dcgm_json(text: str) -> tuple[list[str], list[str], int]:
    """(failed tests, warned tests, tests seen) from `dcgmi diag -j` output. Raises ValueError if not JSON."""
    doc = json.loads(text)
    failed: list[str] = []
    warned: list[str] = []
    seen = 0

    def walk(node: Any, name: str) -> None:
        nonlocal seen
        if isinstance(node, list):
            for item in node:
                walk(item, name)
            return
        if not isinstance(node, dict):
            return
        name = str(node.get("name") or node.get("test_name") or name)
        status = node.get("status")
        if isinstance(status, str):
            seen += 1
            why = _first_text(node)
            label = f"{name}: {why}" if why else name
            if status.lower() in ("fail", "failed", "error"):
                failed.append(label)
            elif status.lower() in ("warn", "warning"):
                warned.append(label)
        for value in node.values():
            walk(value, name)

    walk(doc, "dcgm")
    return list(dict.fromkeys(failed)), list(dict.fromkeys(warned)), seen


@register("gpu.dcgm", Level.FULL, "NVIDIA DCGM diagnostics (dcgmi diag), when installed", gpu=True)
def gpu_dcgm(ctx: CheckContext) -> Finding:
    policy = ctx.policy.dcgm
    if ctx.gpu.name != "nvml":
        return Finding(Verdict.SKIP, f"dcgmi runs with the nvml backend only (backend here: {ctx.gpu.name})")
    dcgmi = shutil.which("dcgmi")
    if dcgmi is None:
        return Finding(Verdict.SKIP, "dcgmi is not installed (NVIDIA DCGM); skipped")
    argv = [dcgmi, "diag", "-r", str(policy.level), "-j"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=policy.timeout_s, check=False)
    except subprocess.TimeoutExpired:
        raise HealthError(f"dcgmi diag -r {policy.level} did not finish within {policy.timeout_s:g} s") from None
    try:
        failed, warned, seen = parse_dcgm_json(proc.stdout)
    except ValueError:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise HealthError(f"dcgmi diag exited {proc.returncode} without JSON: {'; '.join(tail)}") from None
    evidence = {"argv": argv[1:], "returncode": proc.returncode, "failed": failed, "warned": warned, "tests": seen}
    if failed:
        return Finding(verdict_of(policy.failed), f"dcgmi diag -r {policy.level} failed: {'; '.join(failed)}", evidence)
    if warned:
        return Finding(Verdict.WARN, f"dcgmi diag -r {policy.level} warned: {'; '.join(warned)}", evidence)
    return Finding(Verdict.OK, f"dcgmi diag -r {policy.level}: {seen} tests passed", evidence)
