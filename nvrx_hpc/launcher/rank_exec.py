"""Runs in front of every training rank: torch.distributed variables from Slurm's, then exec the command.

`python -m nvrx_hpc.launcher.rank_exec -- CMD...`. Imports next to nothing, so it costs
milliseconds, and `exec` keeps the PID that the SPANK plugin registered.
"""

from __future__ import annotations

import os
import sys

from nvrx_hpc.core.templates import expand_percent  # imports only `string`

_FROM_SLURM = {
    "RANK": "SLURM_PROCID",
    "LOCAL_RANK": "SLURM_LOCALID",
    "WORLD_SIZE": "SLURM_NTASKS",
    "NODE_RANK": "SLURM_NODEID",
}


def main(argv: list[str]) -> None:
    if "--" in argv:
        argv = argv[argv.index("--") + 1 :]
    if not argv:
        sys.stderr.write("nvrx-hpc rank_exec: no command given (usage: ... rank_exec -- CMD...)\n")
        sys.exit(2)
    env = os.environ
    for target, source in _FROM_SLURM.items():
        if source in env:
            env[target] = env[source]
    base = env.get("NVRX_IP_SLOT_BASE", "")
    if base.isdigit() and env.get("SLURM_PROCID", "").isdigit():
        # a refill task of in-process restart: it registers with its agent under its slot, beyond the step's
        env["RANK"] = str(int(env["SLURM_PROCID"]) + int(base))
    if "SLURM_NTASKS_PER_NODE" in env and env["SLURM_NTASKS_PER_NODE"].isdigit():
        env["LOCAL_WORLD_SIZE"] = env["SLURM_NTASKS_PER_NODE"]
    if "%" in env.get("NVRX_AGENT_SOCKET", ""):
        env["NVRX_AGENT_SOCKET"] = expand_percent(
            env["NVRX_AGENT_SOCKET"], job_id=env.get("SLURM_JOB_ID", ""), node=env.get("SLURMD_NODENAME", "")
        )
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"nvrx-hpc rank_exec: cannot run {argv[0]!r}: {exc.strerror}\n")
        sys.exit(127)


if __name__ == "__main__":
    main(sys.argv[1:])
