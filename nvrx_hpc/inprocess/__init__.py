"""In-process restart: recover inside the running training processes instead of restarting the step.

    from nvrx_hpc import inprocess

    def train(ctx: inprocess.Context) -> None:
        # torch.distributed is initialised for this round: ctx.rank of ctx.world_size
        model, opt, ckpt = build()                  # fresh objects every round
        step = ckpt.load(state) or 0                # the newest committed version, from node-local memory
        for step in range(step + 1, steps + 1): ...

    inprocess.run(train)

Run under `nvrx-hpc run --inprocess [--spare-ranks K]`. When a rank raises, dies or hangs, every other
rank leaves the function (an agent's notice, or its collective failing), tears torch.distributed down,
meets the others in a fresh namespace of the job's store and calls the function again; a spare task
takes a lost rank's place. What cannot be recovered this way exits with INPROCESS_ESCALATE (95) and
`nvrx-hpc run` restarts the step. See docs/inprocess.md.
"""

from __future__ import annotations

from typing import Any

from nvrx_hpc.inprocess.interrupt import RestartInterrupt
from nvrx_hpc.inprocess.settings import InprocessSettings
from nvrx_hpc.inprocess.wrapper import Context, InprocessWrapper

__all__ = ["run", "Context", "RestartInterrupt", "InprocessSettings", "InprocessWrapper"]


def run(fn: Any, *args: Any, settings: InprocessSettings | None = None, backend: str = "gloo", **kwargs: Any) -> Any:
    """Call `fn(ctx, *args, **kwargs)` until it returns, restarting it in-process after each fault.

    Returns fn's result, or None on a spare task that was never needed.

    Raises:
        ConfigError: the task was not started by `nvrx-hpc run --inprocess` (no NVRX_IP_STORE).
        SystemExit(95): recovery is impossible in-process (see docs/inprocess.md, "When it escalates").
    """
    return InprocessWrapper(settings or InprocessSettings.from_env(), backend).run(fn, *args, **kwargs)
