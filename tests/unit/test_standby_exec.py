"""Standby steps without Slurm: a real agent and launcher hub on this host's sockets, and real standby tasks
(`python -m nvrx_hpc.launcher.standby_exec`) that wait with the agent and run a script at their go. The
srun side is in tests/cluster/test_standby.py."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from nvrx_hpc.agent.daemon import Agent, AgentSettings
from nvrx_hpc.core import messages as m
from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.wire import new_token, save_token
from nvrx_hpc.launcher import idle_imports
from nvrx_hpc.launcher.hub import AgentHub
from nvrx_hpc.launcher.settings import InprocessRun, RunSettings
from nvrx_hpc.launcher.standby_exec import python_command

TOKEN = new_token()

SCRIPT = """
import json, os, sys
print("hello from the script")
sys.stderr.write("a warning\\nwithout its end")
keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "SLURM_PROCID", "MASTER_PORT", "NVRX_RESTART_COUNT")
json.dump({"name": __name__, "argv": sys.argv, "env": {k: os.environ.get(k) for k in keys}}, open(sys.argv[1], "w"))
"""


@pytest.mark.parametrize("command, kind", [
    (["python", "train.py", "--steps", "3"], ("train.py", None, ("--steps", "3"), ())),
    (["/usr/bin/python3.11", "-u", "-X", "dev", "t.py"], ("t.py", None, (), ("-u", "-X", "dev"))),
    (["python", "-m", "pkg.train", "-x"], (None, "pkg.train", ("-x",), ())),
])  # fmt: skip
def test_a_python_script_or_module_command_can_wait_in_a_standby_step(command, kind):
    found = python_command(command)
    assert (found.script, found.module, found.args, found.flags) == kind


@pytest.mark.parametrize(
    "command",
    [["bash", "train.sh"], ["python", "-c", "print(1)"], ["python"], ["python", "-m"], ["torchrun", "train.py"], []],
)
def test_other_commands_cannot(command):
    assert python_command(command) is None


def test_standby_is_refused_for_a_command_it_cannot_run_and_beside_inprocess(tmp_path):
    with pytest.raises(ConfigError, match="python SCRIPT"):
        RunSettings(command=["bash", "train.sh"], run_dir=tmp_path, standby=True).validate(2)
    with pytest.raises(ConfigError, match="--inprocess"):
        RunSettings(command=["python", "t.py"], run_dir=tmp_path, standby=True,
                    inprocess=InprocessRun(enabled=True)).validate(2)  # fmt: skip
    RunSettings(command=["python", "t.py"], run_dir=tmp_path, standby=True).validate(2)


async def _agent_and_hub(tmp_path):
    hub = AgentHub(TOKEN, host="127.0.0.1", job="7")
    port = await hub.start()
    settings = AgentSettings(node="n1", job="7", socket_path=tmp_path / "a.sock", launcher_host="127.0.0.1",
                             launcher_port=port, token=TOKEN, status_s=0.2)  # fmt: skip
    agent = Agent(settings)
    task = asyncio.get_running_loop().create_task(agent.run())
    assert not await hub.wait_for_agents(["n1"], timeout=5)
    return hub, agent, task


def _standby_task(tmp_path, local_id: int, out: str, restart: int = 1, **extra_env: str) -> subprocess.Popen:
    token = tmp_path / "token"
    if not token.exists():
        save_token(token, TOKEN)
    (tmp_path / "script.py").write_text(SCRIPT)
    env = {**os.environ, "NVRX_AGENT_SOCKET": str(tmp_path / "a.sock"), "NVRX_TOKEN_FILE": str(token),
           "SLURMD_NODENAME": "n1", "SLURM_LOCALID": str(local_id), "SLURM_PROCID": str(5 + local_id),
           "NVRX_STANDBY_PRELOAD": "json", **extra_env}  # fmt: skip
    argv = [sys.executable, "-m", "nvrx_hpc.launcher.standby_exec", "--restart", str(restart), "--",
            sys.executable, str(tmp_path / "script.py"), str(tmp_path / out)]  # fmt: skip
    return subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


async def _until(test, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not test():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def test_waiting_tasks_become_ranks_at_the_go_with_their_output_labelled(tmp_path):
    """Two tasks of node n1 wait (the agent's status counts them); the go for attempt 1 on [n0, n1] with two
    tasks a node makes them ranks 2 and 3, runs the script as __main__ with its own argv, and every line
    they write, stdout or stderr, carries the rank."""

    async def scenario():
        hub, agent, task = await _agent_and_hub(tmp_path)
        tasks = [_standby_task(tmp_path, i, f"out{i}.json") for i in (0, 1)]
        await _until(lambda: hub.agents["n1"].standby.get("1") == 2)
        hub.broadcast(
            m.StandbyGo,
            restart=1,
            ranks_on=("n0", "n1"),
            env={"MASTER_PORT": "4242", "NVRX_RESTART_COUNT": "1", "LOCAL_WORLD_SIZE": "2"},
        )
        await _until(lambda: all(t.poll() is not None for t in tasks))
        hub.broadcast(m.Shutdown)
        await asyncio.wait_for(task, 5)
        await hub.close()
        return [(t.returncode, t.stdout.read().decode()) for t in tasks]

    results = asyncio.run(scenario())
    for local, (code, output) in enumerate(results):
        rank = 2 + local
        assert code == 0, output
        assert output.splitlines() == [f"{rank}: hello from the script", f"{rank}: a warning",
                                       f"{rank}: without its end"]  # fmt: skip
        seen = json.loads((tmp_path / f"out{local}.json").read_text())
        assert seen["name"] == "__main__"
        assert seen["argv"] == [str(tmp_path / "script.py"), str(tmp_path / f"out{local}.json")]
        assert seen["env"] == {
            "RANK": str(rank),
            "LOCAL_RANK": str(local),
            "WORLD_SIZE": "4",
            "NODE_RANK": "1",
            "SLURM_PROCID": str(rank),
            "MASTER_PORT": "4242",
            "NVRX_RESTART_COUNT": "1",
        }


def test_a_task_late_for_its_go_gets_it_at_once_and_one_left_behind_or_not_needed_exits(tmp_path):
    """The go for attempt 1 came before the tasks connected (they were still importing): the agent kept it.
    A task on a node the go leaves out exits 0 without running the script; so does one waiting for an
    attempt older than the last go."""

    async def scenario():
        hub, agent, task = await _agent_and_hub(tmp_path)
        hub.broadcast(m.StandbyGo, restart=1, ranks_on=("n1",), env={"LOCAL_WORLD_SIZE": "1"})
        await _until(lambda: agent.standby._last_go is not None)
        late = _standby_task(tmp_path, 0, "late.json")
        stale = _standby_task(tmp_path, 0, "stale.json", restart=0)
        await _until(lambda: late.poll() is not None and stale.poll() is not None)
        hub.broadcast(m.StandbyGo, restart=2, ranks_on=("n7",), env={})
        spare = _standby_task(tmp_path, 0, "spare.json", restart=2)
        await _until(lambda: spare.poll() is not None)
        hub.broadcast(m.Shutdown)
        await asyncio.wait_for(task, 5)
        await hub.close()
        return late, stale, spare

    late, stale, spare = asyncio.run(scenario())
    assert late.returncode == 0 and json.loads((tmp_path / "late.json").read_text())["env"]["RANK"] == "0"
    for done, out in ((stale, "stale.json"), (spare, "spare.json")):
        assert done.returncode == 0 and not (tmp_path / out).exists(), done.stdout.read()


def test_a_task_with_no_agent_to_wait_with_fails_its_step(tmp_path):
    done = _standby_task(tmp_path, 0, "none.json")
    assert done.wait(30) == 3
    assert b"cannot wait with the agent" in done.stdout.read()


RECORD_POLICY = """
import os, sys
with open(os.environ["POLICY_LOG"], "a") as out:
    out.write(f"{os.sched_getscheduler(0)}\\n")
"""


@pytest.mark.skipif(not hasattr(os, "SCHED_IDLE"), reason="no SCHED_IDLE on this platform")
@pytest.mark.parametrize("mode", ["auto", "off"])
def test_imports_run_at_idle_priority_and_the_rank_at_normal_priority(tmp_path, mode):
    """A preloaded module and the script each note the scheduling policy they run under. With `auto`, where the
    task can come back from SCHED_IDLE (root or CAP_SYS_NICE, as the tests run), the imports ran at idle
    priority and the rank trains at normal priority; with `off` both ran at normal priority."""
    (tmp_path / "policy_probe.py").write_text(RECORD_POLICY)
    log = tmp_path / "policy.log"

    async def scenario():
        hub, agent, task = await _agent_and_hub(tmp_path)
        path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH", "")) if p)
        probe = _standby_task(tmp_path, 0, "unused", NVRX_STANDBY_PRELOAD="policy_probe", POLICY_LOG=str(log),
                              PYTHONPATH=path, NVRX_STANDBY_IDLE_IMPORTS=mode)  # fmt: skip
        (tmp_path / "script.py").write_text(RECORD_POLICY)  # what the rank runs at its go
        await _until(lambda: log.exists() and len(log.read_text().split()) == 1)
        hub.broadcast(m.StandbyGo, restart=1, ranks_on=("n1",), env={"LOCAL_WORLD_SIZE": "1"})
        await _until(lambda: probe.poll() is not None)
        hub.broadcast(m.Shutdown)
        await asyncio.wait_for(task, 5)
        await hub.close()
        return probe.returncode, probe.stdout.read().decode()

    can_come_back = idle_imports._can_come_back()  # root or CAP_SYS_NICE, as the tests run in CI
    code, output = asyncio.run(scenario())
    assert code == 0, output
    at_import, as_rank = (int(v) for v in log.read_text().split())
    assert as_rank == os.SCHED_OTHER
    assert at_import == (os.SCHED_IDLE if mode == "auto" and can_come_back else os.SCHED_OTHER)


def test_an_unknown_idle_imports_mode_fails_with_its_name(tmp_path):
    bad = _standby_task(tmp_path, 0, "bad.json", NVRX_STANDBY_IDLE_IMPORTS="sometimes")
    assert bad.wait(30) == 3
    output = bad.stdout.read().decode()
    assert "NVRX_STANDBY_IDLE_IMPORTS must be one of auto, off, not 'sometimes'" in output
    assert "Traceback" not in output


LATE_IMPORTS = """
import sys, tempfile
from nvrx_hpc.launcher.standby_exec import DEFAULT_PRELOAD, _preload
_preload(list(DEFAULT_PRELOAD))
before = set(sys.modules)
import torch
from nvrx_hpc import worker
from nvrx_hpc.ckpt import AsyncCheckpointer
from nvrx_hpc.core.errors import CheckpointError  # noqa: F401 - what train_ckpt.py imports
ckpt = AsyncCheckpointer(tempfile.mkdtemp(), scheme="none")
ckpt.save({"w": torch.arange(4.0), "step": 3}, 3)
ckpt.wait()
into = {"w": torch.zeros(4), "step": 0}
assert ckpt.load(into) == 3 and into["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
late = sorted({name.split(".")[0] for name in set(sys.modules) - before} - {"torch"})
print(",".join(late))
"""


def test_the_default_preload_leaves_no_checkpoint_import_to_the_go(tmp_path):
    """What a training script of the checkpoint layer imports after its go (from `nvrx_hpc.ckpt`, whose package
    resolves its names lazily) is on the restart's path: after the default preload list, a save and a restore
    import none of our modules, pydantic or h5py (the package alone left 1.2 s of them to each go)."""
    done = subprocess.run([sys.executable, "-c", LATE_IMPORTS], capture_output=True, text=True, timeout=120,
                          cwd=tmp_path, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == ""


PRELOAD_GC = """
import gc, sys
from nvrx_hpc.launcher.standby_exec import _preload
if sys.argv[1] == "off":
    gc.disable()
_preload(["json", "no_such_module_here", "xml.dom.minidom"])
print(gc.isenabled(), gc.get_freeze_count() > 0, "xml.dom.minidom" in sys.modules)
"""


@pytest.mark.parametrize("collector, enabled_after", [("on", "True"), ("off", "False")])
def test_the_preload_runs_without_the_collector_and_freezes_what_it_loaded(collector, enabled_after):
    """The preload's objects end in the permanent generation and the collector comes back as it was, even
    after a module that cannot be imported (which is reported, not raised)."""
    done = subprocess.run([sys.executable, "-c", PRELOAD_GC, collector], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [enabled_after, "True", "True"]
    assert "cannot preload no_such_module_here: ModuleNotFoundError" in done.stderr
