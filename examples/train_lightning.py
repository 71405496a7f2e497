"""A tiny deterministic PyTorch Lightning DDP training (CPU, gloo) kept alive by nvrx-hpc.

NvrxCallback sends heartbeats, sections and the iteration, and stops with a checkpoint when the launcher asks;
NvrxCheckpointIO saves every `--ckpt-every` steps through nvrx_hpc.ckpt (async, burst buffer, partner copies on
the next node) and `latest_ckpt_path` resumes from the newest committed version at start.

    nvrx-hpc submit --nodes 2 --tasks-per-node 2 -- python examples/train_lightning.py --steps 40 --out runs/lt
    sbatch -N2 --ntasks-per-node=2 --wrap "exec nvrx-hpc run -- python examples/train_lightning.py --out runs/lt"

Each rank appends `step <n> loss <float.hex()>` to `<out>/loss-rank<R>.txt` for every step it trains (a resumed
run repeats the steps after its checkpoint: the values must repeat bit for bit). The batch of step n on rank r is
a pure function of (n, r), as a resumable data pipeline's would be, so a resumed run sees the same data. DDP runs
with find_unused_parameters=True: DDP then keeps its first gradient-bucket layout instead of rebuilding it after
the first iteration, so a resumed run's first step sums the gradients in the same order as the uninterrupted run's
(with the rebuild, the first step after a resume differs in the last bits).

Fault for tests: NVRX_FAULT_KILL_STEP=7 NVRX_FAULT_RANK=1 SIGKILLs rank 1 once, after step 7 (once its last
checkpoint has committed, so the restart resumes from it); the marker file `<out>/fault-fired` (or
$NVRX_FAULT_MARKER) keeps the restarted run from doing it again.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path

import torch

from nvrx_hpc import worker


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20, help="train until this many optimizer steps")
    p.add_argument("--ckpt-every", type=int, default=4, help="checkpoint every N steps")
    p.add_argument("--bb-dir", default=os.environ.get("NVRX_BB_DIR", "/dev/shm/nvrx-lightning/{domain}"),
                   help="burst buffer per node; {domain} is the node (default $NVRX_BB_DIR)")
    p.add_argument("--scheme", default=None, choices=["none", "partner", "xor"],
                   help="redundancy (default: partner with more than one node, else none)")
    p.add_argument("--hidden", type=int, default=16, help="hidden width of the model")
    p.add_argument("--out", type=Path, default=Path(os.environ.get("NVRX_RUN_DIR", "lightning-out")),
                   help="where the per-rank loss files go (default $NVRX_RUN_DIR)")
    return p.parse_args(argv)


def batch(step: int, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(step * 1009 + rank)
    x = torch.randn(32, 8, generator=g)
    return x, (x[:, :2].sum(1, keepdim=True) - x[:, 2:4].prod(1, keepdim=True)).tanh()


class Ticks(torch.utils.data.IterableDataset):
    """An endless stream of ticks: the model makes its batch from the step, so the loader only paces the loop."""

    def __iter__(self):
        while True:
            yield torch.zeros(1)


def make_module(hidden: int, log_path: Path | None, fault: tuple[int, int] | None = None, marker: Path | None = None):
    import pytorch_lightning as pl

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.save_hyperparameters({"hidden": hidden, "lr": 1e-2})
            torch.manual_seed(0)
            self.net = torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, 1))

        def training_step(self, _tick, _batch_idx):
            step = self.trainer.global_step  # optimizer steps done so far: the same on a resumed run
            x, y = batch(step, self.global_rank)
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            if log_path is not None:
                with open(log_path, "a") as f:
                    f.write(f"step {step} loss {loss.item().hex()}\n")
            return loss

        def on_train_batch_end(self, outputs, _tick, _batch_idx):
            if fault is not None and self.trainer.global_step == fault[0] and self.global_rank == fault[1]:
                if marker is not None and not marker.exists():
                    self.trainer.strategy.checkpoint_io.wait()  # the last save commits first: the restart resumes
                    marker.write_text(f"killed rank {fault[1]} after step {fault[0]}\n")
                    os.kill(os.getpid(), signal.SIGKILL)

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=self.hparams.lr)

    return Tiny()


def _fault(out: Path) -> tuple[tuple[int, int] | None, Path]:
    marker = Path(os.environ.get("NVRX_FAULT_MARKER", out / "fault-fired"))
    if not os.environ.get("NVRX_FAULT_KILL_STEP"):
        return None, marker
    return (int(os.environ["NVRX_FAULT_KILL_STEP"]), int(os.environ.get("NVRX_FAULT_RANK", "0"))), marker


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    worker.enabled()  # connect to the node agent (if any) before the slow imports
    os.environ.setdefault("TORCH_FR_BUFFER_SIZE", "2000")
    torch.set_num_threads(1)  # one thread: the same float sums on every run
    import pytorch_lightning as pl

    from nvrx_hpc.integrations.lightning import NvrxCallback, NvrxCheckpointIO, NvrxEnvironment, latest_ckpt_path

    env = NvrxEnvironment()
    world = env.world_size() if env.detect() else 1
    nodes = max(1, world // int(os.environ.get("LOCAL_WORLD_SIZE", world)))
    rank = env.global_rank() if env.detect() else 0
    args.out.mkdir(parents=True, exist_ok=True)
    scheme = args.scheme or ("partner" if nodes > 1 else "none")
    io = NvrxCheckpointIO(args.bb_dir, scheme=scheme)
    fault, marker = _fault(args.out)
    callback = NvrxCallback(every_n_train_steps=args.ckpt_every)
    strategy = "ddp_find_unused_parameters_true" if world > 1 else "auto"  # see the docstring: bucket layout
    trainer = pl.Trainer(
        accelerator="cpu", devices=world // nodes, num_nodes=nodes, strategy=strategy,
        plugins=[io, env] if env.detect() else [io], callbacks=[callback],
        max_steps=args.steps, logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, deterministic=True,
    )  # fmt: skip
    model = make_module(args.hidden, args.out / f"loss-rank{rank}.txt", fault, marker)
    ckpt_path = latest_ckpt_path(trainer)
    if rank == 0:
        print(f"resuming from {ckpt_path}" if ckpt_path else "no checkpoint: starting at step 0", flush=True)
    trainer.fit(model, train_dataloaders=torch.utils.data.DataLoader(Ticks(), batch_size=None), ckpt_path=ckpt_path)
    if rank == 0:
        stopped = "" if callback.stopped_at is None else " (stopped as asked; checkpoint saved)"
        print(f"FINAL step={trainer.global_step}{stopped}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
