"""Checkpoint layer speed: each figure next to a baseline measured in the same run, as a ratio with its goal.

    python benchmarks/ckpt_bench.py                       # 4 ranks x 256 MiB (this 2-core dev box)
    python benchmarks/ckpt_bench.py --size-mib 1024       # the issue's 4 ranks x 1 GiB
    python benchmarks/ckpt_bench.py --ranks 8 --bb-dir /nvme/bench --json

It starts itself under `mpirun` (one rank per simulated node, burst buffers in --bb-dir) unless already
launched by mpirun or srun. Ratios (goal in brackets):
  save_vs_copy        save() blocking time / bare copy of the same bytes into host memory      [<= 1.5]
  torch_save_vs_save  torch.save to the same dir / save() blocking time                       [>= 10]
  torch_save_vs_copy  torch.save / the bare copy: the most torch_save_vs_save can be here     [info]
  save_vs_dcp_async   save() blocking time / DCP async_save blocking time                     [<= 0.5]
  dcp_adapter_vs_copy a DCP save through the adapter (nvrx_hpc.ckpt.dcp.async_save with a DcpWriter: staged
                      in the caller, saved by one kept thread), blocking part / a bare copy timed in the same
                      rounds (below)                                                            [<= 1.2]
  dcp_adapter_vs_copy_cpu  the same in the calling thread's CPU time (every rank and round's median;
                      other work on the host does not stretch it)                                [info]
  dcp_torch_async_vs_copy  torch's dcp.async_save(state, storage_writer=DcpWriter(...)) (a thread per call),
                      blocking part / the same bare copy                                         [info]
  write_vs_raw        background shard write throughput / raw sequential write + fsync        [>= 0.85]
  repl_vs_send        partner replication between two ranks (others idle) / raw mpi4py Sendrecv
                      between the same two ranks, both ways at once (the same traffic)        [>= 0.70]
  repl_vs_oneway_send the same / raw mpi4py Send one way (half the traffic)                   [info]
  repl_vs_ring        replication with every rank at once / raw Sendrecv ring, same traffic   [info]
  restore_lost_vs_local  load() with one node's burst buffer wiped / load() with all local    [<= 1.5]
Times are the slowest rank's; medians over --iters, after warm-up saves (in a VM the first touch of memory
that tmpfs has never used costs several times a steady-state write).
dcp_adapter_vs_copy times max(30, --iters) rounds after one that sets up the adapter's host copy, its kept
thread and that thread's gloo group. Each round, on every rank: (1) a bare copy of the state (Tensor.copy_ per
tensor) into host memory allocated and filled in round 0, then (2) the whole
`nvrx_hpc.ckpt.dcp.async_save(state, storage_writer=DcpWriter(...), checkpoint_id=...)` call until it returns:
what a training loop waits for before its next step (the copy into the adapter's kept host copy, queueing it
for the kept thread), then (3) the same with torch's `dcp.async_save` (its bookkeeping, the copy, the start of
a new save thread). The write, partner copies and commit that follow (2) and (3) are untimed, and finished on
every rank (future.result(), wait_committed) before the next step. Each step starts at a gloo barrier with no
save in flight; the harness waits in gloo, which sleeps, not MPI, which spins and would take an
oversubscribed host's cores from the ranks being timed. Each side: the slowest rank's time per round, median
over the rounds. As timeit does, no garbage collection runs inside a timed step: each starts after a full
collection (torch's own objects frozen first), and the collector is off until it ends; dcp_adapter_gc_s is
what one adapter save left to collect (info: dcp_adapter_gc_vs_copy). The other figures use MPI barriers and
reductions (`bare_copy_s` there includes the spinning neighbours).
dcp_adapter_vs_copy on the 2-core dev VM (docs/checkpoint.md, DCP section): with `--size-mib 64 --iters 3`
(4 ranks), 10 runs, 30 rounds each, the benchmark alone on the host: median 1.04, 0.98-1.12; with six busy
processes beside it (load 8-10) median 1.14, 1.06-1.24 over 6 runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOALS = {
    "save_vs_copy": ("<=", 1.5),
    "torch_save_vs_save": (">=", 10.0),
    "torch_save_vs_copy": ("info", None),
    "save_vs_dcp_async": ("<=", 0.5),
    "dcp_adapter_vs_copy": ("<=", 1.2),
    "dcp_adapter_vs_copy_cpu": ("info", None),
    "dcp_adapter_gc_vs_copy": ("info", None),
    "dcp_torch_async_vs_copy": ("info", None),
    "write_vs_raw": (">=", 0.85),
    "repl_vs_send": (">=", 0.70),
    "repl_vs_oneway_send": ("info", None),
    "repl_vs_ring": ("info", None),
    "restore_lost_vs_local": ("<=", 1.5),
}


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ranks", type=int, default=4, help="MPI ranks (one per simulated node)")
    p.add_argument("--size-mib", type=int, default=256, help="state per rank, MiB (the issue's figure: 1024)")
    p.add_argument("--tensors", type=int, default=8, help="tensors per rank (fp32, two of them bf16)")
    p.add_argument("--iters", type=int, default=5, help="timed repetitions per figure (median)")
    p.add_argument("--bb-dir", default="/dev/shm" if Path("/dev/shm").is_dir() else tempfile.gettempdir(),
                   help="where burst buffers and baseline files go (tmpfs by default)")
    p.add_argument("--scheme", default="partner", choices=["partner", "xor"])
    p.add_argument("--json", action="store_true", help="print one JSON object, nothing else")
    p.add_argument("--timeout", type=int, default=1800, help="seconds before the mpirun is killed")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--run-dir", default="", help=argparse.SUPPRESS)
    return p.parse_args(argv)


def launch(args: argparse.Namespace) -> int:
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        print("ckpt_bench: mpirun not found (apt-get install openmpi-bin)", file=sys.stderr)
        return 69
    run_dir = Path(args.bb_dir) / f"nvrx-bench-{os.getpid()}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    repo = str(Path(__file__).resolve().parents[1])  # measure this checkout's nvrx_hpc
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH")])),
           "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo",
           "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
           # more ranks than cores here: waiting ranks must yield the CPU instead of spinning
           "OMPI_MCA_mpi_yield_when_idle": os.environ.get("OMPI_MCA_mpi_yield_when_idle", "1")}
    argv = [mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(args.ranks), sys.executable, __file__,
            "--worker", "--run-dir", str(run_dir), "--size-mib", str(args.size_mib), "--tensors", str(args.tensors),
            "--iters", str(args.iters), "--scheme", args.scheme]
    try:
        done = subprocess.run(argv, env=env, timeout=args.timeout, capture_output=True, text=True)
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("BENCH_JSON ")]
    if done.returncode != 0 or not lines:
        print(f"ckpt_bench: mpirun exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}",
              file=sys.stderr)
        return 1
    result = json.loads(lines[-1].removeprefix("BENCH_JSON "))
    result["config"]["bb_dir"] = args.bb_dir
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        show(result)
    return 0


def show(result: dict) -> None:
    c = result["config"]
    print(f"checkpoint bench: {c['ranks']} ranks x {c['size_mib']} MiB, scheme {c['scheme']}, in {c['bb_dir']}")
    print(f"{'figure':<34}{'value':>12}")
    for name, value in result["figures"].items():
        print(f"{name:<34}{value:>12.4g}")
    print(f"\n{'ratio':<24}{'value':>8}  goal     ok")
    for name, r in result["ratios"].items():
        goal = "-" if r["goal"] is None else f"{r['op']} {r['goal']:g}"
        ok = "-" if r["ok"] is None else ("yes" if r["ok"] else "NO")
        print(f"{name:<24}{r['value']:>8.3f}  {goal:<8} {ok}")


# ----------------------------------------------------------------- inside each rank


def worker(args: argparse.Namespace) -> int:
    import numpy as np
    import torch
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp
    from mpi4py import MPI

    from nvrx_hpc.ckpt import AsyncCheckpointer, DcpWriter
    from nvrx_hpc.ckpt.dcp import async_save as dcp_async_save

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    torch.set_num_threads(1)
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(size))
    dist.init_process_group("gloo")
    run = Path(args.run_dir)
    per = (args.size_mib << 20) // args.tensors
    g = torch.Generator().manual_seed(rank)
    state = {
        f"t{i}": torch.randn(per // 2, generator=g).bfloat16() if i % 4 == 3 else torch.randn(per // 4, generator=g)
        for i in range(args.tensors)
    }
    nbytes = sum(t.numel() * t.element_size() for t in state.values())

    def slowest(seconds: float) -> float:
        return comm.allreduce(seconds, op=MPI.MAX)

    def timed(fn, iters: int = args.iters) -> float:
        times = []
        for _ in range(iters):
            comm.Barrier()
            t = time.perf_counter()
            fn()
            times.append(slowest(time.perf_counter() - t))
        return statistics.median(times)

    figures: dict[str, float] = {}
    # bare copy into preallocated host memory
    dst = {k: torch.empty_like(v) for k, v in state.items()}

    def copy() -> None:
        for k, v in state.items():
            dst[k].copy_(v)

    copy()
    figures["bare_copy_s"] = timed(copy)
    dst.clear()

    ck = AsyncCheckpointer(str(run / "bb" / "{domain}"), scheme=args.scheme, comm=comm, failure_domain=f"node{rank}",
                           set_size=max(2, min(size, 8)), keep=2)
    for warm in range(3):  # the arena is allocated; the burst buffer cycles through keep + 1 versions
        ck.save(state, warm).wait()
    stats = []
    step = [2]
    block = []
    for _ in range(args.iters):
        comm.Barrier()
        t = time.perf_counter()
        h = ck.save(state, step[0] + 1)
        block.append(slowest(time.perf_counter() - t))
        step[0] += 1
        stats.append(h.wait())
    figures["save_block_s"] = statistics.median(block)
    figures["write_s"] = statistics.median(slowest(s.write_s) for s in stats)
    figures["replicate_s"] = statistics.median(slowest(s.replicate_s) for s in stats)
    figures["commit_total_s"] = statistics.median(slowest(s.total_s) for s in stats)
    shard_bytes = stats[-1].nbytes

    # partner replication with only two ranks at work (the others idle): the same traffic as the raw Send
    # between two ranks below. With every rank replicating at once they share this host's cores and memory
    # bandwidth, which repl_vs_ring compares against a raw ring of the same traffic.
    pair = comm.Split(0 if rank < 2 else MPI.UNDEFINED, rank)
    pair_times: list[float] = []
    if pair != MPI.COMM_NULL:
        ck2 = AsyncCheckpointer(str(run / "pair-bb" / "{domain}"), scheme="partner", comm=pair,
                                failure_domain=f"node{rank}", keep=1)
        for warm in range(2):
            ck2.save(state, warm).wait()
        for i in range(args.iters):
            pair.Barrier()
            pair_times.append(pair.allreduce(ck2.save(state, 2 + i).wait().replicate_s, op=MPI.MAX))
        ck2.close()
        pair.Free()
    comm.Barrier()
    if rank == 0:
        shutil.rmtree(run / "pair-bb", ignore_errors=True)
    figures["replicate_pair_s"] = comm.bcast(statistics.median(pair_times) if rank == 0 else None, root=0)

    # torch.save to the same directory
    tpath = run / f"torch-r{rank}.pt"
    figures["torch_save_s"] = timed(lambda: torch.save(state, tpath), iters=max(1, args.iters - 1))
    tpath.unlink()

    # DCP async_save blocking time (each rank its own keys), second call (the first sets up the stager)
    keyed = {f"r{rank}": state}
    futures = []

    def dcp_async(i: list[int] = [0]) -> None:  # noqa: B006 - a counter
        i[0] += 1
        futures.append(dcp.async_save(keyed, checkpoint_id=str(run / f"dcp-{i[0]}")))

    dcp_async()
    futures.pop().result()
    dcp_times = []
    for _ in range(max(1, args.iters - 1)):
        comm.Barrier()
        t = time.perf_counter()
        dcp_async()
        dcp_times.append(slowest(time.perf_counter() - t))
        futures.pop().result()
    figures["dcp_async_block_s"] = statistics.median(dcp_times)
    comm.Barrier()
    if rank == 0:
        for d in run.glob("dcp-*"):
            shutil.rmtree(d, ignore_errors=True)

    # The same async_save through the DCP adapter (burst buffer per rank's domain, partner copies, commit), each
    # round next to its own baseline (a bare copy into host memory kept across rounds), both in the same state:
    # the previous save written, replicated and committed on every rank. The harness waits in gloo barriers
    # on a group of its own: ranks that wait in MPI spin (yield_when_idle only yields), and on an
    # oversubscribed host the spinning ranks would take the cores from the ranks still being timed.
    hold = dist.new_group(backend="gloo")
    dst.update((k, torch.empty_like(v)) for k, v in state.items())
    root = str(run / "dcpbb" / "{domain}")
    times: dict[str, list[float]] = {"copy": [], "kept": [], "torch": []}  # each round, this rank
    cpu: dict[str, list[float]] = {"copy": [], "kept": [], "torch": []}  # this thread's CPU time

    collected: dict[str, list[float]] = {"copy": [], "kept": [], "torch": []}  # the full collection after each
    last: list[str] = []

    def timed_round(name: str, fn, **kwargs):  # noqa: ANN202 - returns what fn returns
        # as timeit: no garbage collection inside the timed part, where it would charge one round for the
        # garbage of others. A full collection before each round clears the previous round's garbage; its time
        # is reported beside the figure (dcp_adapter_gc_s): the save's own garbage, collected at once.
        if not last:  # the objects made so far (torch's own, hundreds of ms to traverse) are never collected
            gc.collect()
            gc.freeze()
        t = time.perf_counter()
        gc.collect()
        if last:
            collected[last.pop()].append(time.perf_counter() - t)
        last.append(name)
        dist.barrier(group=hold)
        gc.disable()
        try:
            t, c = time.perf_counter(), time.thread_time()
            out = fn(**kwargs)
            times[name].append(time.perf_counter() - t)
            cpu[name].append(time.thread_time() - c)
        finally:
            gc.enable()
        return out

    for i in range(max(30, args.iters) + 1):  # round 0 sets up the host copy, the kept thread and its group, dst
        timed_round("copy", copy)
        writer = DcpWriter(root, failure_domain=f"node{rank}")
        future = timed_round("kept", dcp_async_save, state_dict=keyed, storage_writer=writer,
                             checkpoint_id=f"k{i}")
        future.result()
        writer.wait_committed()
        writer = DcpWriter(root, failure_domain=f"node{rank}")
        future = timed_round("torch", dcp.async_save, state_dict=keyed, storage_writer=writer,
                             checkpoint_id=f"t{i}")
        future.result()
        writer.wait_committed()
    ranks_times = comm.allgather({k: v[1:] for k, v in times.items()})  # each round: the slowest rank's time
    ranks_cpu = comm.allgather({k: v[1:] for k, v in cpu.items()})  # every rank and round
    for name, key in (("copy", "dcp_copy"), ("kept", "dcp_adapter_block"), ("torch", "dcp_adapter_torch_block")):
        figures[f"{key}_s"] = statistics.median(map(max, *(r[name] for r in ranks_times)))
        figures[f"{key}_cpu_s"] = statistics.median(x for r in ranks_cpu for x in r[name])
    gc.unfreeze()
    ranks_gc = comm.allgather({k: v[1:] for k, v in collected.items()})
    for name, key in (("copy", "dcp_copy"), ("kept", "dcp_adapter")):
        figures[f"{key}_gc_s"] = statistics.median(map(max, *(r[name] for r in ranks_gc)))
    dst.clear()
    dist.destroy_process_group(hold)
    comm.Barrier()
    if rank == 0:
        shutil.rmtree(run / "dcpbb", ignore_errors=True)

    # raw sequential write + fsync of the same bytes, same directory
    raw = np.empty(shard_bytes, dtype=np.uint8)
    raw[:] = 1
    rpath = run / f"raw-r{rank}.bin"

    def raw_write() -> None:
        with open(rpath, "wb") as f:
            f.write(memoryview(raw))
            f.flush()
            os.fsync(f.fileno())

    figures["raw_write_s"] = timed(raw_write)
    rpath.unlink()

    # raw mpi4py Send between ranks 0 and 1 (64 MiB chunks, as the checkpointer), and a Sendrecv ring
    chunk = 64 << 20
    recv = np.empty_like(raw)

    def send_pair() -> None:
        for a in range(0, shard_bytes, chunk):
            if rank == 0:
                comm.Send([raw[a : a + chunk], MPI.BYTE], dest=1, tag=5)
            elif rank == 1:
                comm.Recv([recv[a : a + chunk], MPI.BYTE], source=0, tag=5)

    figures["send_pair_s"] = timed(send_pair)

    def sendrecv_pair() -> None:  # both ways at once between ranks 0 and 1: partner replication's traffic
        if rank < 2:
            for a in range(0, shard_bytes, chunk):
                comm.Sendrecv([raw[a : a + chunk], MPI.BYTE], dest=1 - rank, sendtag=7,
                              recvbuf=[recv[a : a + chunk], MPI.BYTE], source=1 - rank, recvtag=7)

    figures["sendrecv_pair_s"] = timed(sendrecv_pair)

    def ring() -> None:
        for a in range(0, shard_bytes, chunk):
            comm.Sendrecv([raw[a : a + chunk], MPI.BYTE], dest=(rank + 1) % size, sendtag=6,
                          recvbuf=[recv[a : a + chunk], MPI.BYTE], source=(rank - 1) % size, recvtag=6)

    figures["sendrecv_ring_s"] = timed(ring)
    raw = recv = np.empty(0, dtype=np.uint8)  # free them before the restores

    # restore: all local, then with node1's burst buffer wiped (again before each timed load: the
    # re-protection that follows a restore from replicas rebuilds it in the background, untimed)
    into = {k: torch.zeros_like(v) for k, v in state.items()}
    ck.load(into)  # warm-up
    figures["restore_local_s"] = timed(lambda: ck.load(into))
    ok = all(torch.equal(into[k], state[k]) for k in state)

    def wipe_node1() -> None:
        ck.wait()
        comm.Barrier()
        if rank == 0:
            shutil.rmtree(run / "bb" / "node1")
        comm.Barrier()

    lost = []
    for _ in range(args.iters):
        wipe_node1()
        t = time.perf_counter()
        ck.load(into)
        lost.append(slowest(time.perf_counter() - t))
    figures["restore_lost_s"] = statistics.median(lost)
    ck.wait()
    ok = comm.allreduce(int(ok and all(torch.equal(into[k], state[k]) for k in state)), op=MPI.MIN)
    ck.close()

    gb = nbytes / 1e9
    figures["write_gbs"] = gb / figures["write_s"]
    figures["raw_write_gbs"] = gb / figures["raw_write_s"]
    figures["replicate_gbs"] = gb / figures["replicate_s"]
    figures["replicate_pair_gbs"] = gb / figures["replicate_pair_s"]
    figures["send_pair_gbs"] = gb / figures["send_pair_s"]
    figures["sendrecv_pair_gbs"] = gb / figures["sendrecv_pair_s"]
    figures["sendrecv_ring_gbs"] = gb / figures["sendrecv_ring_s"]
    values = {
        "save_vs_copy": figures["save_block_s"] / figures["bare_copy_s"],
        "torch_save_vs_save": figures["torch_save_s"] / figures["save_block_s"],
        "torch_save_vs_copy": figures["torch_save_s"] / figures["bare_copy_s"],
        "save_vs_dcp_async": figures["save_block_s"] / figures["dcp_async_block_s"],
        "dcp_adapter_vs_copy": figures["dcp_adapter_block_s"] / figures["dcp_copy_s"],
        "dcp_adapter_vs_copy_cpu": figures["dcp_adapter_block_cpu_s"] / figures["dcp_copy_cpu_s"],
        "dcp_adapter_gc_vs_copy": figures["dcp_adapter_gc_s"] / figures["dcp_copy_s"],
        "dcp_torch_async_vs_copy": figures["dcp_adapter_torch_block_s"] / figures["dcp_copy_s"],
        "write_vs_raw": figures["write_gbs"] / figures["raw_write_gbs"],
        "repl_vs_send": figures["replicate_pair_gbs"] / figures["sendrecv_pair_gbs"],
        "repl_vs_oneway_send": figures["replicate_pair_gbs"] / figures["send_pair_gbs"],
        "repl_vs_ring": figures["replicate_gbs"] / figures["sendrecv_ring_gbs"],
        "restore_lost_vs_local": figures["restore_lost_s"] / figures["restore_local_s"],
    }
    ratios = {}
    for name, value in values.items():
        op, goal = GOALS[name]
        passed = None if goal is None else (value <= goal if op == "<=" else value >= goal)
        ratios[name] = {"value": round(value, 4), "op": op, "goal": goal, "ok": passed}
    if rank == 0:
        result = {
            "config": {"ranks": size, "size_mib": args.size_mib, "tensors": args.tensors, "iters": args.iters,
                       "scheme": args.scheme, "restored_state_identical": bool(ok)},
            "figures": {k: round(v, 6) for k, v in figures.items()},
            "ratios": ratios,
        }
        print("BENCH_JSON " + json.dumps(result), flush=True)
    dist.destroy_process_group()
    return 0


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    return worker(args) if args.worker else launch(args)


if __name__ == "__main__":
    sys.exit(main())
