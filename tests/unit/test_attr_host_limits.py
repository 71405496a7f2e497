"""Host resources that run out: a host OOM kill after the job ran for hours is restartable (a restart
from its checkpoints makes progress), one minutes in is the job's demand (stop); a file system that
several ranks find full is the shared storage's state (restartable, no rank named), one writer's full
disk or an exceeded quota is the job's own (stop, the writer named). 2 nodes x 2 ranks, `srun --label`
output and a syslog `<host>.kern.log` per node."""

from __future__ import annotations

from pathlib import Path

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Action, Category

HOSTS = ["cn-01", "cn-02"]  # ranks 0-1 on cn-01, 2-3 on cn-02


def _job(tmp_path: Path, lines: list[str], kern: dict[str, list[str]] | None = None) -> Path:
    run = tmp_path / "5150"
    run.mkdir()
    started = [f"{r}: [2024-03-14 02:10:0{r}] rank {r} started on {HOSTS[r // 2]}" for r in range(4)]
    (run / "slurm-5150.out").write_text("\n".join(started + lines) + "\n")
    for host, kl in (kern or {}).items():
        (run / f"{host}.kern.log").write_text("\n".join(kl) + "\n")
    return run


def _oom(tmp_path: Path, at: str) -> Path:
    kern = {"cn-02": [f"Mar 14 {at} cn-02 kernel: Memory cgroup out of memory: Killed process 7702 (python) "
                      "total-vm:105552048kB, anon-rss:64063852kB, file-rss:0kB, shmem-rss:0kB"]}  # fmt: skip
    lines = ["srun: error: cn-02: task 3: Killed", "srun: error: cn-01: tasks 0-1: Terminated"]
    return _job(tmp_path, lines, kern)


def test_a_host_oom_kill_hours_into_the_run_is_restartable_without_excluding_the_node(tmp_path):
    v = analyze_run(_oom(tmp_path, "05:31:40")).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (3,)
    assert v.restartable and v.action is Action.RETRY and v.exclude_nodes == ()


def test_a_host_oom_kill_minutes_into_the_run_stops(tmp_path):
    v = analyze_run(_oom(tmp_path, "02:16:40")).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (3,)
    assert not v.restartable and v.action is Action.STOP


def _enospc(rank: int, what: str = "No space left on device") -> list[str]:
    return [f"{rank}: [rank{rank}]: Traceback (most recent call last):",
            f'{rank}: [rank{rank}]:   File "/w/ckpt.py", line 57, in save_checkpoint',
            f"{rank}: [rank{rank}]: OSError: [Errno 28] {what}: '/lustre/ckpt/__{rank}_0.distcp'"]  # fmt: skip


def test_a_file_system_several_ranks_find_full_is_shared_storage_and_restartable(tmp_path):
    v = analyze_run(_job(tmp_path, _enospc(0) + _enospc(2))).verdict
    assert v.category is Category.HOST and v.restartable and v.action is Action.RETRY
    assert v.culprit.ranks == () and v.culprit.nodes == ()


def test_one_writer_that_fills_its_disk_is_named_and_stops(tmp_path):
    v = analyze_run(_job(tmp_path, _enospc(0))).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (0,)
    assert not v.restartable and v.action is Action.STOP


def test_an_exceeded_quota_stops_however_many_ranks_hit_it(tmp_path):
    lines = _enospc(0, "Disk quota exceeded") + _enospc(2, "Disk quota exceeded")
    v = analyze_run(_job(tmp_path, lines)).verdict
    assert v.category is Category.HOST and not v.restartable and v.action is Action.STOP


def test_a_stamp_weeks_older_than_the_oom_does_not_make_the_run_long(tmp_path):
    run = _oom(tmp_path, "02:16:40")
    (run / "env-notes.txt").write_text("[2024-01-20 09:00:00] conda env built\n")
    v = analyze_run(run).verdict
    assert not v.restartable and v.action is Action.STOP
