"""Deterministic data-parallel training that checkpoints through nvrx_hpc.ckpt and resumes from the newest version.

Every `--ckpt-every` steps each rank calls `AsyncCheckpointer.save` (torch.distributed transport, gloo, partner
copies on the next node by default); at start every rank restores the newest version that verifies, from
its partner when a node's burst buffer is gone. Rank 0's last lines are `FINAL step=<n> hash=<xxh3>` and
`final_hash=<xxh3>` (also written to `<out>/final_hash.txt` with --out or $NVRX_RUN_DIR): a run that was
interrupted and resumed ends with the same hash as one that ran through.

    srun -N2 -n4 python examples/train_ckpt.py --steps 12 --bb-dir "$state/bb/{domain}/demo"
    nvrx-hpc submit --nodes 2 --spares 1 --tasks-per-node 2 -- python examples/train_ckpt.py --steps 40
    python -m torch.distributed.run --nproc-per-node 4 examples/train_ckpt.py --simulate-nodes 2

It reports to the node agent through nvrx_hpc.worker (heartbeats, sections, iterations) and stops cleanly,
with a checkpoint, when the launcher asks. Faults for tests come from NVRX_TEST_FAULT, as in examples/train.py
(crash, exit, hang, stuck, stuckin, noprogress, slow, raise; acted on when NVRX_RESTART_COUNT matches).
The optimizer (Adam) is written out here: torch.optim's
constructor imports torch._dynamo, seconds of start-up per rank.
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
import xxhash

from nvrx_hpc import worker
from nvrx_hpc.ckpt import AsyncCheckpointer
from nvrx_hpc.core.errors import CheckpointError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from train import inject, parse_faults  # noqa: E402 - the sibling example's fault injection


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=12, help="train until this step")
    p.add_argument("--ckpt-every", type=int, default=2, help="save every N steps")
    p.add_argument("--bb-dir", default=os.environ.get("NVRX_BB_DIR", "/dev/shm/nvrx-example/{domain}"),
                   help="burst buffer per node; {domain} is the node (default $NVRX_BB_DIR)")
    p.add_argument("--shared-dir", default=None, help="shared directory for drained versions")
    p.add_argument("--drain-every", type=int, default=0, help="drain every M-th committed version")
    p.add_argument("--scheme", default="partner", choices=["none", "partner", "xor"])
    p.add_argument("--set-size", type=int, default=2, help="XOR set size")
    p.add_argument("--simulate-nodes", type=int, default=0,
                   help="on one host: pretend the ranks sit on K nodes (failure domains node0..nodeK-1)")
    p.add_argument("--hidden", type=int, default=256, help="hidden width of the model")
    p.add_argument("--step-time", type=float, default=0.0, help="sleep this long per step (demo pacing)")
    p.add_argument("--compute-time", type=float, default=0.0,
                   help="seconds of simulated compute inside each step's 'step' section (straggler tests)")
    p.add_argument("--slow-rank", type=int, default=-1, help="this rank's compute takes --slow-factor times longer")
    p.add_argument("--slow-factor", type=float, default=1.3)
    p.add_argument("--slow-from", type=int, default=0, help="... from this step on")
    p.add_argument("--crash-at-step", type=int, default=0, help="SIGKILL --crash-rank after this step")
    p.add_argument("--crash-rank", type=int, default=1)
    p.add_argument("--out", type=Path, default=Path(os.environ["NVRX_RUN_DIR"]) if os.environ.get("NVRX_RUN_DIR")
                   else None, help="where rank 0 writes final_hash.txt (default $NVRX_RUN_DIR; none: no file)")
    return p.parse_args(argv)


def init_distributed() -> tuple[int, int]:
    """torch.distributed from the launcher's variables (RANK, WORLD_SIZE, ...), or from srun's."""
    env = os.environ
    if "RANK" not in env and "SLURM_PROCID" in env:
        env["RANK"], env["WORLD_SIZE"] = env["SLURM_PROCID"], env["SLURM_NTASKS"]
        env.setdefault("LOCAL_RANK", env.get("SLURM_LOCALID", "0"))
    env.setdefault("RANK", "0")
    env.setdefault("WORLD_SIZE", "1")
    env.setdefault("MASTER_ADDR", "127.0.0.1")
    env.setdefault("MASTER_PORT", str(29500 + int(env.get("SLURM_JOB_ID", "0")) % 2000))
    dist.init_process_group("gloo")
    return dist.get_rank(), dist.get_world_size()


class Adam:
    """Adam (no weight decay); its state (step, first and second moments) is checkpointed."""

    def __init__(self, params: list[torch.Tensor], lr: float = 1e-2, betas: tuple[float, float] = (0.9, 0.999)):
        self.params, self.lr, self.betas, self.eps = params, lr, betas, 1e-8
        self.state = {"step": 0, "m": [torch.zeros_like(p) for p in params], "v": [torch.zeros_like(p) for p in params]}

    @torch.no_grad()
    def step(self) -> None:
        self.state["step"] += 1
        t, (b1, b2) = self.state["step"], self.betas
        for p, m, v in zip(self.params, self.state["m"], self.state["v"], strict=True):
            m.mul_(b1).add_(p.grad, alpha=1 - b1)
            v.mul_(b2).addcmul_(p.grad, p.grad, value=1 - b2)
            p.addcdiv_(m / (1 - b1**t), (v / (1 - b2**t)).sqrt_().add_(self.eps), value=-self.lr)


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step * 1009 + rank)
    x = torch.randn(64, 32, generator=g)
    return x, (x[:, :4].sum(1, keepdim=True) - x[:, 4:8].prod(1, keepdim=True)).tanh()


def set_mean_grads(params: list[torch.Tensor], flat: torch.Tensor, world: int) -> None:
    """Each parameter's gradient from the all-reduced flat sum (extra trailing values are ignored)."""
    offset = 0
    for p in params:
        p.grad.copy_(flat[offset : offset + p.numel()].view_as(p) / world)
        offset += p.numel()


def digest(tensors: list[torch.Tensor]) -> str:
    h = xxhash.xxh3_64()
    for t in tensors:
        h.update(t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        faults = parse_faults(os.environ.get("NVRX_TEST_FAULT", ""))
    except ValueError as exc:
        print(f"NVRX_TEST_FAULT: {exc}", file=sys.stderr)
        return 2
    restart = int(os.environ.get("NVRX_RESTART_COUNT", "0") or 0)
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # flight recorder on, for hang dumps
    worker.enabled()  # connect to the node agent (if any) before the slow start-up
    torch.set_num_threads(1)  # one thread: the same float sums on every run
    rank, world = init_distributed()
    domain = f"node{rank * args.simulate_nodes // world}" if args.simulate_nodes else None
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, args.hidden), torch.nn.Tanh(), torch.nn.Linear(args.hidden, 1))
    params = list(model.parameters())
    opt = Adam(params)
    progress = {"seen": torch.zeros(2, dtype=torch.int64), "loss_ema": torch.zeros(1, dtype=torch.bfloat16)}

    def state(step: int) -> dict:
        return {"model": model.state_dict(), "optim": opt.state, "rank": progress, "step": step,
                "worker": worker.state_dict()}

    ckpt = AsyncCheckpointer(args.bb_dir, args.shared_dir, scheme=args.scheme, comm="torch", failure_domain=domain,
                             set_size=args.set_size, drain_every=args.drain_every)
    into = state(0)
    start = ckpt.load(into) or 0  # tensors are restored in place; plain values come back in `into`
    if start:
        opt.state["step"] = into["optim"]["step"]
        worker.load_state_dict(into.get("worker") or {})
    if rank == 0:
        how = ckpt.last_restore.sources if ckpt.last_restore else {}
        print(f"resumed from step {start} (sources {how})" if start else "no checkpoint: starting at step 0",
              flush=True)
    step = start
    for step in range(start + 1, args.steps + 1):
        worker.heartbeat()
        for kind in ("crash", "exit", "hang", "noprogress", "slow", "raise"):
            inject(faults, kind, rank, step, restart)
        with worker.section("step"):
            x, y = batch(step, rank)
            for p in params:
                p.grad = None
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            if args.compute_time > 0:  # a sleep, not a busy loop: 8 ranks on 2 cores would time each other
                slow = rank == args.slow_rank and step >= args.slow_from
                time.sleep(args.compute_time * (args.slow_factor if slow else 1.0))
        # one collective per step: the gradients plus this rank's stop flag, so all ranks stop together
        flat = torch.cat([p.grad.reshape(-1) for p in params] + [torch.tensor([float(worker.stop_requested())])])
        inject(faults, "stuck", rank, step, restart)
        with worker.section("allreduce"):
            inject(faults, "stuckin", rank, step, restart)
            dist.all_reduce(flat)
        set_mean_grads(params, flat, world)
        opt.step()
        progress["seen"] += torch.tensor([1, x.shape[0]])
        progress["loss_ema"] = (0.9 * progress["loss_ema"].float() + 0.1 * loss.detach()).to(torch.bfloat16)
        worker.set_iteration(step)
        if step == start + 1 and rank == 0:  # for benchmarks/recovery.py's baseline, which has no agent to ask
            print(f"first step {step} done at {time.time():.3f}", flush=True)
        if args.step_time > 0:
            time.sleep(args.step_time)
        stop = flat[-1].item() > 0
        if step % args.ckpt_every == 0 or stop:
            t = time.perf_counter()
            try:
                with worker.section("checkpoint"):
                    ckpt.save(state(step), step)
                if rank == 0:
                    blocked = 1e3 * (time.perf_counter() - t)
                    print(f"step {step}: loss {loss.item():.5f}, saved (blocked {blocked:.1f} ms)", flush=True)
            except CheckpointError as exc:  # an earlier save failed; that version is lost, training goes on
                print(f"rank {rank} step {step}: checkpoint failed, training goes on: {exc}", file=sys.stderr,
                      flush=True)
        if step == args.crash_at_step and rank == args.crash_rank:
            ckpt.wait()
            os.kill(os.getpid(), signal.SIGKILL)
        if stop:
            if rank == 0:
                print(f"stopping at step {step} as asked; checkpoint saved", flush=True)
            break
    try:
        ckpt.wait()
    except CheckpointError as exc:
        print(f"rank {rank}: last checkpoint failed: {exc}", file=sys.stderr, flush=True)
    worker.heartbeat()
    ckpt.close()
    mine = digest([*params, *opt.state["m"], *opt.state["v"]])
    theirs = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(theirs, torch.tensor([int(mine, 16) & (2**62 - 1)]))
    agree = len({int(t.item()) for t in theirs}) == 1
    if rank == 0:
        print(f"FINAL step={step} hash={mine}{'' if agree else ' (ranks disagree!)'}", flush=True)
        print(f"final_hash={mine}", flush=True)
        if args.out is not None:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "final_hash.txt").write_text(mine + "\n")
    dist.destroy_process_group()
    worker.heartbeat()
    return 0 if agree else 1


if __name__ == "__main__":
    sys.exit(main())
