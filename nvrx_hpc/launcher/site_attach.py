"""Site mode: attach the node agents the Prolog started (jobs submitted with `sbatch --nvrx`)."""

from __future__ import annotations

import asyncio
import re

from nvrx_hpc.agent.site import ATTACH_WAIT_S
from nvrx_hpc.core.events import EventLog
from nvrx_hpc.launcher.steps import attach_step_argv
from nvrx_hpc.slurm.hostlist import compress

__all__ = ["attach_site_agents"]

# What `nvrx-hpc agent-attach` prints on each node.
_ATTACHED = re.compile(r"^nvrx-attach (\S+) attached pid=(\d+)", re.M)
_MISSING = re.compile(r"^nvrx-attach (\S+) missing: (.*)$", re.M)


async def attach_site_agents(
    nodes: list[str], link_args: list[str], env: dict[str, str], events: EventLog
) -> list[str]:
    """Site mode: attach the agents the Prolog started (jobs submitted with --nvrx); the nodes attached."""
    argv = attach_step_argv(nodes, [*link_args, "--wait", f"{ATTACH_WAIT_S:g}"])
    proc = await asyncio.create_subprocess_exec(
        *argv, env=env, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        out, err = await asyncio.wait_for(proc.communicate(), ATTACH_WAIT_S + 30)
    except asyncio.TimeoutError:
        proc.kill()
        out, err = b"", b"the attach step did not finish"
    text = out.decode(errors="replace")
    pids = {m.group(1): int(m.group(2)) for m in _ATTACHED.finditer(text) if m.group(1) in nodes}
    attached = sorted(pids)
    missing = [n for n in nodes if n not in pids]
    why = {m.group(1): m.group(2) for m in _MISSING.finditer(text)}
    events.emit(
        "launcher.agents.site", reason="attached the agents the Prolog started" if not missing else
        f"no site agent on {compress(missing)}; starting agents there", attached=pids, missing=missing,
        why={n: why.get(n, err.decode(errors='replace')[-300:]) for n in missing},
    )  # fmt: skip
    return attached
