"""The Prolog/Epilog health gate, and `nvrx-hpc node recheck`: run checks within a budget, drain on fatal.

`gate(hook, env)` never raises. Whatever fails inside nvrx-hpc (config, policy, a check, Slurm) ends
as an outcome with exit code 0 (fail open); only a completed check that positively judged the node
`fatal` gives a non-zero exit, and only after the node was drained with `nvrx: <check>: <detail>`
(or left alone because someone else already drained it).

- prolog: always checks, at the level of `--nvrx-health` (quick by default; `off` if the policy
  allows it). Fatal: drain, exit 94, and Slurm requeues the job on other nodes.
- epilog: checks when the policy's `gate.epilog` says so (default: the job failed, or the agent
  flagged the node). Fatal: drain, exit 0 (non-zero only when the drain failed, so Slurm drains).
- recheck: always checks. Fatal: drain, exit 69. All pass: resume an `nvrx:` drain if
  `gate.undrain_on_pass` (or `--undrain`).

The budget is `health.prolog_budget_s`, counted from the process start; a share is kept for the two
`scontrol` calls of a drain.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from nvrx_hpc.core.config import NvrxConfig, load_config
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.health.api import CheckResult, HealthReport, Level
from nvrx_hpc.health.drain import DrainOutcome, drain_node, drain_reason, is_ours, undrain_node
from nvrx_hpc.health.policy import HealthPolicy, load_policy
from nvrx_hpc.health.service import node_name, run_health
from nvrx_hpc.slurm.api import SlurmBackend

__all__ = ["GateOutcome", "gate", "job_failed", "agent_flag_path", "write_agent_flag"]

log = logging.getLogger(__name__)

_LEVEL_ENV = "SPANK_NVRX_HEALTH"  # set by the SPANK plugin from sbatch/salloc --nvrx-health
_EXIT_ON_FATAL = {"prolog": ExitCode.REQUEUE_EXCLUDING, "epilog": ExitCode.OK, "recheck": ExitCode.UNAVAILABLE}


@dataclass(frozen=True)
class GateOutcome:
    """What one gate run decided. `action`: pass, drained, already-ours, left-alone, drain-failed,
    dry-run, skipped, resumed or error; `exit_code` is what the hook exits with."""

    hook: str
    node: str
    job_id: str | None
    action: str
    exit_code: int
    level: str | None = None
    reason: str | None = None
    detail: str | None = None
    report: HealthReport | None = None
    drain: DrainOutcome | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "hook": self.hook, "node": self.node, "job": self.job_id, "action": self.action,
            "exit_code": int(self.exit_code), "level": self.level, "reason": self.reason, "detail": self.detail,
        }  # fmt: skip
        if self.report is not None:
            out["verdict"] = self.report.verdict.value
            out["duration_s"] = round(self.report.duration_s, 3)
            out["timed_out"] = list(self.report.timed_out)
            out["findings"] = [r.to_dict() for r in self.report.results if r.verdict.severity > 0]
        if self.drain is not None:
            out["drain"] = self.drain.to_dict()
        return out


def job_failed(env: Mapping[str, str]) -> bool:
    """The job ended badly: a non-zero exit or signal in SLURM_JOB_EXIT_CODE2/_EXIT_CODE/_DERIVED_EC."""
    for var in ("SLURM_JOB_EXIT_CODE2", "SLURM_JOB_DERIVED_EC"):
        value = env.get(var, "")
        if value and any(part.strip() not in ("", "0") for part in value.split(":")):
            return True
    code = env.get("SLURM_JOB_EXIT_CODE", "0").strip()
    return code not in ("", "0")


def agent_flag_path(config: NvrxConfig, job_id: str, node: str) -> Path:
    """Where the node agent marks its node for an Epilog re-check: beside its socket."""
    return Path(config.agent.socket_path(job_id, node)).parent / f"health-flag-{node}.json"


def write_agent_flag(path: Path, result: CheckResult) -> None:
    """Called by the agent on a fatal finding: the Epilog then re-checks this node whatever the job's exit."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps({"time": time.time(), **result.to_dict()}) + "\n")
    os.replace(tmp, path)


def _process_age() -> float:
    try:
        return max(time.time() - psutil.Process().create_time(), 0.0)
    except psutil.Error:
        return 0.0


def _level_for(hook: str, env: Mapping[str, str], policy: HealthPolicy) -> tuple[Level | None, str | None]:
    """(level, None) to check, or (None, why not)."""
    asked = env.get(_LEVEL_ENV, "").strip().lower()
    if asked == "off":
        if policy.gate.allow_user_off and hook != "recheck":
            return None, "the job asked for --nvrx-health=off (policy gate.allow_user_off)"
        asked = ""
    level = Level(asked) if asked in ("quick", "full") else Level.QUICK
    return level, None


def gate(
    hook: str,
    env: Mapping[str, str],
    *,
    dry_run: bool = False,
    slurm: SlurmBackend | None = None,
    undrain: bool | None = None,
) -> GateOutcome:
    """Run the gate for `hook` (prolog, epilog, recheck). Never raises; see the module docstring."""
    node = node_name(env)
    job = env.get("SLURM_JOB_ID")
    try:
        return _gate(hook, env, node, job, dry_run, slurm, undrain)
    except Exception as exc:  # fail open: our own failure never drains a node
        log.exception("[job %s %s] %s health gate failed; letting the job run", job or "-", node, hook)
        return GateOutcome(hook, node, job, "error", ExitCode.OK, detail=f"{type(exc).__name__}: {exc}")


def _gate(
    hook: str,
    env: Mapping[str, str],
    node: str,
    job: str | None,
    dry_run: bool,
    slurm: SlurmBackend | None,
    undrain: bool | None,
) -> GateOutcome:
    config = load_config(env=env).config
    policy = load_policy(env=env)
    level, why_not = _level_for(hook, env, policy)
    flag = agent_flag_path(config, job, node) if job and hook == "epilog" else None
    if level is not None and hook == "epilog":
        flagged = flag is not None and flag.exists()
        if policy.gate.epilog == "never":
            level, why_not = None, "policy gate.epilog = 'never'"
        elif policy.gate.epilog == "on_failure" and not (flagged or job_failed(env)):
            level, why_not = None, "policy gate.epilog = 'on_failure'; the job succeeded and no agent flag"
    if level is None:
        return GateOutcome(hook, node, job, "skipped", ExitCode.OK, detail=why_not)

    budget = config.health.prolog_budget_s
    reserve = 0.0 if dry_run else min(config.slurm.command_timeout_s, budget / 3)
    checks_budget = max(budget - _process_age() - reserve, 0.5)
    report = run_health(config, node=node, level=level, policy=policy, env=env, budget_s=checks_budget, job_id=job)
    if flag is not None:
        flag.unlink(missing_ok=True)
    base = {"hook": hook, "node": node, "job_id": job, "level": level.value, "report": report}

    if not report.fatal:
        resume = policy.gate.undrain_on_pass if undrain is None else undrain
        if hook == "recheck" and resume and not dry_run:
            return _maybe_undrain(_slurm(slurm, config, reserve or 10.0), node, base)
        return GateOutcome(action="pass", exit_code=ExitCode.OK, **base)

    reason = drain_reason(report.fatal[0])
    if dry_run:
        return GateOutcome(action="dry-run", exit_code=ExitCode.OK, reason=reason,
                           detail="would drain the node and exit non-zero", **base)  # fmt: skip
    outcome = drain_node(_slurm(slurm, config, reserve), node, reason)
    code = _EXIT_ON_FATAL[hook]
    if outcome.action == "failed" and hook == "epilog":
        code = ExitCode.REQUEUE_EXCLUDING  # our drain failed: a failing Epilog makes Slurm drain the node
    action = {"failed": "drain-failed"}.get(outcome.action, outcome.action)
    return GateOutcome(action=action, exit_code=code, reason=reason, drain=outcome, **base)


def _slurm(slurm: SlurmBackend | None, config: NvrxConfig, reserve: float) -> SlurmBackend:
    if slurm is not None:
        return slurm
    from nvrx_hpc.slurm.backend import get_backend

    per_command = max(min(config.slurm.command_timeout_s, reserve / 2), 1.0)
    # Text output: one `scontrol -o show node` instead of `sinfo --version` + `sinfo --json`.
    return get_backend(config.slurm.backend, timeout=per_command, text_only=True)


def _maybe_undrain(slurm: SlurmBackend, node: str, base: dict[str, Any]) -> GateOutcome:
    info = slurm.node(node)
    if not (info.drained and is_ours(info.reason)):
        return GateOutcome(action="pass", exit_code=ExitCode.OK, **base)
    outcome = undrain_node(slurm, node)
    return GateOutcome(action="resumed", exit_code=ExitCode.OK, reason=outcome.reason, drain=outcome, **base)
