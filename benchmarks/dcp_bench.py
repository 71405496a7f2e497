"""DCP adapter cost: dcp.save through DcpWriter next to dcp.save through plain FileSystemWriter, same run.

    python benchmarks/dcp_bench.py                      # 2 ranks in 2 simulated domains x 64 MiB each
    python benchmarks/dcp_bench.py --ranks 4 --size-mib 256 --dir /nvme/bench --json

Ranks are forked processes on one gloo group (CPU). Figures are the slowest rank's dcp.save time, median
over --iters after one warm-up save each:
  plain_s          FileSystemWriter (fsync on) into a fresh directory
  adapter_s        DcpWriter: staging, fsync, partner copy into the other domain, rename, `latest`
  adapter_norepl_s DcpWriter with replicate=False (the commit alone)
  ratio            adapter_s / plain_s (partner copies write every byte twice: about 2 is the floor)
  norepl_ratio     adapter_norepl_s / plain_s
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path


def _rank(rank: int, world: int, port: int, args: argparse.Namespace, out: Path) -> None:
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint import FileSystemWriter

    from nvrx_hpc.ckpt import DcpWriter

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    base = Path(args.dir)
    domain = f"d{rank % 2}"  # every rank's partner sits in the other simulated domain
    state = {f"r{rank}": torch.randn(args.size_mib << 18)}  # 4-byte floats
    writers = {"adapter_s": DcpWriter(base / "bb" / "{domain}", failure_domain=domain, keep=1),
               "adapter_norepl_s": DcpWriter(base / "bbn" / "{domain}", failure_domain=domain, keep=1,
                                             replicate=False)}
    times: dict[str, list[float]] = {k: [] for k in ("plain_s", *writers)}
    for i in range(args.iters + 1):
        for name in times:
            dist.barrier()
            start = time.perf_counter()
            if name == "plain_s":
                dcp.save(state, storage_writer=FileSystemWriter(base / "plain" / f"{i}"))
            else:
                dcp.save(state, storage_writer=writers[name])
                writers[name].wait_committed()
            took = torch.tensor([time.perf_counter() - start])
            dist.all_reduce(took, op=dist.ReduceOp.MAX)
            if i:  # the first round warms the page cache and the process group
                times[name].append(float(took))
            if name == "plain_s" and rank == 0:
                shutil.rmtree(base / "plain" / f"{i}", ignore_errors=True)
    if rank == 0:
        out.write_text(json.dumps({k: statistics.median(v) for k, v in times.items()}))
    dist.barrier()
    dist.destroy_process_group()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--size-mib", type=int, default=64, help="state per rank")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--dir", default=None, help="where to write (default: a temporary directory)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="dcp-bench-", dir=args.dir)
    args.dir = tmp
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = Path(tmp) / "result.json"
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=_rank, args=(r, args.ranks, port, args, out)) for r in range(args.ranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    try:
        if any(p.exitcode for p in procs) or not out.exists():
            print("a rank failed", file=sys.stderr)
            return 1
        res = json.loads(out.read_text())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    res["ratio"] = res["adapter_s"] / res["plain_s"]
    res["norepl_ratio"] = res["adapter_norepl_s"] / res["plain_s"]
    res.update(ranks=args.ranks, size_mib=args.size_mib, iters=args.iters)
    if args.json:
        print(json.dumps(res))
    else:
        print(f"{args.ranks} ranks x {args.size_mib} MiB, median of {args.iters}: plain {res['plain_s']:.3f} s, "
              f"adapter {res['adapter_s']:.3f} s (ratio {res['ratio']:.2f}), without partner copies "
              f"{res['adapter_norepl_s']:.3f} s (ratio {res['norepl_ratio']:.2f})")
    return 0


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
