"""Round 21's rules, one small case each: srun's tasks under DeepSpeed's per-node launcher, and a launcher's
SIGKILL placed on the host srun reports `Out Of Memory`."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

_MAPPING = ("[2023-02-03 02:41:12,903] [INFO] [launch.py:161:main] global_rank_mapping=defaultdict(<class 'list'>, "
            "{'gpu-c03': [0, 1, 2, 3], 'gpu-c04': [4, 5, 6, 7]})")


def test_a_cgroup_oom_under_deepspeeds_per_node_launcher_names_the_killed_rank_not_srun_task(tmp_path):
    out = [_MAPPING, _MAPPING,
           "slurmstepd: error: Detected 1 oom_kill event in StepId=3318406.0. Some of the step tasks have been OOM "
           "Killed.",
           "[2023-02-03 03:17:53,901] [ERROR] [launch.py:324:sigkill_handler] ['python', '-u', 'train.py', "
           "'--local_rank=3'] exits with return code = -9",
           "srun: error: gpu-c04: task 1: Out Of Memory",
           "srun: error: gpu-c03: task 0: Exited with exit code 250"]
    v = analyze_run(write_run(tmp_path, {"slurm-3318406.out": out})).verdict
    assert v.category is Category.HOST
    assert (v.culprit.ranks, v.culprit.nodes) == ((7,), ("gpu-c04",))
