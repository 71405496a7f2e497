"""Helpers of the fault tests: a training that checkpoints through nvrx_hpc.ckpt (examples/train_ckpt.py) run
under `nvrx-hpc run` in a real sbatch allocation, polls with generous deadlines, the run directory's events."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nvrx_hpc.core.events import read_events
from nvrx_hpc.launcher.status import read_status

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "examples" / "train_ckpt.py"
STEPS = 12
# For faults injected from outside once the training runs: from step 3 on the first attempt takes a second
# per step, so the fault lands before the end however slow the machine.
SLOW = "slow:step=3"


def bb_dir(cluster, tmp_path: Path, name: str) -> str:
    """A burst-buffer template unique to this submission (the cluster's bb dirs outlive the test's tmp dir,
    and an earlier run's checkpoints would make the training finish at once); recorded for `bb_of`."""
    tag = f"{name}-{os.getpid()}-{time.time_ns()}"
    (tmp_path / f"{name}.bb").write_text(tag)
    return f"{cluster.state_dir}/bb/{{domain}}/{tag}"


def bb_of(cluster, tmp_path: Path, name: str, node: str) -> Path:
    """The burst-buffer directory of `node` for the training submitted as `name`."""
    return Path(cluster.state_dir) / "bb" / node / (tmp_path / f"{name}.bb").read_text()


def submit(cluster, tmp_path: Path, name: str, *, nodes: int, spares: int, fault: str | None = None,
           run_args: tuple[str, ...] = (), train_args: tuple[str, ...] = (), env_line: str = "",
           sbatch_args: tuple[str, ...] = (), tasks_per_node: int = 2, steps: int = STEPS,
           script_body: str | None = None, time_limit: str = "5") -> tuple[str, Path]:
    """sbatch a job of `nodes + spares` nodes x `tasks_per_node` whose batch script execs `nvrx-hpc run`."""
    run_dir = tmp_path / name
    script = tmp_path / f"{name}.sh"
    env_line += f"export NVRX_TEST_FAULT={fault}\n" if fault else ""
    argv = [
        sys.executable, "-m", "nvrx_hpc", "run", "--spares", str(spares), "--run-dir", str(run_dir),
        "--stop-grace", "2", *run_args, "--",
        sys.executable, str(TRAIN), "--steps", str(steps), "--ckpt-every", "2", "--step-time", "0.1",
        "--bb-dir", bb_dir(cluster, tmp_path, name), "--out", str(run_dir), "--hidden", "32", *train_args,
    ]  # fmt: skip
    body = script_body if script_body is not None else "exec " + shlex.join(argv)
    script.write_text("#!/bin/bash\n" + env_line + body + "\n")
    done = cluster.run(
        ["sbatch", "--parsable", f"--nodes={nodes + spares}", f"--ntasks-per-node={tasks_per_node}",
         f"--time={time_limit}", "--no-kill", f"--output={tmp_path / name}.out", *sbatch_args, str(script)],
        timeout=30,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0], run_dir


def sbatch_exec(cluster, tmp_path: Path, name: str, argv: list[str], env: dict[str, str],
                tasks_per_node: int = 2, nodes: int = 2) -> str:
    """sbatch a job of `nodes` whose script exports `env` and execs `argv`; its output is `<tmp_path>/<name>.out`."""
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    script = tmp_path / f"{name}.sh"
    script.write_text("#!/bin/bash\n" + exports + "exec " + shlex.join(argv) + "\n")
    done = cluster.run(["sbatch", "--parsable", f"--nodes={nodes}", f"--ntasks-per-node={tasks_per_node}", "--time=5",
                        "--no-kill", f"--output={tmp_path / name}.out", str(script)], timeout=30)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().split(";")[0]


def train_argv(cluster, tmp_path: Path, name: str) -> list[str]:
    """The training command alone (for scripts rendered from the sbatch template)."""
    run_dir = tmp_path / name
    return [
        sys.executable, str(TRAIN), "--steps", str(STEPS), "--ckpt-every", "2", "--step-time", "0.1",
        "--bb-dir", bb_dir(cluster, tmp_path, name), "--out", str(run_dir), "--hidden", "32",
    ]  # fmt: skip


def wait_iteration(run_dir: Path, iteration: int, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = read_status(run_dir) or {}
        iterations = [r.get("iteration") or 0 for r in status.get("ranks", {}).values()]
        if iterations and max(iterations) >= iteration:
            return status
        time.sleep(0.2)
    raise AssertionError(f"training in {run_dir} never reached iteration {iteration}")


def wait_job(cluster, job: str, timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = cluster.dev.backend.job(job)
        if info.finished:
            return {"state": info.state, "exit_code": info.exit_code, "restarts": info.restart_count}
        time.sleep(0.5)
    cluster.run(["scancel", job])
    raise AssertionError(f"job {job} did not finish in {timeout} s")


def final_hash(run_dir: Path) -> str:
    return (run_dir / "final_hash.txt").read_text().strip()


def events(run_dir: Path) -> list[dict]:
    return read_events(run_dir / "events.jsonl")


def kinds(run_dir: Path) -> list[str]:
    return [e["kind"] for e in events(run_dir)]


def first(run_dir: Path, kind: str) -> dict:
    return next(e for e in events(run_dir) if e["kind"] == kind)


def transcript(tmp_path: Path, name: str) -> str:
    out = tmp_path / f"{name}.out"
    logs = sorted((tmp_path / name / "logs").glob("step-*.log")) if (tmp_path / name / "logs").exists() else []
    tail = "".join(f"\n--- {p.name}\n" + p.read_text()[-3000:] for p in logs)
    return (out.read_text() if out.exists() else "(no batch output)") + tail


def processes_of_node(state_dir: Path, node: str) -> list[int]:
    """A virtual node's processes: its slurmd and slurmstepds (their SLURM_CONF names the node) and its tasks
    (SLURMD_NODENAME): what a power loss takes at once. Only this cluster's (its state dir in the process's
    command line or environment): other clusters on this host have nodes of the same names."""
    conf = f"SLURM_CONF={state_dir}/etc/{node}/slurm.conf".encode()
    name = f"SLURMD_NODENAME={node}".encode()
    ours = str(state_dir).encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if not any(ours in item for item in environ + cmdline):
            continue
        slurmd = bool(cmdline) and cmdline[0].endswith(b"slurmd") and node.encode() in cmdline
        if slurmd or conf in environ or name in environ:
            pids.append(int(entry.name))
    return pids


def kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def revive_node(cluster, node: str) -> None:
    """Start the lost node's slurmd again and wait until Slurm has it back."""
    cluster.dev.revive_node(node)


@contextmanager
def sim_xid79(cluster, job: str, node: str) -> Iterator[None]:
    """A simulated Xid 79 on `node` (sim GPU backend) for the block; afterwards the faults are cleared and,
    once the job has left, the node the Epilog drained on them is put back for the next tests."""
    try:
        inject = subprocess.run(
            [sys.executable, "-m", "nvrx_hpc", "cluster", "inject-gpu-fault", node, "xid=79",
             "--state-dir", str(cluster.state_dir)], capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert inject.returncode == 0, inject.stderr
        yield
    finally:
        subprocess.run([sys.executable, "-m", "nvrx_hpc", "cluster", "clear-gpu-faults", "--state-dir",
                        str(cluster.state_dir)], capture_output=True, timeout=30)  # fmt: skip
        _resume_after_epilog(cluster, job, node)


def _resume_after_epilog(cluster, job: str, node: str) -> None:
    """The job's Epilog re-checks health while the simulated Xid is still there and drains the node."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        info = cluster.dev.backend.job(job)
        if info.finished and "COMPLETING" not in info.state_flags:
            break
        time.sleep(0.5)
    # The Epilog's drain lands as the job leaves the node, or a few seconds later on a loaded host: a node
    # left drained would make the next test's job run without it.
    # Done once the node has stayed undrained and out of any job for 3 s.
    deadline, clear_since = time.monotonic() + 20, None
    while time.monotonic() < deadline:
        state = cluster.dev.backend.node(node)
        if state.drained:
            cluster.dev.backend.resume([node])
            clear_since = None
        elif state.state != "idle" or "COMPLETING" in state.flags:
            clear_since = None
        elif clear_since is None:
            clear_since = time.monotonic()
        elif time.monotonic() - clear_since >= 3:
            return
        time.sleep(0.5)
