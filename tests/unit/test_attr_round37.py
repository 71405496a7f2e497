"""Rules from round 37 of blind cases: Open MPI losing a node's daemon names that node (and its ranks from the
display map) unless a network failure came first; a heap corrupted alike on two nodes is the code's; the first rank
to report an NVLink-contained CUDA error is the faulty one; a py-spy dump's command line gives its rank; Ray's
node listing, a Ray launcher's `(workerN, rank=N, ..., ip=A)` prefix and a Kubernetes pod's name place lines on
nodes; `loss nan` without a colon and detectron2's `Training has diverged` are numerical."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category

_MAP = [" ========================   JOB MAP   ========================"]
for _node, _first in (("ip-10-15-20-31", 0), ("ip-10-15-20-17", 4)):
    _MAP.append(f" Data for node: {_node}\tNum slots: 4\tMax slots: 0\tNum procs: 4")
    _MAP += [f" \tProcess OMPI jobid: [51377,1] App: 0 Process rank: {r} Bound: N/A" for r in range(_first, _first + 4)]
_MAP.append(" =============================================================")
_LOST = ["ORTE has lost communication with its daemon located on node:", "",
         "  hostname:  ip-10-15-20-17.ec2.internal", "",
         "This is usually due to either a failure of the TCP network"]


def test_open_mpi_losing_a_daemon_names_its_node_and_the_ranks_it_ran(tmp_path):
    v = analyze_run(write_run(tmp_path, {"hvd.o40172": ["+ mpirun -np 8 --display-map python train.py", *_MAP,
                                                        "Train Epoch #5:  61%", *_LOST]})).verdict
    assert v.category is Category.HOST and v.signature == "mpi_daemon_lost"
    assert v.culprit.nodes == ("ip-10-15-20-17",) and v.culprit.ranks == (4, 5, 6, 7) and v.restartable is True


def test_a_network_failure_before_the_daemon_was_lost_is_the_cause(tmp_path):
    lines = ["[1,7]<stdout>:w-2:83:2526 [3] misc/socket.cc:503 NCCL WARN Net : Call to recv from 100.64.3.9<51424> "
             "failed : Connection timed out", "ORTE has lost communication with a remote daemon."]
    v = analyze_run(write_run(tmp_path, {"launcher.log": lines})).verdict
    assert v.category is Category.NETWORK


def _heap(host: str, rank: int) -> list[str]:
    return [f"{rank}: free(): corrupted unsorted chunks", f"{rank}: [{host}:6187] *** Process received signal ***",
            f"{rank}: [{host}:6187] Signal: Aborted (6)", f"srun: error: {host}: task {rank}: Aborted (core dumped)"]


def test_a_heap_corrupted_alike_on_two_nodes_is_the_codes_and_not_restartable(tmp_path):
    v = analyze_run(write_run(tmp_path, {"slurm-1.out": [*_heap("gbr2-s02", 1), *_heap("gbr3-s02", 7)]})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == () and v.culprit.nodes == ()
    assert v.restartable is False


def test_a_heap_corrupted_on_one_node_keeps_its_place(tmp_path):
    v = analyze_run(write_run(tmp_path, {"slurm-1.out": _heap("gbr2-s02", 1)})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.nodes == ("gbr2-s02",)


_CONTAINED = "torch.AcceleratorError: CUDA error: Invalid access of peer GPU memory over nvlink or a hardware error"


def test_the_first_rank_to_meet_an_nvlink_contained_error_is_the_faulty_one(tmp_path):
    lines = [f"2025-09-05 14:02:10 [launcher] task {t} host=gb-r10-n0{t + 2} ranks={4 * t}-{4 * t + 3}"
             for t in range(4)]
    lines += [f"2025-09-05 17:34:36.549 [task 3 rank 13] {_CONTAINED}",
              f"2025-09-05 17:34:36.812 [task 2 rank 9] {_CONTAINED}",
              f"2025-09-05 17:34:36.903 [task 3 rank 12] {_CONTAINED}",
              f"2025-09-05 17:34:37.655 [task 0 rank 2] {_CONTAINED}"]
    v = analyze_run(write_run(tmp_path, {"train.log": lines})).verdict
    assert v.category is Category.GPU_HARDWARE and v.culprit.ranks == (13,) and v.culprit.nodes == ("gb-r10-n05",)


def test_reports_within_a_fraction_of_a_second_name_every_reporter(tmp_path):
    lines = [f"2025-09-05 17:34:36.549 [task 3 rank 13] {_CONTAINED}",
             f"2025-09-05 17:34:36.601 [task 2 rank 9] {_CONTAINED}"]
    v = analyze_run(write_run(tmp_path, {"train.log": lines})).verdict
    assert set(v.culprit.ranks) == {9, 13}


_TIMEOUT = ("[E ProcessGroupNCCL.cpp:737] [Rank {r}] Watchdog caught collective operation timeout: "
            "WorkNCCL(SeqNum=98117, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1803390 milliseconds")


def test_a_pyspy_dump_whose_command_line_names_its_rank_shows_the_rank_outside_the_collective(tmp_path):
    def dump(pid: int, rank: int, frames: list[str]) -> list[str]:
        return [f"Process {pid}: /env/bin/python -u train.py --distributed-world-size 4 --distributed-rank {rank}",
                "Python v3.9.13 (/env/bin/python3.9)", "", f'Thread 0x7FA6E7C0{rank} (idle): "MainThread"', *frames]

    stacks = [*dump(418822, 0, ["    get (queue.py:180)", "    __next__ (fairseq/data/iterators.py:648)"]), "",
              *dump(418823, 1, ["    all_reduce (torch/distributed/distributed_c10d.py:1322)"])]
    run = {"slurm-882140.out": [_TIMEOUT.format(r=r) for r in (1, 2, 3)], "pyspy_rank0.txt": stacks}
    v = analyze_run(write_run(tmp_path, run)).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (0,)


def test_rays_node_listing_and_a_launchers_ray_prefix_place_the_error(tmp_path):
    listing = ["$ ray list nodes", "Table:", "------------------------------",
               "    NODE_ID     NODE_IP       IS_HEAD_NODE    STATE    NODE_NAME      RESOURCES_TOTAL",
               " 0  9d0f6be7a1  10.42.1.17    True            ALIVE    dgx-b04        CPU: 112.0",
               " 1  c1e4a2f7d8  10.42.3.242   False           ALIVE    dgx-b07        CPU: 112.0"]
    driver = ["(worker8, rank=8, pid=8924, ip=10.42.3.242) Traceback (most recent call last):",
              '(worker8, rank=8, pid=8924, ip=10.42.3.242)   File "/opt/megatron/gpt_dataset.py", line 484, in build',
              "(worker8, rank=8, pid=8924, ip=10.42.3.242) FileNotFoundError: [Errno 2] No such file or directory: "
              "'/data/local_nvme/cache/doc_index.npy'"]
    v = analyze_run(write_run(tmp_path, {"ray_list_nodes.txt": listing, "driver.log": driver})).verdict
    assert v.category is Category.APPLICATION and v.culprit.ranks == (8,) and v.culprit.nodes == ("dgx-b07",)


def test_a_pods_name_is_the_node_it_runs_on(tmp_path):
    pods = ["NAME                    READY   STATUS   RESTARTS   AGE   IP            NODE             NOMINATED NODE",
            "bert-ft-0621-master-0   0/1     Error    0          14m   10.8.3.21     gke-pool-7qnd    <none>",
            "bert-ft-0621-worker-0   0/1     Error    0          14m   10.8.5.14     gke-pool-x2lp    <none>"]
    err = ["bert-ft-0621-worker-0:58:58 [1] NCCL INFO Channel 00 : 5[5000] -> 6[6000] via SHM/direct/direct",
           "bert-ft-0621-worker-0:58:58 [1] include/shm.h:28 NCCL WARN Call to posix_fallocate failed : No space "
           "left on device"]
    v = analyze_run(write_run(tmp_path, {"kubectl_get_pods.txt": pods, "worker-0.log": err})).verdict
    assert v.category is Category.HOST and "gke-pool-x2lp" in v.culprit.nodes


def test_loss_nan_without_a_colon_and_a_diverged_training_are_numerical(tmp_path):
    nan = ["iter 2020: loss 3.91, time 1990.47ms", "iter 2030: loss nan, time 1990.71ms",
           "slurmstepd: error: *** JOB 5530217 ON v100-g12 CANCELLED AT 2023-02-08T16:47:03 ***"]
    assert analyze_run(write_run(tmp_path / "a", {"slurm-1.out": nan})).verdict.category is Category.NUMERICAL
    diverged = ["FloatingPointError: Predicted boxes or scores contain Inf/NaN. Training has diverged."]
    assert analyze_run(write_run(tmp_path / "b", {"slurm-2.out": diverged})).verdict.category is Category.NUMERICAL


def test_loss_info_is_not_a_loss_of_inf(tmp_path):
    lines = ["step 10 | loss info: see tensorboard", "step 11 | loss information logged"]
    assert analyze_run(write_run(tmp_path, {"slurm-1.out": lines})).verdict.category is not Category.NUMERICAL
