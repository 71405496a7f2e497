"""A checkpointing job for the ckpt tests, run on real MPI ranks (mpirun or srun --mpi=pmix).

    python ckpt_job.py SPEC.json

SPEC holds "scenarios", run one after another. For each, rank 0 first deletes its "pre_wipe" dirs (a node
lost between two runs); then every rank builds an AsyncCheckpointer (bb dir template, scheme, per-rank
failure domains or the node's) and runs the "ops": save (a deterministic state per rank and step), load
(restore into a fresh state), latest. Each rank writes what happened, with a state hash, to SPEC's "out"
(with {rank}) after every op. A "kill" in a save op SIGKILLs that rank halfway through writing its shard.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import time
import traceback
from pathlib import Path

import torch
import xxhash
from mpi4py import MPI

from nvrx_hpc.ckpt import AsyncCheckpointer
from nvrx_hpc.core.errors import CheckpointError


def make_state(rank: int, step: int, size_kib: int) -> dict:
    """A state with every kind of leaf, different per rank and step."""
    g = torch.Generator().manual_seed(rank * 100_003 + step)
    n = max(1, size_kib * 1024 // 4 - 64)
    return {
        "model": {"w": torch.randn(n, generator=g), "b": torch.randn(17, generator=g).to(torch.bfloat16)},
        "opt": {"state": {0: {"step": torch.tensor(float(step)), "m": torch.randn(3, 5, generator=g).half()}},
                "param_groups": [{"lr": 0.1 * (rank + 1), "betas": (0.9, 0.999), "params": [0]}]},
        "mask": torch.rand(33, generator=g) > 0.5,
        "ids": torch.arange(rank, rank + 9, dtype=torch.int64),
        "empty": torch.empty(0, 4),
        "step": step, "rank": rank, "name": f"r{rank}", "blob": bytes([rank, step % 256]), "none": None,
    }


def state_hash(node) -> str:
    h = xxhash.xxh3_64()

    def walk(x):
        if isinstance(x, torch.Tensor):
            h.update(f"T{x.dtype}{list(x.shape)}".encode())
            h.update(x.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if x.numel() else b"")
        elif isinstance(x, dict):
            for k, v in x.items():
                h.update(f"K{k!r}".encode())
                walk(v)
        elif isinstance(x, (list, tuple)):
            h.update(f"L{type(x).__name__}{len(x)}".encode())
            for v in x:
                walk(v)
        else:
            h.update(f"V{x!r}".encode())

    walk(node)
    return h.hexdigest()


def run_scenario(sc: dict, rank: int, results: list, out: Path) -> None:
    if rank == 0:
        for path in sc.get("pre_wipe", []):  # a node lost between two runs
            shutil.rmtree(path)
    MPI.COMM_WORLD.Barrier()
    domains = sc.get("domains")
    current = {"step": None}
    kill = {}

    def progress(phase: str, done: int, total: int) -> None:
        k = kill.get(current["step"])
        if k and phase == "write" and done >= k * total:
            os.kill(os.getpid(), signal.SIGKILL)

    opts = {k: sc[k] for k in ("set_size", "keep", "drain_every", "chunk_mib") if k in sc}
    ck = AsyncCheckpointer(sc["bb"], sc.get("shared"), scheme=sc["scheme"], comm=MPI.COMM_WORLD,
                           failure_domain=domains[rank] if domains else None, progress=progress, **opts)
    try:
        for op in sc["ops"]:
            rec = {"scenario": sc["name"], "op": op["op"], "rank": rank, "domain": ck.settings.failure_domain}
            try:
                if op["op"] == "save":
                    for step in op["steps"]:
                        if step == op.get("kill", {}).get("step"):
                            results.append(dict(rec))
                            out.write_text(json.dumps(results, indent=1))
                            results.pop()
                        size = op.get("size_kib", 64)
                        state = make_state(rank, step, size)
                        if op.get("kill", {}).get("rank") == rank and op["kill"]["step"] == step:
                            kill[step] = op["kill"].get("at", 0.5)
                        current["step"] = step
                        rec.setdefault("saved", {})[str(step)] = state_hash(state)
                        try:
                            ck.save(state, step).wait()
                        except CheckpointError as exc:
                            rec.setdefault("errors", {})[str(step)] = str(exc)
                elif op["op"] == "load":
                    into = make_state(rank, 0, op.get("size_kib", 64))
                    t = time.perf_counter()
                    rec["step"] = ck.load(into)
                    rec["seconds"] = time.perf_counter() - t
                    rec["hash"] = state_hash(into)
                    st = ck.last_restore
                    rec["restore"] = None if st is None else {"sources": st.sources, "rejected": st.rejected,
                                                              "bad_files": st.bad_files, "reprotect": st.reprotect}
                    ck.wait()
                elif op["op"] == "latest":
                    rec["step"] = ck.latest()
            except CheckpointError as exc:
                rec["error"] = str(exc)
            results.append(rec)
            out.write_text(json.dumps(results, indent=1))  # after every op: a killed rank keeps what it did
    finally:
        ck.close()


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    rank = MPI.COMM_WORLD.Get_rank()
    torch.set_num_threads(1)
    results: list = []
    out = Path(spec["out"].format(rank=rank))
    try:
        for sc in spec["scenarios"]:
            run_scenario(sc, rank, results, out)
    except Exception:
        results.append({"crash": traceback.format_exc()})
        out.write_text(json.dumps(results, indent=1))
        MPI.COMM_WORLD.Abort(3)
    out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
