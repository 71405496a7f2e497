"""The rendezvous store's port is rank 0's (round 81).

torch's `env://` rendezvous (and torch.distributed.launch's) starts the TCP store on rank 0 alone, at
`MASTER_ADDR:MASTER_PORT`; the other ranks connect to it. So a store that cannot take its port (`RuntimeError:
Address already in use`, newer torch's `EADDRINUSE`: another job on the node holds the port) failed on rank 0,
whatever line of the log it came in, unless the line names its rank. So did one that may not use its port
(`EACCES`: a port below 1024, round 101c).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from nvrx_hpc.attribution.api import Hit

__all__ = ["store_on_rank0"]

_STORE_PORT = ("store_port_in_use", "store_port_denied")  # its port taken, or one it may not use (EACCES)


def store_on_rank0(hits: Sequence[Hit]) -> list[Hit]:
    return [dataclasses.replace(h, rank=0) if h.signature in _STORE_PORT and h.rank is None else h for h in hits]
