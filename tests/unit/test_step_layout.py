"""The training step's layout (launcher.step_layout): with in-process restart the spare nodes run in the step,
every task there a spare, and the ranks learn which nodes those are; without it they wait outside."""

from __future__ import annotations

from pathlib import Path

from nvrx_hpc.inprocess.settings import InprocessSettings
from nvrx_hpc.launcher.settings import InprocessRun, RunSettings
from nvrx_hpc.launcher.step_layout import layout_step
from nvrx_hpc.launcher.steps import training_step_argv


def _layout(tmp_path: Path, inprocess: bool):
    s = RunSettings(command=["python", "train.py"], run_dir=tmp_path, tasks_per_node=2,
                    inprocess=InprocessRun(enabled=inprocess, spare_ranks=1 if inprocess else 0))
    return layout_step(s, active=["n4", "n1"], spares=["n2"], restart=3, master_addr="10.0.0.1",
                       socket_template="/tmp/a-%n.sock", plugin=False, store="h:5" if inprocess else None)


def test_in_process_the_spare_nodes_run_spare_tasks_in_the_step(tmp_path):
    layout = _layout(tmp_path, inprocess=True)
    assert layout.nodes == ["n1", "n2", "n4"] and layout.training == ["n1", "n4"] and layout.width == 3
    assert layout.env["NVRX_IP_SPARE_NODES"] == "1" and layout.env["NVRX_IP_WORLD"] == "4"
    argv = training_step_argv(layout.spec)
    assert "--no-kill" in argv and "--nodes=3" in argv and "--ntasks=9" in argv
    # what the ranks make of it: n2's three tasks all wait, the ranks are on n1 and n4
    env = {**layout.env, "SLURM_PROCID": "0"}
    assert InprocessSettings.from_env(env).first_plan() == {0: 0, 1: 1, 6: 2, 7: 3}


def test_without_in_process_the_spare_nodes_stay_out(tmp_path):
    layout = _layout(tmp_path, inprocess=False)
    assert layout.nodes == layout.training == ["n1", "n4"] and layout.width == 2
    argv = training_step_argv(layout.spec)
    assert "--no-kill" not in argv and "NVRX_IP_SPARE_NODES" not in layout.env
