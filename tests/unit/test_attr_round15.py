"""Round 15's rules, one small case each: srun's OOM line naming several tasks, a step cancel after srun saw
tasks end by a signal of their own, and Ray Train's wrapper error."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category


def test_sruns_oom_line_names_every_task_it_lists(tmp_path):
    out = ["slurmstepd: error: Detected 3 oom_kill events in StepId=440575.0. Some of the step tasks have been OOM "
           "Killed.", "srun: error: nid001277: tasks 13-15: Out Of Memory", "srun: Terminating StepId=440575.0",
           "srun: error: nid001276: tasks 8-11: Terminated", "srun: error: nid001277: task 12: Terminated"]
    v = analyze_run(write_run(tmp_path, {"slurm-440575.out": out})).verdict
    assert v.category is Category.HOST and (v.culprit.ranks, v.culprit.nodes) == ((13, 14, 15), ("nid001277",))


def test_a_step_cancel_after_tasks_killed_by_a_signal_of_their_own_is_teardown(tmp_path):
    out = ["rank 8/12 host c014 gpu 0", "srun: error: c014: tasks 8-11: Killed",
           "slurmstepd: error: *** STEP 127441.0 ON c012 CANCELLED AT 2022-05-27T11:37:57 ***",
           "srun: error: c013: tasks 4-7: Terminated", "srun: error: c012: tasks 0-3: Terminated"]
    v = analyze_run(write_run(tmp_path, {"slurm-127441.out": out})).verdict
    assert v.category is Category.UNKNOWN and v.restartable


def test_ray_trains_wrapper_error_is_not_the_cause(tmp_path):
    out = ["(raylet, ip=10.3.0.12) A worker died or was killed while executing a task by an unexpected system error.",
           "ray.exceptions.RayActorError: The actor died unexpectedly before finishing this task.",
           "ray.train.base_trainer.TrainingFailedError: The Ray Train run failed. Please inspect the previous error "
           "messages for a cause."]
    v = analyze_run(write_run(tmp_path, {"ray_train-66102.out": out})).verdict
    assert v.category is Category.UNKNOWN
