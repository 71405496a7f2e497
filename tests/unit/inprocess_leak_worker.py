"""One task of tests/unit/test_inprocess.py: a gloo training function that fails on purpose in every round
before the last, recording its RSS, threads and open descriptors at the start of each round."""

from __future__ import annotations

import json
import os
import sys
import time

import psutil
import torch
import torch.distributed as dist

from nvrx_hpc import inprocess

FAULTY_ROUNDS = int(sys.argv[1])
OUT = sys.argv[2]
SAME = sys.argv[3:] == ["same"]  # the same error every round (a bug, not a transient fault)
_proc = psutil.Process()


def train(ctx: inprocess.Context) -> float:
    t = torch.ones(4096)
    dist.all_reduce(t)  # every rank is in the group before anyone records or fails
    sample = {"round": ctx.round, "rank": ctx.rank, "slot": ctx.slot, "rss": _proc.memory_info().rss,
              "threads": _proc.num_threads(), "fds": len(os.listdir("/proc/self/fd")), "t": time.time()}
    with open(OUT, "a") as f:
        f.write(json.dumps(sample) + "\n")
    if ctx.round < FAULTY_ROUNDS:
        if ctx.rank == (0 if SAME else ctx.round % ctx.world_size):
            raise RuntimeError("injected bug" if SAME else f"injected fault in round {ctx.round}")
        while True:  # the others sit in collectives until the failed rank's teardown breaks them
            dist.all_reduce(t)
    return float(t[0])


if __name__ == "__main__":
    torch.set_num_threads(1)
    print(f"slot {os.environ['SLURM_PROCID']} result {inprocess.run(train)}", flush=True)
