"""Host checks: burst-buffer directory, /dev/shm, available memory, required mounts.

These read the real host whatever the GPU backend is. A write probe creates, fsyncs and removes a
small hidden file; nothing else is changed (a missing burst-buffer root is not created, so that a
check run by a user never leaves a directory with the wrong owner; the nearest existing parent is
probed instead).
"""

from __future__ import annotations

import os
import shutil
import stat
import tempfile
from pathlib import Path

import psutil

from nvrx_hpc.health.api import Finding, Level, Verdict
from nvrx_hpc.health.policy import verdict_of
from nvrx_hpc.health.registry import CheckContext, register

__all__ = ["bb_root", "probe_dir"]

_GIB = 2**30
SHM = Path("/dev/shm")


def bb_root(template: str, node: str) -> Path:
    """The node-wide part of the burst-buffer template: the components before the one holding %j.

    "/dev/shm/nvrx/%j" -> /dev/shm/nvrx; "/tmp/c/bb/%n/%j" on n2 -> /tmp/c/bb/n2.
    """
    keep = []
    for part in Path(template).parts:
        plain = part.replace("%%", "\0")
        if "%j" in plain:
            break
        keep.append(plain.replace("%n", node).replace("\0", "%"))
    return Path(*keep) if keep else Path("/")


def probe_dir(path: Path) -> tuple[Path, str | None]:
    """Write, fsync and remove a small file in `path` (or its nearest existing parent).

    Returns the directory probed and None, or the reason it is not usable.
    """
    target = Path(path)
    while not target.exists() and target != target.parent:
        target = target.parent
    if not target.is_dir():
        return target, f"{target} is not a directory"
    try:
        fd, name = tempfile.mkstemp(dir=target, prefix=".nvrx-health-")
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            os.unlink(name)
    except OSError as exc:
        return target, f"cannot write in {target}: {exc.strerror or exc}"
    return target, None


def _space(ctx_action_low: str, where: Path, min_gib: float, what: str) -> Finding | None:
    free = shutil.disk_usage(where).free / _GIB
    if min_gib and free < min_gib:
        return Finding(verdict_of(ctx_action_low), f"{what} {where}: {free:.2f} GiB free, below {min_gib:g} GiB",
                       {"path": str(where), "free_gib": round(free, 3)})  # fmt: skip
    return None


def _site_dir_closed_to_us(path: Path) -> bool:
    """`path` is an existing directory of root's that this (non-root) user may not write."""
    if os.geteuid() == 0:
        return False
    try:
        st = os.stat(path)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == 0 and not os.access(path, os.W_OK)


@register("host.burst_buffer", Level.QUICK, "burst-buffer directory writable, with enough free space", gpu=False)
def host_burst_buffer(ctx: CheckContext) -> Finding:
    policy = ctx.policy.host
    root = bb_root(ctx.bb_dir_template, ctx.node)
    probed, problem = probe_dir(root)
    evidence = {"path": str(root), "probed": str(probed), "template": ctx.bb_dir_template}
    if problem and _site_dir_closed_to_us(probed):
        # A user-mode agent (not root) meets the site's own directory (root's, 0755, made by a Prolog): not
        # writable by this user says nothing about the node, and failing here would exclude a healthy node.
        free = shutil.disk_usage(probed).free / _GIB
        return Finding(Verdict.OK, f"{probed} is the site's (root's), not writable by uid {os.geteuid()}; "
                       f"{free:.1f} GiB free", {**evidence, "free_gib": round(free, 3), "writable": False})
    if problem:
        return Finding(verdict_of(policy.bb_unwritable), f"burst buffer {root}: {problem}", evidence)
    low = _space(policy.bb_low_space, probed, policy.bb_min_free_gib, "burst buffer")
    if low:
        return low
    free = shutil.disk_usage(probed).free / _GIB
    note = "" if probed == root else f" (does not exist yet; {probed} is writable)"
    return Finding(Verdict.OK, f"{root} writable, {free:.1f} GiB free{note}", {**evidence, "free_gib": round(free, 3)})


@register("host.shm", Level.QUICK, "/dev/shm present, writable, with enough free space", gpu=False)
def host_shm(ctx: CheckContext) -> Finding:
    policy = ctx.policy.host
    if not SHM.is_dir():
        return Finding(verdict_of(policy.shm_unwritable), f"{SHM} does not exist (NCCL needs it)")
    _, problem = probe_dir(SHM)
    if problem:
        return Finding(verdict_of(policy.shm_unwritable), problem)
    low = _space(policy.shm_low_space, SHM, policy.shm_min_free_gib, "shared memory")
    if low:
        return low
    usage = shutil.disk_usage(SHM)
    return Finding(Verdict.OK, f"{SHM} writable, {usage.free / _GIB:.1f} of {usage.total / _GIB:.1f} GiB free",
                   {"free_gib": round(usage.free / _GIB, 3), "total_gib": round(usage.total / _GIB, 3)})  # fmt: skip


@register("host.memory", Level.QUICK, "available memory against the policy's minimum share", gpu=False)
def host_memory(ctx: CheckContext) -> Finding:
    policy = ctx.policy.host
    vm = psutil.virtual_memory()
    pct = 100.0 * vm.available / vm.total if vm.total else 0.0
    evidence = {"available_gib": round(vm.available / _GIB, 3), "total_gib": round(vm.total / _GIB, 3),
                "available_pct": round(pct, 2)}  # fmt: skip
    if pct < policy.mem_min_available_pct:
        detail = f"{vm.available / _GIB:.1f} GiB available, {pct:.1f}% of {vm.total / _GIB:.1f} GiB"
        return Finding(verdict_of(policy.mem_low), detail + f" (below {policy.mem_min_available_pct:g}%)", evidence)
    return Finding(Verdict.OK, f"{vm.available / _GIB:.1f} of {vm.total / _GIB:.1f} GiB available", evidence)


@register("host.mounts", Level.QUICK, "the mounts the policy requires are mounted and answer", gpu=False)
def host_mounts(ctx: CheckContext) -> Finding:
    policy = ctx.policy.host
    if not policy.required_mounts:
        return Finding(Verdict.SKIP, "no required mounts configured (policy host.required_mounts)")
    missing = []
    for mount in policy.required_mounts:
        if not os.path.ismount(mount):
            missing.append(mount)
            continue
        os.statvfs(mount)  # a dead network mount hangs here; the runner's budget reports it
    evidence = {"required": list(policy.required_mounts), "missing": missing}
    if missing:
        return Finding(verdict_of(policy.missing_mount), f"not mounted: {', '.join(missing)}", evidence)
    return Finding(Verdict.OK, f"mounted: {', '.join(policy.required_mounts)}", evidence)
