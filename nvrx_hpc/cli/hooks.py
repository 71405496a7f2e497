"""`nvrx-hpc prolog` / `nvrx-hpc epilog`: what slurmd runs on each node before and after a job.

Each run appends one JSON line to `health.hook_log` (default /var/log/nvrx-hpc/hooks.jsonl): the job's
context (job, node, user, exit codes, the SPANK_* variables our plugin passed) and, under `health`,
what the health gate decided (see `nvrx_hpc.health.gate`). After a failed job the Epilog also
starts the detached attribution of the job's run directory (`nvrx_hpc.attribution.trigger`) and, for a
`--nvrx` job, the detached check that requeues it when its launcher died undecided
(`nvrx_hpc.launcher.orphan`; `launcher.epilog_requeue`).

For a job submitted with `--nvrx` (the SPANK plugin passes SPANK_NVRX_ENABLED=1) on a node the gate
passed, the Prolog also starts the job's node agent (site mode, `nvrx_hpc.agent.site`), and the Epilog
stops it; the record says so under `site_agent`.

They fail open: whatever goes wrong inside nvrx-hpc, they exit 0, because a non-zero Prolog drains
the node. Only a completed check that judged the node fatal makes the Prolog exit non-zero (94),
after it drained the node with an `nvrx:` reason, so that Slurm requeues the job on other nodes.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path

import typer

from nvrx_hpc.cli._output import print_json
from nvrx_hpc.core.config import default_value, load_config
from nvrx_hpc.core.errors import NvrxError

log = logging.getLogger(__name__)

# What slurmd puts in a Prolog/Epilog environment that we keep in the record.
_SLURM_FIELDS = {
    "job": "SLURM_JOB_ID",
    "node": "SLURMD_NODENAME",
    "context": "SLURM_SCRIPT_CONTEXT",
    "user": "SLURM_JOB_USER",
    "uid": "SLURM_JOB_UID",
    "partition": "SLURM_JOB_PARTITION",
    "exit_code": "SLURM_JOB_EXIT_CODE",
    "exit_code2": "SLURM_JOB_EXIT_CODE2",
    "restart_count": "SLURM_RESTART_COUNT",
}


def hook_record(kind: str, env: dict[str, str]) -> dict:
    """One JSON-able record of a Prolog/Epilog run. SPANK_* holds what our plugin passed from srun/sbatch."""
    record: dict = {"time": time.time(), "hook": kind}
    record.update({key: env[var] for key, var in _SLURM_FIELDS.items() if var in env})
    record["spank"] = {k: v for k, v in sorted(env.items()) if k.startswith("SPANK_")}
    return record


def _append(path: Path, record: dict) -> None:
    """Root's log: 0640, never through a symlink (its directory is the site's, e.g. /var/log/nvrx-hpc)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    with open(fd, "a", encoding="utf-8") as out:
        out.write(json.dumps(record, sort_keys=True, default=str) + "\n")


def hook_log_path(env: dict[str, str]) -> Path:
    """`health.hook_log`; with a config that does not load, its default (the run is recorded all the same)."""
    try:
        return Path(load_config(env=env).config.health.hook_log)
    except NvrxError:
        return Path(default_value("health.hook_log"))


def _run_hook(kind: str, dry_run: bool = False) -> int:
    """Record the run, run the health gate, return the exit code. Never raises (fail open)."""
    env = dict(os.environ)
    target = hook_log_path(env)
    code, hung, record = 0, False, {"time": time.time(), "hook": kind}
    try:
        record = hook_record(kind, env)
        from nvrx_hpc.health.gate import gate

        outcome = gate(kind, env, dry_run=dry_run)
        record["health"] = outcome.to_dict()
        code = int(outcome.exit_code)
        hung = bool(outcome.report and outcome.report.timed_out)
        if dry_run:
            full = {**outcome.to_dict(), "report": outcome.report.to_dict() if outcome.report else None}
            print_json(full)
        elif kind == "epilog":
            record["site_agent"] = _site_agent("epilog", env)
            _trigger_attribution(env)
            record["orphan_check"] = _orphan_check(env)
        elif code == 0 and env.get("SPANK_NVRX_ENABLED") == "1":
            record["site_agent"] = _site_agent("prolog", env)
    except Exception as exc:  # fail open: a hook bug must never drain a node
        log.exception("[job %s] %s failed inside nvrx-hpc; exiting 0", env.get("SLURM_JOB_ID", "?"), kind)
        record["health"] = {"action": "error", "exit_code": 0, "detail": f"{type(exc).__name__}: {exc}"}
        code = 0
    if not dry_run:
        try:
            _append(target, record)
        except Exception:
            log.exception("[job %s] %s could not record its run in %s", env.get("SLURM_JOB_ID", "?"), kind, target)
    if hung:
        # A check still hangs in a daemon thread (e.g. inside NVML): leave now, inside the budget.
        sys.stdout.flush()
        sys.stderr.flush()
        logging.shutdown()
        os._exit(code)
    return code


def _site_agent(kind: str, env: dict[str, str]) -> dict | None:
    """Start (Prolog) or stop (Epilog) this node's site agent for the job; a failure is recorded, not raised."""
    try:
        from nvrx_hpc.agent.site import start_site_agent, stop_site_agent

        config = load_config().config
        return start_site_agent(env, config) if kind == "prolog" else stop_site_agent(env, config)
    except Exception as exc:  # fail open: the launcher starts its own agent where none answers
        log.warning("[job %s] %s: site agent: %s", env.get("SLURM_JOB_ID", "?"), kind, exc)
        return {"error": f"{type(exc).__name__}: {getattr(exc, 'message', exc)}"}


def _trigger_attribution(env: dict[str, str]) -> None:
    """After a failed job, start the detached attribution of its run directory (once per job; never raises)."""
    try:
        from nvrx_hpc.attribution.trigger import trigger_from_epilog
    except ImportError:
        return
    trigger_from_epilog(env)


def _orphan_check(env: dict[str, str]) -> int | None:
    """A --nvrx job (site mode): start the detached check that requeues it if its launcher died undecided
    (`nvrx_hpc.launcher.orphan`, as the job's user); its pid, None when not started. Never raises."""
    if env.get("SPANK_NVRX_ENABLED") != "1":
        return None  # not an nvrx job: nothing to import or load
    try:
        from nvrx_hpc.core.as_user import job_user, spawn_detached
        from nvrx_hpc.launcher.orphan import MODULE, wanted

        if not wanted(env, load_config(env=env).config):
            return None
        user = job_user(env)
        if user is None and os.geteuid() == 0:
            return None  # never as root for a job whose user cannot be told
        return spawn_detached(MODULE, env, user)
    except Exception as exc:  # fail open: the Epilog must succeed
        log.warning("[job %s] epilog: orphan check not started: %s", env.get("SLURM_JOB_ID", "?"), exc)
        return None


def register(app: typer.Typer) -> None:
    _dry = typer.Option(False, "--dry-run", help="Check and print what would happen (JSON); never drain.")

    @app.command()
    def prolog(dry_run: bool = _dry) -> None:
        """Run by slurmd before a job's first step on a node (slurm.conf: Prolog=): the health gate."""
        raise typer.Exit(_run_hook("prolog", dry_run))

    @app.command()
    def epilog(dry_run: bool = _dry) -> None:
        """Run by slurmd when a job ends on a node (slurm.conf: Epilog=): re-checks after a failure."""
        raise typer.Exit(_run_hook("epilog", dry_run))
