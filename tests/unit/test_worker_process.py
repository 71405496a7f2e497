"""The public worker API in real processes: environment, atexit bye, SIGUSR1, fork, import cost, no agent."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
from _worker_stub import StubAgent, short_dir, token_file

HEAVY = ("torch", "numpy", "msgpack", "mpi4py", "asyncio", "pydantic", "typer", "rich", "nvrx_hpc.core.wire")


def _python(code: str, env: dict[str, str], timeout: float = 30) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("NVRX_")}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env={**clean, **env},
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def job():
    directory = short_dir()
    tok, token = token_file(directory)
    agent = StubAgent(os.path.join(directory, "agent.sock"), token)
    env = {"NVRX_AGENT_SOCKET": agent.path, "NVRX_TOKEN_FILE": tok, "NVRX_RUN_DIR": directory,
           "RANK": "5", "LOCAL_RANK": "1", "NVRX_RESTART_COUNT": "3"}
    yield agent, env, directory
    agent.stop()
    shutil.rmtree(directory, ignore_errors=True)


def test_import_is_light_and_no_agent_means_no_op():
    done = _python(f"""
        import sys, threading, time
        import nvrx_hpc.worker as w
        heavy = [m for m in {HEAVY!r} if m in sys.modules]
        w.heartbeat()
        with w.section("step"):
            w.set_iteration(1)
        w.start_section("x"); w.end_section("x")
        w.load_state_dict({{"version": 1, "timeouts": {{"heartbeat": 9.0}}}})
        costs = []
        for _ in range(5):  # the best of five: a preempted round says nothing about the call
            t = time.perf_counter()
            for _ in range(20000):
                w.heartbeat()
            costs.append((time.perf_counter() - t) / 20000)
        cost = min(costs)
        print(heavy, w.enabled(), w.stop_requested(), threading.active_count(), w.state_dict(), cost < 5e-6)
    """, {"SLURM_PROCID": "0"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[] False False 1 {'version': 1, 'timeouts': {'heartbeat': 9.0}} True"


def test_public_api_reports_to_the_agent_and_says_bye(job):
    agent, env, _ = job
    done = _python("""
        import sys, os
        import nvrx_hpc.worker as w
        light = "msgpack" not in sys.modules
        w.heartbeat()
        with w.section("step"):
            w.set_iteration(4)
        pid = os.fork()
        if pid == 0:  # a DataLoader-style child never reports as its parent's rank
            w.heartbeat()
            os._exit(0 if not w.enabled() else 1)
        _, status = os.waitpid(pid, 0)
        import subprocess  # nor does a spawned child, which inherits the rank's environment
        child = subprocess.run([sys.executable, "-c", "import nvrx_hpc.worker as w; w.heartbeat(); print(w.enabled())"],
                               capture_output=True, text=True)
        print(light, w.enabled(), status, child.stdout.strip())
    """, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True True 0 False"
    agent.wait(lambda: agent.of_type("w.bye"))
    types = agent.types()
    assert types[0] == "w.hello" and types[-1] == "w.bye"
    assert types.count("w.hello") == 1  # the forked child did not connect
    assert {"w.hb", "w.sec", "w.iter"} <= set(types)
    hello = agent.of_type("w.hello")[0]
    assert (hello["rank"], hello["local_rank"], hello["restart"]) == (5, 1, 3)


def test_sigusr1_dumps_stacks_even_with_a_stuck_main_thread(job):
    agent, env, directory = job
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import time, nvrx_hpc.worker as w
        w.heartbeat()
        print("ready", flush=True)
        def stuck_in_training():
            time.sleep(60)
        stuck_in_training()
    """)], env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        # faulthandler reads other threads' frames without the GIL: the agent signals a rank that is
        # stuck, not one whose daemon thread is busy importing, so wait until it has connected.
        agent.wait(lambda: agent.of_type("w.hb"))
        path = os.path.join(directory, "stacks", "rank-5.restart-3.txt")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and "stuck_in_training" not in _read(path):
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.1)
        assert "stuck_in_training" in _read(path)
        assert proc.poll() is None  # SIGUSR1 did not kill the rank
    finally:
        proc.kill()
        proc.wait()


def test_sigusr1_on_a_busy_rank_does_not_crash_it(job):
    """faulthandler's all-threads dump from a signal handler segfaults when another thread runs Python."""
    agent, env, directory = job
    stop = os.path.join(directory, "stop")
    # The rank stays busy until told to stop, so how many signals it takes does not depend on how
    # fast this machine is.
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time, nvrx_hpc.worker as w
        w.heartbeat()
        print("ready", flush=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not os.path.exists({stop!r}):
            for _ in range(200):  # the daemon thread is busy sending all the while
                w.heartbeat()
                with w.section("step"):
                    sum(range(300))
    """)], env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        agent.wait(lambda: agent.of_type("w.sec"), timeout=20)
        stacks = os.path.join(directory, "stacks", "rank-5.restart-3.txt")
        for n in range(1, 21):  # one signal at a time: two pending SIGUSR1 would merge into one dump
            assert proc.poll() is None, "SIGUSR1 killed the busy rank"
            proc.send_signal(signal.SIGUSR1)
            agent.wait(lambda n=n: _read(stacks).count("Stack (most recent") >= n, timeout=10)
        open(stop, "w").close()
        assert proc.wait(timeout=30) == 0
    finally:
        proc.kill()
        proc.wait()


def test_heartbeats_reach_the_agent_while_the_training_thread_hogs_the_gil(job):
    """A pure-Python loop that releases the GIL only for short system calls starves other threads
    (CPython restarts a waiter's switch timer on every hand-over); heartbeat() must make room for the link."""
    agent, env, directory = job
    stop = os.path.join(directory, "stop")
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import os, time, nvrx_hpc.worker as w
        print("ready", flush=True)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not os.path.exists({stop!r}):  # a stat: a short GIL release
            for _ in range(50):
                sum(range(300))
            w.heartbeat()
    """)], env={**os.environ, **env}, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        agent.wait(lambda: agent.of_type("w.hb"), timeout=20)
        first = len(agent.of_type("w.hb"))
        agent.wait(lambda: len(agent.of_type("w.hb")) >= first + 3, timeout=20)  # the link keeps going
        assert proc.poll() is None
        open(stop, "w").close()
        assert proc.wait(timeout=30) == 0
        agent.wait(lambda: agent.of_type("w.bye"))
    finally:
        proc.kill()
        proc.wait()


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


_GLOO_RANK = """
    import os, sys, time
    import torch, torch.distributed as dist
    import nvrx_hpc.worker as w
    dist.init_process_group("gloo", init_method="env://")
    rank = dist.get_rank()
    t = torch.ones(4)
    dist.all_reduce(t)
    w.heartbeat()
    if rank == 1:
        time.sleep(120)  # stuck before the collective
    with w.section("allreduce"):
        dist.all_reduce(t)  # rank 0 waits here for rank 1
"""


def test_dump_request_writes_flight_recorder_from_a_rank_stuck_in_a_collective(job):
    agent, env, directory = job
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    common = {**os.environ, "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
              "TORCH_FR_BUFFER_SIZE": "2000", "GLOO_SOCKET_IFNAME": "lo"}
    procs = []
    for rank in (0, 1):
        extra = {**env, "RANK": "0"} if rank == 0 else {"RANK": "1"}
        procs.append(subprocess.Popen([sys.executable, "-c", textwrap.dedent(_GLOO_RANK)],
                                      env={**common, **extra}, stderr=subprocess.PIPE, text=True))
    try:
        agent.wait(lambda: any(m["name"] == "allreduce" for m in agent.of_type("w.sec")), timeout=60)
        time.sleep(0.2)  # let rank 0 enter the collective
        agent.send({"type": "a.dump", "reason": "rank 1 missed its heartbeats"})
        fr = os.path.join(directory, "fr", "rank-0.restart-3.pkl")
        agent.wait(lambda: agent.of_type("w.dumped"), timeout=20)  # answered once the first file is on disk
        assert os.path.exists(fr)
        with open(fr, "rb") as f:
            data = f.read()
        assert data[:1] == b"\x80" and b"all_reduce" in data  # a pickle (never loaded here) naming the op
        # the quick dump (no stack traces) lands at once; the full one replaces it once symbolized
        agent.wait(lambda: b"frames" in open(fr, "rb").read(), timeout=30)
        stacks = _read(os.path.join(directory, "stacks", "rank-0.restart-3.txt"))
        assert "rank 1 missed its heartbeats" in stacks and "<string>" in stacks
        assert all(p.poll() is None for p in procs)
    finally:
        for p in procs:
            p.kill()
            p.wait()
