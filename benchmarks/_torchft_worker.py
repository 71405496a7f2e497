"""One TorchFT replica group of one rank, training examples/train.py's model; driven by _torchft_bench.py.

    python benchmarks/_torchft_worker.py --replica R --lighthouse http://127.0.0.1:PORT --min-replicas M \
        [--control DIR] [--log FILE] [--step-time 0.05] [--max-steps 0]

The usual TorchFT DDP shape on CPU: this process is replica group R (group rank 0 of 1), with its own
TCPStore, a `torchft.ProcessGroupGloo`, a `torchft.Manager` that asks the lighthouse for a quorum every
step and `torchft.Optimizer` around a plain SGD (it steps only if every replica of the quorum commits).
Gradients, --grad-sync:
  allreduce (default)  flattened into one tensor and averaged over the step's participants with
                       `Manager.allreduce`, as examples/train.py does with one all-reduce per step;
  ddp                  `torchft.DistributedDataParallel`. In torchft 0.2.0 its comm hook fails an
                       assertion (`assert fut._fut` in ddp.py) when the all-reduce errors, e.g. because a
                       peer was killed during it, so every surviving replica crashes with it.
Model, data, learning rate, seed, batch size and the sleep that stands for compute are
examples/train.py's (`build_model`, `batch(step, R)`, LR, --step-time): the same training, only the
fault tolerance differs. A restarted replica has a new TorchFT replica id (the
Manager appends a fresh uuid) and heals from a live one (the Manager's default HTTP checkpoint transport).

Output: one JSON line per step, appended to --log (stdout by default):
  {"replica": R, "pid": ..., "step": S, "t_start": ..., "t_end": ..., "participants": P, "committed": bool}
S is the Manager's step after this step (the number of committed steps, shared by all replicas), P the
number of replicas whose gradients the step averaged, times are time.time(). Other lines have an "event"
key: "started", "raise" (with "t"), "stopped".

Control files in --control DIR (checked at the top of every step, a stat each):
  raise.R   removed, then a Python exception is raised at the start of this step; it is not caught: the
            traceback goes to stderr and the process exits 1, to be restarted by its supervisor, as
            TorchFT expects of a failed replica (os._exit after the traceback: the interpreter's exit
            would otherwise wait for the Manager's quorum thread)
  stop      leave the loop, shut the Manager down and exit 0

Timeouts as in TorchFT's train_ddp.py example on CPU: gloo 5 s, Manager 30 s, quorum 60 s (TorchFT's
default). The gloo one decides what a peer killed during the all-reduce costs: only its ring
neighbours see the reset connection, the other ranks wait for the gloo timeout. It must stay well
below the quorum timeout: with both at 60 s, the neighbours' next quorum request (which cannot be
met while the others wait in gloo) times out first, which raises out of the training loop and
brings every replica down in turn.
With --exit-with-parent the loop also ends (exit 0) once the parent process is gone, so that a killed
benchmark leaves no replica behind.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
import traceback
from datetime import timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def _load_example():
    """examples/train.py as a module (its imports are torch and nvrx_hpc.worker; nothing runs on import)."""
    sys.path.insert(0, str(REPO))
    spec = importlib.util.spec_from_file_location("_nvrx_example_train", REPO / "examples" / "train.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks itself up there
    spec.loader.exec_module(module)
    return module


class InjectedFault(RuntimeError):
    pass


def run(args: argparse.Namespace, emit) -> int:
    import torch
    from torch.distributed import TCPStore
    from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

    example = _load_example()
    torch.set_num_threads(1)  # as examples/train.py
    control = Path(args.control) if args.control else None
    raise_file = control / f"raise.{args.replica}" if control else None
    stop_file = control / "stop" if control else None

    model = example.build_model()  # seeded: every replica starts from the same weights
    timeout = timedelta(seconds=args.timeout_s)
    # the replica group's own store (torchrun would start it); rank 0 of the group is its master
    store = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    # gloo has no abort: a rank whose ring neighbour died waits for this timeout (see --pg-timeout-s)
    pg = ProcessGroupGloo(timeout=timedelta(seconds=args.pg_timeout_s))
    optimizer = None

    def state_dict() -> dict:
        return {"model": model.state_dict(), "optim": optimizer.state_dict()}

    def load_state_dict(state: dict) -> None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])

    manager = Manager(
        pg=pg,
        min_replica_size=args.min_replicas,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"bench_{args.replica}",
        timeout=timeout,
        quorum_timeout=timedelta(seconds=args.quorum_timeout_s),
        rank=0,
        world_size=1,
        store_addr="127.0.0.1",
        store_port=store.port,
        lighthouse_addr=args.lighthouse,
        hostname="127.0.0.1",
    )
    params = list(model.parameters())
    net = DistributedDataParallel(manager, model) if args.grad_sync == "ddp" else model
    optimizer = Optimizer(manager, torch.optim.SGD(params, lr=example.LR))
    parent = os.getppid()
    emit({"event": "started", "replica": args.replica, "pid": os.getpid(), "t": time.time()})

    while args.max_steps <= 0 or manager.current_step() < args.max_steps:
        t_start = time.time()
        if (stop_file is not None and stop_file.exists()) or (args.exit_with_parent and os.getppid() != parent):
            break
        if raise_file is not None and raise_file.exists():
            raise_file.unlink()
            emit(
                {
                    "event": "raise",
                    "replica": args.replica,
                    "pid": os.getpid(),
                    "t": time.time(),
                    "step": manager.current_step(),
                }
            )
            raise InjectedFault(f"injected exception in replica {args.replica} at step {manager.current_step() + 1}")
        before = manager.current_step()
        x, y = example.batch(before + 1, args.replica)  # train.py numbers its steps from 1
        optimizer.zero_grad()  # starts this step's quorum
        loss = torch.nn.functional.mse_loss(net(x), y)
        loss.backward()  # ddp: gradients averaged over the participants by the Manager
        if args.grad_sync == "allreduce":
            flat = torch.cat([p.grad.reshape(-1) for p in params])
            manager.allreduce(flat).wait()  # averaged; an error is kept by the Manager: no commit
            offset = 0
            for p in params:
                p.grad.copy_(flat[offset : offset + p.numel()].view_as(p))
                offset += p.numel()
        optimizer.step()  # applied only if every replica in the quorum commits
        if args.step_time > 0:
            time.sleep(args.step_time)
        emit(
            {
                "replica": args.replica,
                "pid": os.getpid(),
                "step": manager.current_step(),
                "t_start": t_start,
                "t_end": time.time(),
                "participants": manager.num_participants(),
                "committed": manager.current_step() > before,
            }
        )
    emit(
        {
            "event": "stopped",
            "replica": args.replica,
            "pid": os.getpid(),
            "t": time.time(),
            "step": manager.current_step(),
        }
    )
    manager.shutdown(wait=False)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replica", type=int, required=True, help="replica group index (0..N-1)")
    parser.add_argument("--lighthouse", required=True, help="lighthouse address, http://HOST:PORT")
    parser.add_argument("--min-replicas", type=int, required=True, help="Manager's min_replica_size")
    parser.add_argument("--control", default=None, help="directory of control files (raise.R, stop)")
    parser.add_argument("--log", default=None, help="append the JSON lines here (default stdout)")
    parser.add_argument("--step-time", type=float, default=0.05, help="sleep per step, as examples/train.py")
    parser.add_argument("--max-steps", type=int, default=0, help="stop at this Manager step (0: never)")
    parser.add_argument("--timeout-s", type=float, default=30.0, help="Manager timeout (30: torchft's train_ddp.py)")
    parser.add_argument("--quorum-timeout-s", type=float, default=60.0, help="Manager quorum timeout (TorchFT: 60)")
    parser.add_argument(
        "--pg-timeout-s",
        type=float,
        default=5.0,
        help="gloo timeout (5: torchft's train_ddp.py on CPU); must stay well under the quorum timeout",
    )
    parser.add_argument(
        "--grad-sync",
        choices=("allreduce", "ddp"),
        default="allreduce",
        help="one Manager.allreduce per step (default) or torchft.DistributedDataParallel",
    )
    parser.add_argument("--exit-with-parent", action="store_true", help="stop once the parent process is gone")
    args = parser.parse_args(argv)
    out = open(args.log, "a", buffering=1) if args.log else sys.stdout

    def emit(record: dict) -> None:
        out.write(json.dumps(record) + "\n")
        out.flush()

    try:
        return run(args, emit)
    except BaseException:  # noqa: BLE001 - the supervisor restarts us; say why and leave at once
        traceback.print_exc()
        sys.stderr.flush()
        out.flush()
        os._exit(1)


if __name__ == "__main__":
    sys.exit(main())
