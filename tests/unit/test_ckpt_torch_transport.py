"""The checkpoint's private gloo group (TorchTransport) times out like the default group: a save in flight must not
wait torch's 30 minutes for a hung peer when the training's collectives give up after seconds (in-process restart
sets them to `pg_timeout_s`). Two real gloo ranks; rank 1 never joins the checkpoint collective."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

WORKER = r"""
import datetime, json, sys, time
import torch.distributed as dist
from nvrx_hpc.ckpt.transport import TorchTransport

rank, path, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
store = dist.FileStore(path, 2)
dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
dist.group.WORLD.set_timeout(datetime.timedelta(seconds=2))
transport = TorchTransport()
if rank == 1:
    time.sleep(30)  # hung: never joins the collective below
    sys.exit(0)
start = time.monotonic()
try:
    transport.allgather_bytes(b"manifest")
    error = None
except Exception as exc:
    error = type(exc).__name__
json.dump({"error": error, "waited_s": time.monotonic() - start}, open(out, "w"))
"""


def test_a_hung_peer_ends_a_checkpoint_collective_at_the_default_groups_timeout(tmp_path: Path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    out = tmp_path / "rank0.json"
    procs = [subprocess.Popen([sys.executable, str(script), str(rank), str(tmp_path / "store"), str(out)])
             for rank in (0, 1)]  # fmt: skip
    try:
        procs[0].wait(timeout=120)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
    result = json.loads(out.read_text())
    assert result["error"] is not None, result
    assert result["waited_s"] < 15, result  # the default group's 2 s (with a loaded machine's slack), not 30 min
