"""PyTorch Lightning under `nvrx-hpc run`: heartbeats and sections, a graceful stop, async checkpoints, resume.

    from nvrx_hpc.integrations.lightning import NvrxCallback, NvrxCheckpointIO, NvrxEnvironment, latest_ckpt_path

    io = NvrxCheckpointIO("/dev/shm/nvrx/{domain}", scheme="partner")
    trainer = Trainer(strategy="ddp", num_nodes=4, devices=8, max_steps=10_000, plugins=[io, NvrxEnvironment()],
                      callbacks=[NvrxCallback(every_n_train_steps=500)])
    trainer.fit(model, datamodule=dm, ckpt_path=latest_ckpt_path(trainer))  # None on the first start

Works with `lightning.pytorch` or `pytorch_lightning`: the one the training imported first (else `lightning.pytorch`
when installed). Checkpoints go through `nvrx_hpc.ckpt.AsyncCheckpointer` (every rank saves its own state; the
version commits in the background) and hold no pickle: `nvrx_hpc.integrations.codec` stores Lightning's
non-tensor values as plain data. See docs/lightning.md.
"""

from __future__ import annotations

import importlib
import logging
import os
import re
import sys
from typing import Any

from nvrx_hpc import worker
from nvrx_hpc.core.errors import CheckpointError
from nvrx_hpc.integrations.codec import decode, encode

__all__ = ["NvrxCallback", "NvrxCheckpointIO", "NvrxEnvironment", "latest_ckpt_path", "LIGHTNING"]

log = logging.getLogger(__name__)


def _lightning_package() -> str:
    """The Lightning package the training uses: the one already imported, else the first one installed."""
    names = ("lightning.pytorch", "pytorch_lightning")
    for name in names:
        if name in sys.modules:
            return name
    for name in names:
        try:
            importlib.import_module(name)
            return name
        except ImportError:
            continue
    raise ImportError("nvrx_hpc.integrations.lightning needs PyTorch Lightning: pip install 'nvrx-hpc[lightning]'")


LIGHTNING = _lightning_package()
_pl = importlib.import_module(LIGHTNING)
_envs = importlib.import_module(f"{LIGHTNING}.plugins.environments")
Callback = _pl.Callback
CheckpointIO = importlib.import_module(f"{LIGHTNING}.plugins").CheckpointIO
ClusterEnvironment, SLURMEnvironment = _envs.ClusterEnvironment, _envs.SLURMEnvironment
Strategy = importlib.import_module(f"{LIGHTNING}.strategies").Strategy

# Hyperparameters are stored for `load_from_checkpoint`, never read by a resume: objects with no safe form
# are kept there as their repr rather than refused.
_LOSSY = tuple(
    getattr(cls, attr)
    for cls in (_pl.LightningModule, _pl.LightningDataModule)
    for attr in ("CHECKPOINT_HYPER_PARAMS_KEY", "CHECKPOINT_HYPER_PARAMS_TYPE")
)
_PATH = re.compile(r"nvrx:(latest|step-(\d+))")

# Section names (docs/worker.md): "allreduce" is a communication section, so a rank waiting there is a victim.
STEP, BACKWARD, OPTIMIZER, STOP_SYNC, CHECKPOINT = "step", "backward", "optimizer", "allreduce", "checkpoint"


def _world_size() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


class NvrxCheckpointIO(CheckpointIO):
    """A Lightning CheckpointIO that saves through `AsyncCheckpointer` and restores its newest committed version.

    Paths are names, not files: `nvrx:step-<N>` (what `path_for` and `latest_ckpt_path` return) and
    `nvrx:latest`. A load restores the newest version that verifies, whatever the name says; paths Lightning
    picks for a save (ModelCheckpoint's files) are ignored and `remove_checkpoint` does nothing: the
    checkpointer keeps `keep` versions in the burst buffer (and drains to `shared_dir`).

    Saving and loading are collective (every rank, same step). Lightning's strategies call `save_checkpoint`
    on rank 0 only; `NvrxCallback` makes a DDP or single-device strategy call it on every rank, and a save on
    more than one rank without it raises instead of hanging.

    Args:
        bb_dir, shared_dir, scheme, comm, **options: as `AsyncCheckpointer` (created on first use, once
            torch.distributed is up; `comm=None` picks torch.distributed).
    """

    LATEST = "nvrx:latest"

    def __init__(self, bb_dir: str | os.PathLike[str] | None = None, shared_dir: str | os.PathLike[str] | None = None,
                 *, scheme: str | None = None, comm: Any = None, **options: Any) -> None:
        super().__init__()
        self._args = (bb_dir, shared_dir)
        self._options = {"scheme": scheme, "comm": comm, **options}
        self._ckpt: Any = None
        self._collective = False  # set by NvrxCallback once every rank calls save_checkpoint
        self._last_step: int | None = None
        self._aborted = False
        self.last_handle: Any = None  # the SaveHandle of the newest save

    @staticmethod
    def path_for(step: int) -> str:
        return f"nvrx:step-{int(step)}"

    @property
    def checkpointer(self) -> Any:
        """The AsyncCheckpointer, created on first use (collective: every rank at the same point)."""
        if self._ckpt is None:
            from nvrx_hpc.ckpt import AsyncCheckpointer

            self._ckpt = AsyncCheckpointer(*self._args, **self._options)
            self._aborted = False
        return self._ckpt

    def latest(self) -> int | None:
        """The step of the newest version this job could restore, or None (collective; reads no tensor data)."""
        return self.checkpointer.latest()

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        """Snapshot `checkpoint` (global_step names the version) into host memory; it commits in the background."""
        if not self._collective and _world_size() > 1:
            raise RuntimeError("NvrxCheckpointIO saves on every rank together: add NvrxCallback() to the Trainer's "
                               "callbacks (it makes the strategy call save_checkpoint on every rank)")
        step = int(checkpoint.get("global_step", 0))
        if step == self._last_step:
            log.info("[nvrx] step %d is already checkpointed; %s not saved again", step, path)
            return
        tree = encode(checkpoint, lossy=_LOSSY)
        self.last_handle = self.checkpointer.save(tree, step)
        self._last_step = step

    def load_checkpoint(self, path: Any, map_location: Any = None, weights_only: bool | None = None) -> dict[str, Any]:
        """Restore the newest committed version that verifies (collective); tensors come back on the CPU.

        Raises:
            ValueError: `path` is not an `nvrx:` name (files are not read: they would need pickle).
            CheckpointError: there is no version to restore, or none verifies.
        """
        match = _PATH.fullmatch(str(path))
        if match is None:
            raise ValueError(f"NvrxCheckpointIO loads nvrx:latest or nvrx:step-<N>, not {str(path)!r}")
        into: dict[str, Any] = {}
        step = self.checkpointer.load(into)
        if step is None:
            raise CheckpointError(f"no checkpoint to resume from ({path})",
                                  hint="use latest_ckpt_path(trainer), which returns None when there is none")
        if match.group(2) is not None and int(match.group(2)) != step:
            log.warning("[nvrx] %s asked, step %d restored (the newest version that verifies)", path, step)
        self._last_step = step
        return decode(into)

    def remove_checkpoint(self, path: Any) -> None:
        """Nothing: the checkpointer keeps its newest `keep` versions."""

    def wait(self) -> None:
        """Block until the newest save has committed (raises its CheckpointError)."""
        if self._ckpt is not None:
            self._ckpt.wait()

    def abort(self) -> None:
        """After a failure in the training: teardown will not wait for peers (they may be gone)."""
        self._aborted = True

    def teardown(self) -> None:
        """Finish the save in flight and close (collective), unless the training failed (`abort`)."""
        ckpt, self._ckpt = self._ckpt, None
        if ckpt is None:
            return
        if self._aborted:
            log.warning("[nvrx] training failed: the checkpointer is left without waiting for the other ranks")
            return
        ckpt.close()


class NvrxEnvironment(ClusterEnvironment):
    """The ranks `nvrx-hpc run` started (also srun + torchrun-style variables): RANK, WORLD_SIZE, LOCAL_RANK,
    NODE_RANK, MASTER_ADDR, MASTER_PORT. Pass it instead of Lightning's SLURMEnvironment, whose auto-requeue
    takes over SIGUSR1 (the worker API's stack-dump signal) and requeues the job itself."""

    @property
    def creates_processes_externally(self) -> bool:
        return True

    @property
    def main_address(self) -> str:
        return os.environ.get("MASTER_ADDR", "127.0.0.1")

    @property
    def main_port(self) -> int:
        return int(os.environ.get("MASTER_PORT", "29500"))

    @staticmethod
    def detect() -> bool:
        return all(name in os.environ for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"))

    def world_size(self) -> int:
        return int(os.environ.get("WORLD_SIZE", "1"))

    def set_world_size(self, size: int) -> None:
        if size != self.world_size():
            log.debug("[nvrx] Lightning computed world size %d; the launcher's is %d", size, self.world_size())

    def global_rank(self) -> int:
        return int(os.environ.get("RANK", "0"))

    def set_global_rank(self, rank: int) -> None:
        if rank != self.global_rank():
            log.debug("[nvrx] Lightning computed rank %d; the launcher's is %d", rank, self.global_rank())

    def local_rank(self) -> int:
        return int(os.environ.get("LOCAL_RANK", "0"))

    def node_rank(self) -> int:
        return int(os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK", "0")))

    def validate_settings(self, num_devices: int, num_nodes: int) -> None:
        if num_devices * num_nodes != self.world_size():
            raise ValueError(f"Trainer(num_nodes={num_nodes}, devices={num_devices}) makes {num_devices * num_nodes} "
                             f"ranks, but {self.world_size()} were started (WORLD_SIZE)")


class NvrxCallback(Callback):
    """Reports each training step to the node agent and stops (with a checkpoint) when the launcher asks.

    Every training batch: `heartbeat()`, the sections "step" (the batch), "backward", "optimizer" (the update),
    `set_iteration(global_step)`. Then, on every rank together: whether any rank was asked to stop (one small
    all-reduce in the section "allreduce", every `stop_check_every` batches), and, with an NvrxCheckpointIO,
    a checkpoint every `every_n_train_steps` optimizer steps and when stopping; a stop ends `fit` after the
    batch (`trainer.should_stop`). A save that raises CheckpointError (the previous version failed in the
    background, on every rank alike) is logged and training goes on. The worker API's calibrated timeouts
    travel in the checkpoint.
    """

    def __init__(self, every_n_train_steps: int = 0, *, save_on_stop: bool = True, stop_check_every: int = 1) -> None:
        if every_n_train_steps < 0 or stop_check_every < 1:
            raise ValueError("every_n_train_steps must be >= 0 and stop_check_every >= 1")
        self.every_n_train_steps = every_n_train_steps
        self.save_on_stop = save_on_stop
        self.stop_check_every = stop_check_every
        self.stopped_at: int | None = None  # the global step at which a requested stop ended training
        self._open: list[str] = []
        self._saved_at: int | None = None

    # --- set-up ------------------------------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        worker.enabled()
        env = getattr(trainer.strategy, "cluster_environment", None)
        if isinstance(env, SLURMEnvironment) and env.auto_requeue and worker.enabled():
            log.warning("[nvrx] Lightning's SLURMEnvironment(auto_requeue=True) handles SIGUSR1 by requeueing the "
                        "job; under nvrx-hpc run pass plugins=[NvrxEnvironment()] (the launcher requeues)")
        io = _nvrx_io(trainer)
        if io is not None:
            _save_on_every_rank(trainer.strategy, io)

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        worker.heartbeat()
        worker.set_iteration(trainer.global_step)

    def state_dict(self) -> dict[str, Any]:
        return {"worker": worker.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        if state_dict.get("worker"):
            worker.load_state_dict(state_dict["worker"])

    # --- sections ----------------------------------------------------------------------------------------
    def _start(self, name: str) -> None:
        worker.start_section(name)
        self._open.append(name)

    def _end(self, name: str) -> None:
        if name in self._open:
            self._open.remove(name)
            worker.end_section(name)

    def _end_all(self) -> None:
        while self._open:
            worker.end_section(self._open.pop())

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        worker.heartbeat()
        self._end_all()  # a batch Lightning skipped leaves nothing open
        self._start(STEP)

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        self._start(BACKWARD)

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        self._end(BACKWARD)

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._start(OPTIMIZER)

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        self._end_all()
        io = _nvrx_io(trainer)
        if io is not None:
            io.abort()

    # --- the end of a batch: progress, stop, checkpoint --------------------------------------------------
    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self._end_all()
        step = trainer.global_step
        worker.set_iteration(step)
        worker.heartbeat()
        stop = self._stop_agreed(trainer, batch_idx)
        io = _nvrx_io(trainer)
        periodic = self.every_n_train_steps > 0 and step > 0 and step % self.every_n_train_steps == 0
        if io is not None and (periodic or (stop and self.save_on_stop)) and step != self._saved_at:
            self._saved_at = step
            try:
                with worker.section(CHECKPOINT):
                    trainer.save_checkpoint(io.path_for(step))
            except CheckpointError as exc:  # the previous save failed (on every rank): its version is lost,
                log.warning("[nvrx] rank %d step %d: checkpoint failed, training goes on: %s",  # the one before
                            trainer.global_rank, step, exc)  # it stays; this step was not saved either
        if stop:
            self.stopped_at = step
            trainer.should_stop = True
            if trainer.is_global_zero:
                log.warning("[nvrx] stop requested: training stops at step %d%s", step,
                            " (checkpoint saved)" if io is not None and self.save_on_stop else "")
        worker.heartbeat()

    def _stop_agreed(self, trainer: Any, batch_idx: int) -> bool:
        """True on every rank at once when any rank was asked to stop (checked every `stop_check_every` batches)."""
        wanted = worker.stop_requested()
        if trainer.world_size <= 1:
            return wanted
        if batch_idx % self.stop_check_every != 0:
            return False
        with worker.section(STOP_SYNC):
            return bool(trainer.strategy.reduce_boolean_decision(wanted, all=False))


def _nvrx_io(trainer: Any) -> NvrxCheckpointIO | None:
    io = getattr(trainer.strategy, "checkpoint_io", None)
    return io if isinstance(io, NvrxCheckpointIO) else None


def _save_on_every_rank(strategy: Any, io: NvrxCheckpointIO) -> None:
    """Make `strategy.save_checkpoint` call the CheckpointIO on every rank (Lightning's base Strategy calls it on
    rank 0 only, which suits a file written once but not a collective save). Only for strategies that keep the
    base implementation (DDP, single device): a sharded strategy writes its own files."""
    if getattr(strategy, "_nvrx_saves_on_every_rank", False):
        io._collective = True
        return
    if type(strategy).save_checkpoint is not Strategy.save_checkpoint:
        raise TypeError(f"NvrxCheckpointIO supports strategies that save through their CheckpointIO (DDP, single "
                        f"device); {type(strategy).__name__} saves its own way")

    def save_checkpoint(checkpoint: dict[str, Any], filepath: Any, storage_options: Any = None) -> None:
        strategy.checkpoint_io.save_checkpoint(checkpoint, filepath, storage_options=storage_options)

    strategy.save_checkpoint = save_checkpoint
    strategy._nvrx_saves_on_every_rank = True
    io._collective = True


def latest_ckpt_path(trainer: Any) -> str | None:
    """`nvrx:step-<N>` for the newest version this job could restore, or None: pass it to `trainer.fit(ckpt_path=)`.

    Collective: every rank calls it, before `fit`. With more than one rank it starts torch.distributed the way
    `fit` would (`trainer.strategy.setup_environment()`; `fit` then finds it up), so the ranks must have been
    started by `nvrx-hpc run`, srun or torchrun, not spawned by Lightning.
    """
    io = _nvrx_io(trainer)
    if io is None:
        raise TypeError("latest_ckpt_path needs Trainer(plugins=[NvrxCheckpointIO(...)])")
    if trainer.world_size > 1:
        import torch.distributed as dist

        env = getattr(trainer.strategy, "cluster_environment", None)
        if env is None or not env.creates_processes_externally:
            raise RuntimeError("latest_ckpt_path needs ranks started outside Lightning (nvrx-hpc run, srun, "
                               "torchrun); pass plugins=[NvrxEnvironment()]")
        if not dist.is_initialized():
            trainer.strategy.setup_environment()
    step = io.latest()
    return None if step is None else io.path_for(step)
