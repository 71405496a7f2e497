"""examples/train_ckpt.py's deterministic training, restarted in-process by nvrx_hpc.inprocess.

Every round builds the model, optimizer and checkpointer afresh, restores the newest committed version
(node-local burst buffer, or the partner's copy) and trains on. Rank 0 ends with `final_hash=<xxh3>`
(and `<run dir>/final_hash.txt`): a run recovered in-process ends with the hash of one that ran through.

    nvrx-hpc run --inprocess --spare-ranks 1 -- python examples/train_inprocess.py --steps 40

Faults for tests and benchmarks: `--faults KIND@STEP:RANK,...` with KIND raise, sigkill or hang; the i-th
fault fires after the one before it, on that torch rank when that step starts, in the job's first step only
(`<run dir>/fault-<i>` marks it fired).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from nvrx_hpc import inprocess, worker
from nvrx_hpc.ckpt import AsyncCheckpointer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train_ckpt import Adam, batch, digest, set_mean_grads  # noqa: E402 - the sibling example's model pieces


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--ckpt-every", type=int, default=2)
    p.add_argument("--bb-dir", default=os.environ.get("NVRX_BB_DIR", "/dev/shm/nvrx-example/{domain}"))
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--step-time", type=float, default=0.0, help="sleep this long per step (pacing)")
    p.add_argument("--faults", default="", help="KIND@STEP:RANK,... (raise, sigkill, hang); the i-th in round i")
    p.add_argument("--out", type=Path, default=Path(os.environ["NVRX_RUN_DIR"]) if os.environ.get("NVRX_RUN_DIR")
                   else None)
    return p.parse_args(argv)


def parse_faults(text: str) -> list[tuple[str, int, int]]:
    faults = []
    for item in filter(None, (x.strip() for x in text.split(","))):
        kind, _, where = item.partition("@")
        step, _, rank = where.partition(":")
        if kind not in ("raise", "sigkill", "hang") or not step.isdigit() or not rank.isdigit():
            raise SystemExit(f"--faults: {item!r} is not KIND@STEP:RANK with KIND raise, sigkill or hang")
        faults.append((kind, int(step), int(rank)))
    return faults


def inject(faults: list[tuple[str, int, int]], ctx: inprocess.Context, step: int, marks: Path | None) -> None:
    """Fire the first fault not yet fired, once, in the job's first step (a marker file per fault)."""
    if marks is None or os.environ.get("NVRX_RESTART_COUNT", "0") != "0":
        return
    pending = [i for i in range(len(faults)) if not (marks / f"fault-{i}").exists()]
    if not pending:
        return
    kind, at, rank = faults[pending[0]]
    if step != at or ctx.rank != rank:
        return
    try:
        (marks / f"fault-{pending[0]}").open("x").close()
    except FileExistsError:
        return
    print(f"FAULT {kind} round={ctx.round} rank={rank} step={step} at={time.time():.6f}", flush=True)
    if kind == "raise":
        raise RuntimeError(f"injected exception at step {step} on rank {rank}")
    if kind == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(3600)  # hang: outside any collective, its peers wait for it in the all-reduce


def train(ctx: inprocess.Context, args: argparse.Namespace, faults: list) -> str:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, args.hidden), torch.nn.Tanh(), torch.nn.Linear(args.hidden, 1))
    params = list(model.parameters())
    opt = Adam(params)
    world = ctx.world_size
    # failure domain: the node the rank started on, so a spare that takes a rank also takes its checkpoint place
    ckpt = AsyncCheckpointer(args.bb_dir, scheme="partner" if world > 1 else "none", comm="torch",
                             failure_domain=ctx.domain)
    ctx.on_teardown(ckpt.abandon)  # a fault: release its threads without talking to the peers

    def state(step: int) -> dict:
        return {"model": model.state_dict(), "optim": opt.state, "step": step}

    into = state(0)
    start = ckpt.load(into) or 0
    if start:
        opt.state["step"] = into["optim"]["step"]
    if ctx.rank == 0:
        print(f"round {ctx.round}: resumed from step {start} (sources "
              f"{ckpt.last_restore.sources if ckpt.last_restore else {}})", flush=True)
    for step in range(start + 1, args.steps + 1):
        worker.heartbeat()
        inject(faults, ctx, step, args.out)
        with worker.section("step"):
            x, y = batch(step, ctx.rank)
            for p in params:
                p.grad = None
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
        flat = torch.cat([p.grad.reshape(-1) for p in params])
        with worker.section("allreduce"):
            dist.all_reduce(flat)
        set_mean_grads(params, flat, world)
        opt.step()
        worker.set_iteration(step)
        if args.step_time > 0:
            time.sleep(args.step_time)
        if step % args.ckpt_every == 0:
            ckpt.save(state(step), step)
    ckpt.wait()
    ckpt.close()
    return digest(params)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    faults = parse_faults(args.faults)
    torch.set_num_threads(1)  # one thread: the same float sums on every run
    worker.enabled()  # connect to the node agent before the slow start-up
    result = inprocess.run(train, args, faults)
    if result is not None and os.environ.get("RANK") == "0":
        print(f"FINAL step={args.steps} hash={result}\nfinal_hash={result}", flush=True)
        if args.out is not None:
            (args.out / "final_hash.txt").write_text(result + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
