"""Round 9's rules: a step cancel srun caused after a task's own exit is no cause, link losses on several
hosts at once are the fabric's, a lost node Slurm reports not responding, a Ray task error names its
worker, a start-up banner that maps a host to a range of ranks."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Action, Category

_CANCEL = "slurmstepd: error: *** STEP 77.0 ON gq1 CANCELLED AT 2024-10-30T02:41:12 ***"


def test_a_step_cancel_after_a_tasks_own_exit_is_srun_teardown_not_the_scheduler(tmp_path):
    out = ["srun: error: gq3: task 5: Exited with exit code 1", "srun: Terminating StepId=77.0", _CANCEL,
           "srun: error: gq1: tasks 0-2: Terminated", "srun: error: gq3: task 3-4: Terminated"]
    v = analyze_run(write_run(tmp_path, {"job.out": out, "job.err": ["UserWarning: something", _CANCEL]})).verdict
    assert v.category is Category.UNKNOWN and v.action is Action.RETRY and v.culprit.nodes == ()


def test_a_step_cancel_before_any_task_exit_stays_a_users_cancel(tmp_path):
    out = [_CANCEL, "srun: error: gq3: task 5: Exited with exit code 1", "srun: error: gq1: tasks 0-4: Terminated"]
    v = analyze_run(write_run(tmp_path, {"job.out": out})).verdict
    assert v.category is Category.SCHEDULER


def _link(host: str, second: int) -> list[str]:
    return [f"Jan 09 14:06:{second:02d} {host} kernel: mlx5_core 0000:1a:00.0 ens1f0np0: Link down",
            f"Jan 09 14:06:{second + 7:02d} {host} kernel: mlx5_core 0000:1a:00.0 ens1f0np0: Link up"]


def test_links_lost_on_several_hosts_at_once_name_the_fabric_not_a_node(tmp_path):
    files = {f"rc-a0{i}.kern.log": _link(f"rc-a0{i}", 50 - i) for i in range(1, 4)}
    v = analyze_run(write_run(tmp_path, files)).verdict
    assert v.category is Category.NETWORK and v.culprit.nodes == () and v.action is Action.RETRY


def test_a_link_lost_on_one_host_still_names_it(tmp_path):
    v = analyze_run(write_run(tmp_path, {"rc-a02.kern.log": _link("rc-a02", 50)})).verdict
    assert v.culprit.nodes == ("rc-a02",) and v.action is Action.EXCLUDE_AND_RETRY


_NODE_FAIL = ("slurmstepd: error: *** STEP 9.0 ON cx1 CANCELLED AT 2024-09-02T18:29:31 DUE TO NODE FAILURE, "
              "SEE SLURMCTLD LOG FOR DETAILS ***")


def _banners(nodes: int) -> list[str]:
    return [f"{r}: | distributed init (rank {r}): env://, gpu {r % 2}, host cx{r // 2 + 1}" for r in range(2 * nodes)]


def test_a_node_failure_naming_a_survivor_names_the_node_sinfo_reports_not_responding(tmp_path):
    out = [*_banners(3), _NODE_FAIL]
    sinfo = ["$ sinfo -R", "REASON               USER      TIMESTAMP           NODELIST",
             "Not responding       slurm     2024-09-02T18:03:41 cx[3,9]"]
    v = analyze_run(write_run(tmp_path, {"job.out": out, "sinfo.txt": sinfo})).verdict
    assert v.category is Category.HOST and v.culprit.nodes == ("cx3",) and v.culprit.ranks == (4, 5)


def test_a_node_failure_naming_a_survivor_names_the_node_srun_no_longer_lists(tmp_path):
    out = [*_banners(3), _NODE_FAIL, "srun: error: cx1: tasks 0-1: Killed", "srun: error: cx3: tasks 4-5: Killed"]
    v = analyze_run(write_run(tmp_path, {"job.out": out})).verdict
    assert v.culprit.nodes == ("cx2",) and v.culprit.ranks == (2, 3) and v.action is Action.EXCLUDE_AND_RETRY


def test_a_ray_task_error_names_its_workers_rank_and_the_host_that_worker_printed(tmp_path):
    log = [f"(TorchTrainer pid=100, ip=10.0.0.1) - (node_id=ab, ip=10.0.0.{1 + r // 2}, pid={200 + r}) world_rank={r}, "
           f"local_rank={r % 2}, node_rank={r // 2}" for r in range(4)]
    log += [f"(RayTrainWorker pid={200 + r}, ip=10.0.0.{1 + r // 2}) [setup] socket.gethostname()=rn-{r // 2}"
            for r in range(4)]
    log += ["Traceback (most recent call last):", "  File \"x.py\", line 1, in f",
            "ray.exceptions.RayTaskError(KeyError): ray::_Inner.train() (pid=100, ip=10.0.0.1, repr=TorchTrainer)",
            "  File \"y.py\", line 2, in g",
            "ray.exceptions.RayTaskError(KeyError): ray::_RayTrainWorker__execute.get_next() (pid=203, ip=10.0.0.2)",
            "  File \"train.py\", line 214, in train_loop_per_worker", "KeyError: 'hard_negative'"]
    v = analyze_run(write_run(tmp_path, {"driver.log": log})).verdict
    assert v.category is Category.APPLICATION and v.culprit.ranks == (3,) and v.culprit.nodes == ("rn-1",)


def test_a_per_node_banner_with_a_range_of_global_ranks_places_the_silent_rank(tmp_path):
    timeout = ("[rank{r}]:[E306 04:49:30.8 ProcessGroupNCCL.cpp:632] [Rank {r}] Watchdog caught collective operation "
               "timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=1800000) ran for "
               "1800324 milliseconds before timing out.")
    out = [f"[gx-20{n}] torchrun node_rank={n}: local ranks 0-3 -> global ranks {4 * n}-{4 * n + 3}" for n in range(3)]
    out += [timeout.format(r=r) for r in range(12) if r != 6]
    v = analyze_run(write_run(tmp_path, {"job.out": out})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (6,) and v.culprit.nodes == ("gx-201",)
