"""A small deterministic PyTorch training for the tests, the demo and the benchmarks.

    python examples/train.py [--steps 40] [--ckpt-every 5] [--step-time 0.05] [--out DIR]

torch.distributed with gloo from the launcher's environment (MASTER_ADDR, MASTER_PORT, RANK,
WORLD_SIZE, LOCAL_RANK). A small MLP learns a fixed linear map from synthetic data; the batch of
step s on rank r comes from a generator seeded with (s, r), so the final model depends only on the
world size and the number of steps, never on which node ran which rank or how often it restarted.
Gradients are all-reduced by hand (SUM, then divided by the world size) and applied with plain SGD,
written out here: torch.optim's constructor imports torch._dynamo, seconds of start-up per rank.

Rank 0 saves `<out>/ckpt/step-<n>.pt` every --ckpt-every steps (tmp file, fsync, rename) while the
others wait at a barrier; every rank resumes from the newest checkpoint all of them can read. When
the launcher asks the ranks to stop (nvrx_hpc.worker.stop_requested()), they agree on it inside the
gradient all-reduce, checkpoint and exit 0. At the end rank 0 writes `<out>/final_hash.txt`, the
sha256 of the model's tensors (sorted by name, raw bytes), and prints `final_hash=<hex>`.

Fault injection for tests: NVRX_TEST_FAULT, a comma-separated list of
  crash:rank=R:step=S        SIGKILL itself at the start of step S
  exit:rank=R:step=S:code=C  exit with code C at the start of step S
  hang:rank=R:step=S         SIGSTOP itself at the start of step S
  stuck:rank=R:step=S        sleep forever right before step S's all-reduce (no heartbeats; the others
                             wait inside the collective)
  stuckin:rank=R:step=S      sleep forever inside the all-reduce section, before the call: every rank
                             is then inside a communication section, and only the flight recorder
                             (the others started collective S, this one did not) names it
  noprogress:step=S          every rank of every restart SIGKILLs itself at the start of step S
  raise:rank=R:step=S        raise a Python exception (ValueError) at the start of step S, on every
                             attempt: a bug in the training, which no restart can fix
  slow:step=S                every rank takes one more second per step from step S on (gives a test
                             that injects a fault from outside the time to do it before the end)
each acted on only when NVRX_RESTART_COUNT equals its `restart=K` (default 0); noprogress and raise
ignore it.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from nvrx_hpc import worker

IN, HIDDEN, OUT, BATCH, LR, SEED = 16, 32, 4, 8, 0.05, 1234
_CKPT = re.compile(r"^step-(\d+)\.pt$")
_FAULT_KINDS = {"crash", "exit", "hang", "stuck", "stuckin", "noprogress", "slow", "raise"}
_ALL_RANKS = {"noprogress", "slow"}  # kinds that need no rank=R


class SGD:
    """p -= lr * grad. Its state (lr, steps taken) goes into the checkpoint like an optimizer's."""

    def __init__(self, params: list[torch.Tensor], lr: float) -> None:
        self.params, self.lr, self.steps = params, lr, 0

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for p in self.params:
            p.add_(p.grad, alpha=-self.lr)
        self.steps += 1

    def state_dict(self) -> dict:
        return {"lr": self.lr, "steps": self.steps}

    def load_state_dict(self, state: dict) -> None:
        self.lr, self.steps = float(state["lr"]), int(state["steps"])


@dataclass(frozen=True)
class Fault:
    kind: str
    step: int
    rank: int | None = None
    code: int = 1
    restart: int = 0

    def applies(self, kind: str, rank: int, step: int, restart: int) -> bool:
        if self.kind != kind or (self.step > step if kind == "slow" else self.step != step):
            return False
        if kind == "noprogress":
            return True
        if kind == "raise":  # a bug: every attempt meets it
            return self.rank == rank
        return (kind == "slow" or self.rank == rank) and self.restart == restart


def parse_faults(text: str) -> list[Fault]:
    """`kind:key=value:...[,kind:...]`; raises ValueError naming the bad part."""
    faults = []
    for spec in filter(None, (s.strip() for s in text.split(","))):
        kind, *pairs = spec.split(":")
        if kind not in _FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r} in {spec!r}; known: {', '.join(sorted(_FAULT_KINDS))}")
        fields: dict[str, int] = {}
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or key not in ("rank", "step", "code", "restart") or not value.lstrip("-").isdigit():
                raise ValueError(f"bad field {pair!r} in {spec!r}; expected rank=R, step=S, code=C or restart=K")
            fields[key] = int(value)
        if "step" not in fields or (kind not in _ALL_RANKS and "rank" not in fields):
            raise ValueError(f"fault {spec!r} needs step=S" + ("" if kind in _ALL_RANKS else " and rank=R"))
        faults.append(Fault(kind=kind, **fields))
    return faults


def build_model() -> torch.nn.Module:
    torch.manual_seed(SEED)
    return torch.nn.Sequential(torch.nn.Linear(IN, HIDDEN), torch.nn.Tanh(), torch.nn.Linear(HIDDEN, OUT))


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The data of `step` on `rank`: a pure function of both, so placement and restarts do not matter."""
    target = torch.Generator().manual_seed(SEED)
    weight = torch.randn(IN, OUT, generator=target)
    gen = torch.Generator().manual_seed(SEED + 1_000_003 * step + rank)
    x = torch.randn(BATCH, IN, generator=gen)
    return x, x @ weight + 0.01 * torch.randn(BATCH, OUT, generator=gen)


def model_hash(model: torch.nn.Module) -> str:
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


def _atomic_save(obj: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself survives a crash
    finally:
        os.close(fd)


def save_checkpoint(out: Path, step: int, model, optimizer, rank: int) -> None:
    with worker.section("checkpoint"):
        if rank == 0:
            state = {"step": step, "model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "worker": worker.state_dict()}
            _atomic_save(state, out / "ckpt" / f"step-{step}.pt")
        with worker.section("allreduce"):
            dist.barrier()


def _newest_readable(ckpt_dir: Path) -> tuple[int, dict | None]:
    found = sorted(((int(m.group(1)), p) for p in ckpt_dir.glob("step-*.pt") if (m := _CKPT.match(p.name))),
                   reverse=True)
    for step, path in found:
        try:
            return step, torch.load(path, weights_only=True)
        except Exception as exc:  # a damaged file: fall back to the one before
            print(f"nvrx-train: cannot read {path}: {exc}; trying an older checkpoint", file=sys.stderr, flush=True)
    return 0, None


def resume(out: Path, model, optimizer) -> int:
    """The step every rank resumes after: the newest checkpoint that all ranks could read (0: none)."""
    step, state = _newest_readable(out / "ckpt")
    agreed = torch.tensor([step], dtype=torch.int64)
    dist.all_reduce(agreed, op=dist.ReduceOp.MIN)
    if int(agreed) != step:
        step = int(agreed)
        state = torch.load(out / "ckpt" / f"step-{step}.pt", weights_only=True) if step else None
    if state is None:
        return 0
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    worker.load_state_dict(state.get("worker") or {})
    return int(state["step"])


def inject(faults: list[Fault], kind: str, rank: int, step: int, restart: int) -> None:
    for fault in faults:
        if not fault.applies(kind, rank, step, restart):
            continue
        if kind != "slow" or fault.step == step:
            print(f"nvrx-train rank={rank} injecting {kind} at step {step}", flush=True)
        if kind in ("crash", "noprogress"):
            os.kill(os.getpid(), signal.SIGKILL)
        elif kind == "exit":
            os._exit(fault.code)
        elif kind == "hang":
            os.kill(os.getpid(), signal.SIGSTOP)
        elif kind in ("stuck", "stuckin"):
            while True:
                time.sleep(3600)
        elif kind == "slow":
            time.sleep(1.0)
        elif kind == "raise":
            raise ValueError(f"batch {step} on rank {rank} has a label outside the model's range (injected bug)")


def train(args: argparse.Namespace, faults: list[Fault]) -> int:
    worker.enabled()  # connects to the node agent now, so that a rank stuck in start-up is seen
    torch.set_num_threads(1)  # one thread: the same float sums on every run
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")  # flight recorder on, for hang dumps
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    args.out.mkdir(parents=True, exist_ok=True)
    restart = int(os.environ.get("NVRX_RESTART_COUNT", "0") or 0)
    model = build_model()
    params = list(model.parameters())
    optimizer = SGD(params, lr=LR)
    start = resume(args.out, model, optimizer)
    if start:
        print(f"nvrx-train rank={rank} resumed from step {start}", flush=True)
    for step in range(start + 1, args.steps + 1):
        worker.heartbeat()
        for kind in ("crash", "exit", "hang", "noprogress", "slow", "raise"):
            inject(faults, kind, rank, step, restart)
        with worker.section("step"):
            x, y = batch(step, rank)
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
        inject(faults, "stuck", rank, step, restart)
        # one collective per step: the gradients plus this rank's stop flag, so all ranks stop together
        flat = torch.cat([p.grad.reshape(-1) for p in params] + [torch.tensor([float(worker.stop_requested())])])
        with worker.section("allreduce"):
            dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset : offset + p.numel()].view_as(p) / world)
            offset += p.numel()
        optimizer.step()
        if args.step_time > 0:
            time.sleep(args.step_time)
        worker.set_iteration(step)
        print(f"nvrx-train rank={rank} step={step}", flush=True)
        stop = flat[-1].item() > 0
        if step % args.ckpt_every == 0 or stop:
            save_checkpoint(args.out, step, model, optimizer, rank)
        if stop:
            print(f"nvrx-train rank={rank} stopping at step {step} as asked; checkpoint saved", flush=True)
            dist.destroy_process_group()
            return 0
    worker.heartbeat()  # the wind-down (hash, barrier, interpreter exit) takes a while on a busy node
    if rank == 0:
        digest = model_hash(model)
        (args.out / "final_hash.txt").write_text(digest + "\n")
        print(f"final_hash={digest}", flush=True)
    with worker.section("allreduce"):
        dist.barrier()
    dist.destroy_process_group()
    worker.heartbeat()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40, help="steps to train (default 40)")
    parser.add_argument("--ckpt-every", type=int, default=5, help="checkpoint every K steps (default 5)")
    parser.add_argument("--step-time", type=float, default=0.05, help="seconds to sleep per step (default 0.05)")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default $NVRX_RUN_DIR)")
    args = parser.parse_args(argv)
    args.out = args.out or (Path(os.environ["NVRX_RUN_DIR"]) if os.environ.get("NVRX_RUN_DIR") else None)
    if args.out is None:
        parser.error("no output directory: pass --out DIR or set NVRX_RUN_DIR")
    if args.steps < 0 or args.ckpt_every < 1 or args.step_time < 0:
        parser.error("--steps must be >= 0, --ckpt-every >= 1 and --step-time >= 0")
    missing = [v for v in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE") if not os.environ.get(v)]
    if missing:
        parser.error(f"{', '.join(missing)} not set: start it with `nvrx-hpc run` (or torchrun)")
    try:
        faults = parse_faults(os.environ.get("NVRX_TEST_FAULT", ""))
    except ValueError as exc:
        parser.error(f"NVRX_TEST_FAULT: {exc}")
    return train(args, faults)


if __name__ == "__main__":
    sys.exit(main())
