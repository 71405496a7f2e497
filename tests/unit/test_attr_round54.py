"""Rules from rounds 54 and 55 of blind cases: srun unable to launch the step on one node is the scheduler's and names
that node; /dev/shm full in every pod names no pod; the rank the kernel's OOM killer silenced is the one the others
wait on."""

from __future__ import annotations

from _attr_helpers import write_run

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category, Verdict


def _verdict(tmp_path, files: dict[str, list[str]]) -> Verdict:
    return analyze_run(write_run(tmp_path, files)).verdict


def test_a_step_srun_could_not_launch_on_one_node_names_that_node(tmp_path):
    lines = [
        "Here is the list of hosts: cn117 cn124",
        "srun: error: Task launch for 5512.1 failed on node cn124: Job credential expired",
        "srun: error: Application launch failed: Job credential expired",
        "RuntimeError: Timed out initializing process group in store based barrier on rank: 2, for key: "
        "store_based_barrier_key:1 (world_size=8, worker_count=4, timeout=0:30:00)",
        "srun: error: cn117: task 0: Exited with exit code 1",
    ]
    v = _verdict(tmp_path, {"slurm-5512.out": lines})
    assert v.category is Category.SCHEDULER and v.restartable
    assert v.culprit.nodes == ("cn124",)


def test_dev_shm_full_in_every_pod_names_no_pod(tmp_path):
    def pod(name: str) -> list[str]:
        return [f"[rank0]:[2026-01-13 09:20:58] {name}:935:985 [0] misc/shmutils.cc:87 NCCL WARN Error: failed to "
                "extend /dev/shm/nccl-mL7jru to 9637892 bytes, error: No space left on device (28)"]  # fmt: skip

    files = {"slice-job-0-0.log": pod("ttn-slice-job-0-0"), "slice-job-0-1.log": pod("ttn-slice-job-0-1")}
    v = _verdict(tmp_path, files)
    assert v.category is Category.HOST and v.restartable is False and v.culprit.nodes == ()


def test_the_rank_an_oom_kill_silenced_is_named(tmp_path):
    kern = ["[Wed Mar 23 23:53:30 2022] Out of memory: Killed process 28114 (python) total-vm:336579108kB, "
            "anon-rss:256747405kB, file-rss:0kB, shmem-rss:0kB, UID:1000 pgtables:512000kB oom_score_adj:0"]
    log = [f"[E ProcessGroupNCCL.cpp:587] [Rank {r}] Watchdog caught collective operation timeout: "
           "WorkNCCL(OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800487 milliseconds before timing out."
           for r in range(1, 8)]  # fmt: skip
    files = {"asr-gpu07.dmesg-T.txt": kern, "train.asr-gpu07.log": ["rank 0 world 8 host asr-gpu07", *log]}
    v = _verdict(tmp_path, files)
    assert v.category is Category.HOST and v.culprit.nodes == ("asr-gpu07",) and v.culprit.ranks == (0,)
