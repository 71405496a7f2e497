"""What runs inside a training rank: heartbeats, sections, iterations and stop requests for the node agent.

Import-light: importing it pulls in no torch, numpy, msgpack or mpi4py. Without NVRX_AGENT_SOCKET
every call is a cheap no-op. See docs/worker.md.

    from nvrx_hpc import worker

    for step in range(start, steps):
        worker.heartbeat()
        with worker.section("step"):
            loss = train_step(batch)
        worker.set_iteration(step)
        if worker.stop_requested():
            save_checkpoint(); break
"""

from nvrx_hpc.worker.api import (
    enabled,
    end_section,
    heartbeat,
    load_state_dict,
    section,
    set_iteration,
    start_section,
    state_dict,
    stop_requested,
)

__all__ = [
    "heartbeat",
    "section",
    "start_section",
    "end_section",
    "set_iteration",
    "state_dict",
    "load_state_dict",
    "stop_requested",
    "enabled",
]
