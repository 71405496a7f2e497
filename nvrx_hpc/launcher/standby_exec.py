"""A task of a standby step: the training's imports paid before a fault, then its go, then the script.

`PYTHON [FLAGS] -m nvrx_hpc.launcher.standby_exec --restart N -- PYTHON [FLAGS] SCRIPT ARGS...`
(or `... -- PYTHON [FLAGS] -m MODULE ARGS...`).

The launcher starts one such step on every node of the allocation while attempt N-1 trains
(launcher/standby_step.py). Each task tells its node's agent that it waits for attempt N, imports torch
and the other modules of its preload list at idle priority where it can come back from it (idle_imports.py:
the imports then take only CPU time the training leaves), and blocks. At the go of attempt N it takes its
rank from the go's node order and its local task number, labels its output with that rank (as `srun --label` labels a
training step's), and runs the script in this process, as `python SCRIPT` would: a restart no longer waits
for every rank to import torch. A task whose node is not in the go exits 0; so does one whose agent goes
away before any go (the job ended).
"""

from __future__ import annotations

import argparse
import gc
import importlib
import os
import runpy
import select
import signal
import socket
import sys
from dataclasses import dataclass
from typing import NoReturn

from nvrx_hpc.core.templates import expand_percent
from nvrx_hpc.launcher import idle_imports

__all__ = ["PythonCommand", "python_command", "main", "DEFAULT_PRELOAD", "CHECKPOINT_PRELOAD", "ENV_PRELOAD"]

ENV_PRELOAD = "NVRX_STANDBY_PRELOAD"  # comma-separated modules a standby task imports before it waits
# What a script of the checkpoint layer still imports after its go: `nvrx_hpc.ckpt` resolves its names lazily,
# so the package alone leaves pydantic and h5py to the go (1.2 s of the 1.5 s from a go to the restore on the
# local cluster).
CHECKPOINT_PRELOAD = ("nvrx_hpc.worker.sender", "nvrx_hpc.ckpt.checkpointer", "nvrx_hpc.ckpt.transport")
# Ours and torch's: none reads the rank from the environment at import. A user's own modules are not imported
# ahead: one that reads RANK at import would read the standby task's, not its rank's. With the garbage
# collector off while they load (_preload), the whole list costs a task the CPU time that torch alone cost
# with it on, so the checkpoint modules come at no cost to the training beside it (docs/scale.md).
DEFAULT_PRELOAD = ("torch", "torch.distributed", "nvrx_hpc.worker", "nvrx_hpc.ckpt", *CHECKPOINT_PRELOAD)
_FLAGS_WITH_VALUE = ("-X", "-W")
CONNECT_WAIT_S = 30.0


@dataclass(frozen=True)
class PythonCommand:
    """`PYTHON [FLAGS] SCRIPT ARGS` (module None) or `PYTHON [FLAGS] -m MODULE ARGS` (script None)."""

    python: str
    flags: tuple[str, ...]
    script: str | None
    module: str | None
    args: tuple[str, ...]


def python_command(command: list[str]) -> PythonCommand | None:
    """The command as a Python script or module run, or None when it is something else (a shell script,
    `python -c`, a binary): such a command cannot wait in a standby step."""
    if not command or not os.path.basename(command[0]).startswith("python"):
        return None
    flags: list[str] = []
    i = 1
    while i < len(command) and command[i].startswith("-") and command[i] != "-m":
        if command[i] in ("-c", "-", "--"):
            return None
        flags.append(command[i])
        if command[i] in _FLAGS_WITH_VALUE and i + 1 < len(command):
            i += 1
            flags.append(command[i])
        i += 1
    if i >= len(command):
        return None
    if command[i] == "-m":
        if i + 1 >= len(command):
            return None
        return PythonCommand(command[0], tuple(flags), None, command[i + 1], tuple(command[i + 2 :]))
    return PythonCommand(command[0], tuple(flags), command[i], None, tuple(command[i + 1 :]))


def _preload(modules: list[str]) -> None:
    """Imports `modules` with the garbage collector off, then moves what they created out of its reach.

    Importing torch creates some 10^5 objects, and every full collection on the way walks all of them so far
    for nothing (a module is never garbage); the first collection after the imports would walk them all once
    more, after the go. With the collector off and the result frozen (`gc.freeze`) the whole list costs a task
    about what torch alone cost with the collector on, and the go pays none of it (docs/scale.md). A training
    loop frees its garbage in the young generations, which freezing leaves as they were."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except Exception as exc:  # noqa: BLE001 - the script imports it again and reports its own error
                sys.stderr.write(f"nvrx-hpc standby: cannot preload {name}: {type(exc).__name__}: {exc}\n")
    finally:
        gc.freeze()
        if was_enabled:
            gc.enable()


class _AgentWait:
    """This task's link to its node's agent: connected and waiting for attempt `restart` before the imports,
    so that the launcher sees it at once and a task that a go already leaves out skips them."""

    def __init__(self, restart: int) -> None:
        from nvrx_hpc.core import messages as m
        from nvrx_hpc.core.wire import Codec, FrameReader, load_token

        env = os.environ
        self._go_kind = m.Kind.A_GO.value
        self.path = expand_percent(env.get("NVRX_AGENT_SOCKET", ""), job_id=env.get("SLURM_JOB_ID", ""),
                                   node=env.get("SLURMD_NODENAME", ""))  # fmt: skip
        if not self.path or not env.get("NVRX_TOKEN_FILE"):
            _fail("NVRX_AGENT_SOCKET and NVRX_TOKEN_FILE must be set (the launcher sets them)")
        codec = Codec(load_token(env["NVRX_TOKEN_FILE"]))
        self._reader = FrameReader(codec)
        self.go: dict | None = None
        self.closed = False
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._sock.settimeout(CONNECT_WAIT_S)
        try:
            self._sock.connect(self.path)
            hello = m.WorkerStandby(restart=restart, pid=os.getpid(), local_rank=int(env.get("SLURM_LOCALID", "0")))
            self._sock.sendall(codec.encode(hello.to_wire()))
        except OSError as exc:
            self._sock.close()
            _fail(f"cannot wait with the agent at {self.path}: {exc.strerror or exc}")

    @property
    def answered(self) -> bool:
        return self.go is not None or self.closed

    def poll(self, timeout: float | None) -> None:
        """Reads what the agent sent within `timeout` seconds (None: until it answers)."""
        try:
            while not self.answered:
                ready, _, _ = select.select([self._sock], [], [], timeout)
                if not ready:
                    return
                data = self._sock.recv(65536)
                if not data:
                    self.closed = True  # the agent closed: the job ended without needing this standby step
                    return
                self.go = next((raw for raw in self._reader.feed(data) if raw.get("type") == self._go_kind), None)
                timeout = 0.0
        except OSError as exc:
            _fail(f"cannot wait with the agent at {self.path}: {exc.strerror or exc}")

    def close(self) -> None:
        self._sock.close()


def _fail(why: str) -> NoReturn:
    sys.stderr.write(f"nvrx-hpc standby: {why}\n")
    sys.exit(3)


def _needed(go: dict) -> bool:
    return os.environ.get("SLURMD_NODENAME", "") in [str(n) for n in go.get("ranks_on") or []]


def _become_rank(go: dict) -> int | None:
    """This task's environment as its rank's (what rank_exec gives a training task); None: not needed."""
    env = os.environ
    nodes = [str(n) for n in go.get("ranks_on") or []]
    node = env.get("SLURMD_NODENAME", "")
    if node not in nodes:
        return None
    env.update({str(k): str(v) for k, v in (go.get("env") or {}).items()})
    per_node = int(env.get("LOCAL_WORLD_SIZE") or env.get("SLURM_NTASKS_PER_NODE") or "1")
    local = int(env.get("SLURM_LOCALID", "0"))
    rank, world = nodes.index(node) * per_node + local, len(nodes) * per_node
    env.update({
        "RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": str(world), "NODE_RANK": str(nodes.index(node)),
        "LOCAL_WORLD_SIZE": str(per_node),
        # what srun would have said to this rank in a step of its own: scripts read these too
        "SLURM_PROCID": str(rank), "SLURM_NTASKS": str(world), "SLURM_NODEID": str(nodes.index(node)),
        "SLURM_NNODES": str(len(nodes)),
    })  # fmt: skip
    if "%" in env.get("NVRX_AGENT_SOCKET", ""):
        env["NVRX_AGENT_SOCKET"] = expand_percent(env["NVRX_AGENT_SOCKET"], job_id=env.get("SLURM_JOB_ID", ""),
                                                  node=node)  # fmt: skip
    return rank


def _label_output(rank: int) -> None:
    """Every line this process writes to stdout or stderr from now on gets `RANK: ` in front, as srun's
    --label gives a training step's (a standby step runs unlabelled: its task numbers are not the ranks).

    A forked labeller reads a pipe in place of both; it ignores SIGTERM and SIGINT, so the rank's last words
    while it stops (a checkpoint, a traceback) still reach the log, and ends when the rank's end closes it."""
    read_end, write_end = os.pipe()
    out = os.dup(1)
    if os.fork() == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        os.close(write_end)
        prefix, pending = f"{rank}: ".encode(), b""
        try:
            while chunk := os.read(read_end, 65536):
                *lines, pending = (pending + chunk).split(b"\n")
                _write_all(out, b"".join(prefix + line + b"\n" for line in lines))
            if pending:
                _write_all(out, prefix + pending + b"\n")
        finally:
            os._exit(0)
    os.dup2(write_end, 1)
    os.dup2(write_end, 2)
    for fd in (read_end, write_end, out):
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        data = data[os.write(fd, data) :]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="nvrx_hpc.launcher.standby_exec")
    parser.add_argument("--restart", type=int, required=True, help="the attempt this task waits for")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    target = python_command(command)
    if target is None:
        _fail(f"not a Python script or module command: {' '.join(command)[:200]!r}")
    mode = os.environ.get(idle_imports.ENV, "").strip() or "auto"
    if mode not in idle_imports.MODES:
        _fail(f"{idle_imports.ENV} must be one of {', '.join(idle_imports.MODES)}, not {mode[:40]!r}")
    idle = mode == "auto" and idle_imports.lower()  # before the wire's imports too: they are a tenth of a second
    agent = _AgentWait(args.restart)
    agent.poll(0.0)
    if not agent.closed and (agent.go is None or _needed(agent.go)):
        preload = os.environ.get(ENV_PRELOAD)
        _preload([p.strip() for p in preload.split(",") if p.strip()] if preload is not None else list(DEFAULT_PRELOAD))
    agent.poll(None)
    agent.close()
    rank = _become_rank(agent.go) if agent.go is not None else None
    if rank is None:
        sys.exit(0)
    if idle:
        try:
            idle_imports.restore()  # a rank at idle priority would get only what the others leave
        except OSError as exc:
            _fail(f"cannot leave idle priority to train: {exc.strerror or exc}")
    sys.stdout.flush()
    sys.stderr.flush()
    _label_output(rank)
    if target.module is not None:
        sys.argv = [target.module, *target.args]
        sys.path[0] = os.getcwd()
        runpy.run_module(target.module, run_name="__main__", alter_sys=True)
    else:
        sys.argv = [target.script, *target.args]
        sys.path[0] = os.path.dirname(os.path.abspath(target.script))
        runpy.run_path(target.script, run_name="__main__")


if __name__ == "__main__":
    main(sys.argv[1:])
