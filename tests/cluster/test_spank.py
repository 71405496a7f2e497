"""The SPANK plugin on a real cluster: options, task environment, agent messages, fail open, strict plugstack.

The `cluster` fixture loads the plugin `required` with
`agent_socket=<state_dir>/run/%n/agent-%j.sock bb_dir=<state_dir>/bb/%n/%j timeout_ms=500 default=off`.
Tests that need the messages run their own per-node listeners and point the plugin at them through
NVRX_AGENT_SOCKET (user mode), so no agent has to be running.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.slurm

COMMAND_TIMEOUT = 90  # seconds for any srun/sbatch; each also gets `-t 1` (one minute) inside Slurm
MESSAGE_WAIT = 15  # task_exit and step_end may land just after srun returns
PLUGIN_VARS = ("NVRX_AGENT_SOCKET", "NVRX_AGENT_SOCKET_TEMPLATE", "NVRX_BB_DIR", "NVRX_NODE")

# Each task prints what it sees as one JSON line; the task with SLURM_PROCID=3 exits 7.
TASK_SCRIPT = """
import json, os, sys
env = os.environ
PLUGIN_VARS = ("NVRX_AGENT_SOCKET", "NVRX_AGENT_SOCKET_TEMPLATE", "NVRX_BB_DIR", "NVRX_NODE")
print(json.dumps({
    "rank": int(env["SLURM_PROCID"]), "local_rank": int(env["SLURM_LOCALID"]), "pid": os.getpid(),
    "node": env["SLURMD_NODENAME"], "job": int(env["SLURM_JOB_ID"]), "step": int(env["SLURM_STEP_ID"]),
    "nvrx": {k: env[k] for k in PLUGIN_VARS if k in env},
}), flush=True)
sys.exit(7 if env["SLURM_PROCID"] == "3" else 0)
"""


def _base_env(cluster, **extra: str) -> dict[str, str]:
    """os.environ minus the plugin's variables (none leak in from the caller's shell), plus the cluster's."""
    env = {k: v for k, v in os.environ.items() if k not in PLUGIN_VARS and not k.startswith("SLURM_SPANK")}
    env.update(cluster.env)
    env.update(extra)
    return env


def _run(cluster, argv: list[str], **extra_env: str) -> subprocess.CompletedProcess:
    print("$", " ".join(argv))
    done = subprocess.run(argv, env=_base_env(cluster, **extra_env), capture_output=True, text=True,
                          timeout=COMMAND_TIMEOUT)
    print(f"rc={done.returncode}\nstdout:\n{done.stdout}\nstderr:\n{done.stderr}")
    return done


def _task_lines(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


class Listeners:
    """One Unix-socket server per node at <directory>/<node>.sock, each on its own thread.

    Every JSON line received is kept as (node the socket belongs to, message).
    """

    def __init__(self, directory: Path, nodes: tuple[str, ...]) -> None:
        self.directory = directory
        self.template = str(directory / "%n.sock")
        self._lock = threading.Lock()
        self._messages: list[tuple[str, dict]] = []
        self._stop = threading.Event()
        self._servers: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        for node in nodes:
            server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            server.bind(str(directory / f"{node}.sock"))
            server.listen(64)
            server.settimeout(0.1)
            self._servers.append(server)
            thread = threading.Thread(target=self._serve, args=(node, server), daemon=True)
            thread.start()
            self._threads.append(thread)

    def _serve(self, node: str, server: socket.socket) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with conn:
                conn.settimeout(5)
                data = b""
                while chunk := conn.recv(65536):
                    data += chunk
            with self._lock:
                for line in data.splitlines():
                    self._messages.append((node, json.loads(line)))

    def messages(self) -> list[tuple[str, dict]]:
        with self._lock:
            return list(self._messages)

    def wait_for(self, done: Callable[[list[tuple[str, dict]]], bool], timeout: float = MESSAGE_WAIT):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.messages()
            if done(got):
                return got
            time.sleep(0.1)
        return self.messages()

    def close(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        for server in self._servers:
            server.close()


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: a Unix socket path must fit in 107 bytes."""
    path = Path(tempfile.mkdtemp(prefix="nvrx-spank-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def listeners(cluster, short_dir) -> Iterator[Listeners]:
    server = Listeners(short_dir, cluster.nodes)
    yield server
    server.close()


def _of_type(messages, kind: str, job: int, step) -> list[tuple[str, dict]]:
    return [(node, m) for node, m in messages if m["type"] == kind and m["job"] == job and m["step"] == step]


def test_srun_help_lists_the_options(cluster):
    done = _run(cluster, ["srun", "--help"])
    assert done.returncode == 0
    assert re.search(r"--nvrx\s+\[nvrx\]", done.stdout)
    assert re.search(r"--nvrx-health=off\|quick\|full\s+\[nvrx\]", done.stdout)


def test_registers_tasks_reports_exits_and_step_ends(cluster, listeners):
    started = time.time()
    done = _run(cluster, ["srun", "--nvrx", "-N2", "-n4", "--kill-on-bad-exit=0", "-t1", "--quiet",
                          sys.executable, "-c", TASK_SCRIPT], NVRX_AGENT_SOCKET=listeners.template)
    assert done.returncode == 7, "rank 3 exits 7 and srun reports it"
    tasks = {t["rank"]: t for t in _task_lines(done.stdout)}
    assert sorted(tasks) == [0, 1, 2, 3]
    job, step = tasks[0]["job"], tasks[0]["step"]
    nodes = {t["node"] for t in tasks.values()}
    assert len(nodes) == 2

    # The task environment: the template expanded for the task's own node.
    for task in tasks.values():
        node = task["node"]
        assert task["nvrx"]["NVRX_AGENT_SOCKET"] == str(listeners.directory / f"{node}.sock")
        assert task["nvrx"]["NVRX_AGENT_SOCKET_TEMPLATE"] == listeners.template
        assert task["nvrx"]["NVRX_BB_DIR"] == str(cluster.state_dir / "bb" / node / str(job))
        assert task["nvrx"]["NVRX_NODE"] == node

    def complete(messages) -> bool:
        return (len(_of_type(messages, "register", job, step)) >= 4
                and len(_of_type(messages, "task_exit", job, step)) >= 4
                and len(_of_type(messages, "step_end", job, step)) >= 2)

    messages = listeners.wait_for(complete)
    registers = _of_type(messages, "register", job, step)
    exits = _of_type(messages, "task_exit", job, step)
    ends = _of_type(messages, "step_end", job, step)
    assert sorted(m["rank"] for _, m in registers) == [0, 1, 2, 3]
    assert sorted(m["rank"] for _, m in exits) == [0, 1, 2, 3]
    assert sorted(node for node, _ in ends) == sorted(nodes)

    for arrived_on, msg in registers:
        task = tasks[msg["rank"]]
        assert msg["v"] == 1
        assert arrived_on == msg["node"] == task["node"], "sent to, and naming, the task's own node"
        assert msg["pid"] == task["pid"]
        assert msg["local_rank"] == task["local_rank"]
        assert msg["restart_count"] == 0
        assert started - 5 < msg["time"] < time.time() + 5
    for arrived_on, msg in exits:
        task = tasks[msg["rank"]]
        assert arrived_on == msg["node"] == task["node"]
        assert msg["pid"] == task["pid"] and msg["local_rank"] == task["local_rank"]
        want = 7 if msg["rank"] == 3 else 0
        assert (msg["exit_code"], msg["signal"], msg["status"]) == (want, None, want << 8)
    for arrived_on, msg in ends:
        assert arrived_on == msg["node"]
        assert set(msg) == {"v", "type", "job", "step", "node", "time"}


def test_default_off_without_nvrx_sends_nothing_and_sets_nothing(cluster, listeners):
    done = _run(cluster, ["srun", "-N2", "-n2", "-t1", "--quiet", sys.executable, "-c", TASK_SCRIPT],
                NVRX_AGENT_SOCKET=listeners.template)
    assert done.returncode == 0
    tasks = _task_lines(done.stdout)
    assert len(tasks) == 2
    for task in tasks:
        assert task["nvrx"] == {"NVRX_AGENT_SOCKET": listeners.template}, "passed through untouched"
    done = _run(cluster, ["srun", "-N1", "-t1", "--quiet", sys.executable, "-c", TASK_SCRIPT])
    assert done.returncode == 0
    assert _task_lines(done.stdout)[0]["nvrx"] == {}
    time.sleep(2)
    assert listeners.messages() == []


def test_site_template_from_plugstack(cluster):
    done = _run(cluster, ["srun", "--nvrx", "-N2", "-n2", "-t1", "--quiet", sys.executable, "-c",
                          TASK_SCRIPT])
    assert done.returncode == 0, "no agent at the plugstack path: the job still runs"
    for task in _task_lines(done.stdout):
        node, job = task["node"], str(task["job"])
        socket_path = cluster.state_dir / "run" / node / f"agent-{job}.sock"
        assert task["nvrx"]["NVRX_AGENT_SOCKET"] == str(socket_path)
        assert task["nvrx"]["NVRX_BB_DIR"] == str(cluster.state_dir / "bb" / node / job)
        assert task["nvrx"]["NVRX_NODE"] == node


def test_fails_open_when_nobody_listens(cluster, short_dir):
    started = time.monotonic()
    done = _run(cluster, ["srun", "--nvrx", "-N2", "-n4", "-t1", "--quiet", "true"],
                NVRX_AGENT_SOCKET=str(short_dir / "nobody" / "%n.sock"))
    assert done.returncode == 0
    assert time.monotonic() - started < 30
    assert "nvrx" not in done.stderr


def test_fails_open_when_the_agent_never_accepts(cluster, short_dir):
    """A listener with a full backlog: a send gives up after timeout_ms=500, then the step stops trying."""
    path = short_dir / "stuck.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(0)
    clients = []
    try:
        while True:  # fill the accept queue
            client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            client.setblocking(False)
            try:
                client.connect(str(path))
            except BlockingIOError:
                client.close()
                break
            clients.append(client)
        started = time.monotonic()
        done = _run(cluster, ["srun", "--nvrx", "-N1", "-n2", "-t1", "--quiet", "true"],
                    NVRX_AGENT_SOCKET=str(path))
        assert done.returncode == 0
        assert time.monotonic() - started < 30
    finally:
        for client in clients:
            client.close()
        server.close()


def test_sbatch_option_reaches_the_inner_srun(cluster, listeners, short_dir):
    inner = ["srun", "-N2", "-n2", "-t1", "--quiet", sys.executable, "-c", TASK_SCRIPT]
    out = short_dir / "job.out"
    done = _run(cluster, ["sbatch", "--nvrx", "--wait", "-N2", "-t1", "-o", str(out), "--parsable",
                          "--wrap", subprocess.list2cmdline(inner)], NVRX_AGENT_SOCKET=listeners.template)
    assert done.returncode == 0, out.read_text() if out.exists() else ""
    job = int(done.stdout.strip().split(";")[0])
    tasks = {t["rank"]: t for t in _task_lines(out.read_text())}
    assert sorted(tasks) == [0, 1]
    step = tasks[0]["step"]

    def complete(messages) -> bool:
        return (len(_of_type(messages, "register", job, step)) >= 2
                and len(_of_type(messages, "register", job, "batch")) >= 1)

    messages = listeners.wait_for(complete)
    registers = _of_type(messages, "register", job, step)
    assert sorted(m["rank"] for _, m in registers) == [0, 1]
    for arrived_on, msg in registers:
        task = tasks[msg["rank"]]
        # The batch step exported an NVRX_AGENT_SOCKET expanded for its own node; the inner step re-expands.
        assert arrived_on == msg["node"] == task["node"]
        assert task["nvrx"]["NVRX_AGENT_SOCKET"] == str(listeners.directory / f"{task['node']}.sock")
        assert msg["pid"] == task["pid"]
    assert len(_of_type(messages, "register", job, "batch")) == 1


PROBE_SCRIPT = """
import asyncio, os
from nvrx_hpc.launcher.evidence import quick_health
from nvrx_hpc.slurm.hostlist import expand
other = [n for n in expand(os.environ["SLURM_JOB_NODELIST"]) if n != os.environ["SLURMD_NODENAME"]][0]
probe = asyncio.run(quick_health(other, dict(os.environ)))
print("probe reachable:", probe.reachable, probe.detail)
"""


def test_the_launchers_health_probe_does_not_inherit_sbatch_nvrx(cluster, listeners, short_dir):
    """The launcher's health probe in an `sbatch --nvrx` job: its task must not register with the node's agent
    as rank 0 (the agent's next stop would kill it: the probe then reads "exited 143" and the node looks
    unreachable). The batch step still registers, so the listeners were there to hear the probe."""
    out = short_dir / "job.out"
    done = _run(cluster, ["sbatch", "--nvrx", "--wait", "-N2", "-t2", "-o", str(out), "--parsable",
                          "--wrap", subprocess.list2cmdline([sys.executable, "-c", PROBE_SCRIPT])],
                NVRX_AGENT_SOCKET=listeners.template)  # fmt: skip
    text = out.read_text() if out.exists() else ""
    assert done.returncode == 0 and "probe reachable: True" in text, text
    job = int(done.stdout.strip().split(";")[0])
    messages = listeners.wait_for(lambda got: len(_of_type(got, "register", job, "batch")) >= 1)
    assert len(_of_type(messages, "register", job, "batch")) == 1
    time.sleep(1)  # a late register from the probe step would have arrived by now
    steps = {m["step"] for _, m in listeners.messages() if m["job"] == job and m["type"] == "register"}
    assert steps == {"batch"}, listeners.messages()


def _conf_with_plugstack(cluster, tmp_path: Path, plugin_args: str) -> Path:
    plugstack = tmp_path / "plugstack.conf"
    plugstack.write_text(f"required {cluster.spank_plugin} {plugin_args}\n")
    lines = [line for line in cluster.conf_path.read_text().splitlines()
             if not line.strip().lower().startswith("plugstackconfig")]
    conf = tmp_path / "slurm.conf"
    conf.write_text("\n".join([*lines, f"PlugStackConfig={plugstack}", ""]))
    return conf


@pytest.mark.parametrize(
    ("bad_arg", "says"),
    [
        ("bogus=1", "unknown key 'bogus'"),
        ("timeout_ms=abc", "bad value for key 'timeout_ms'"),
        ("timeout_ms=0", "bad value for key 'timeout_ms'"),
        ("default=maybe", "bad value for key 'default'"),
        ("agent_socket=relative/%n.sock", "bad value for key 'agent_socket'"),
        ("bb_dir=/x/%q", "bad value for key 'bb_dir'"),
    ],
)
@pytest.mark.parametrize("command", ["srun", "sbatch"])
def test_bad_plugstack_line_refuses_to_run(cluster, tmp_path, bad_arg, says, command):
    conf = _conf_with_plugstack(cluster, tmp_path, bad_arg)
    argv = ["srun", "-N1", "-t1", "true"] if command == "srun" else ["sbatch", "-t1", "--wrap", "true"]
    done = _run(cluster, argv, SLURM_CONF=str(conf))
    assert done.returncode != 0
    assert f"nvrx: plugstack.conf: {says}" in done.stderr


def test_bad_health_value_is_refused(cluster):
    done = _run(cluster, ["srun", "--nvrx-health=fast", "-N1", "-t1", "true"])
    assert done.returncode != 0
    assert "nvrx: invalid --nvrx-health value 'fast': expected off, quick or full" in done.stderr


@pytest.mark.parametrize("command", ["srun", "sbatch"])
def test_bad_user_socket_template_is_refused_before_anything_runs(cluster, command):
    argv = (["srun", "--nvrx", "-N1", "-t1", "true"] if command == "srun"
            else ["sbatch", "--nvrx", "-t1", "--wrap", "true"])
    done = _run(cluster, argv, NVRX_AGENT_SOCKET="/tmp/%z.sock")
    assert done.returncode != 0
    assert "nvrx: environment variable NVRX_AGENT_SOCKET: '/tmp/%z.sock': unknown escape '%z'" in done.stderr
