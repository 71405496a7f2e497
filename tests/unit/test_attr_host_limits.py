"""Host resources that run out (resources.py): a node-local resource (a local disk, the node's whole
memory) that ran out on one node of several is that node's state (restartable, exclude it), alone it is
the job's demand (stop); a cgroup OOM kill after the job ran for hours is restartable (a restart from
its checkpoints makes progress), one minutes in is the job's demand (stop); a file system that several
ranks find full is the shared storage's state (restartable, no rank named), one writer's full shared
disk or an exceeded quota is the job's own (stop, the writer named). 2 nodes x 2 ranks, `srun --label`
output and a syslog `<host>.kern.log` per node."""

from __future__ import annotations

from pathlib import Path

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Action, Category
from nvrx_hpc.attribution.resources import file_host, sample_disks

HOSTS = ["cn-01", "cn-02"]  # ranks 0-1 on cn-01, 2-3 on cn-02


def _job(tmp_path: Path, lines: list[str], kern: dict[str, list[str]] | None = None) -> Path:
    run = tmp_path / "5150"
    run.mkdir()
    started = [f"{r}: [2024-03-14 02:10:0{r}] rank {r} started on {HOSTS[r // 2]}" for r in range(4)]
    (run / "slurm-5150.out").write_text("\n".join(started + lines) + "\n")
    for host, kl in (kern or {}).items():
        (run / f"{host}.kern.log").write_text("\n".join(kl) + "\n")
    return run


def _oom(tmp_path: Path, at: str, killer: str = "Memory cgroup out of memory", one_node: bool = False) -> Path:
    kern = {"cn-02": [f"Mar 14 {at} cn-02 kernel: {killer}: Killed process 7702 (python) "
                      "total-vm:105552048kB, anon-rss:64063852kB, file-rss:0kB, shmem-rss:0kB"]}  # fmt: skip
    lines = ["srun: error: cn-02: task 3: Killed"] + ([] if one_node else ["srun: error: cn-01: tasks 0-1: Terminated"])
    run = _job(tmp_path, lines, kern)
    if one_node:  # the job's only node: nothing names cn-01
        out = run / "slurm-5150.out"
        out.write_text(out.read_text().replace(" on cn-01", " on cn-02"))
    return run


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


def test_the_kernels_global_oom_on_one_node_of_several_is_that_nodes_state(tmp_path):
    v = analyze_run(_oom(tmp_path, "02:16:40", killer="Out of memory")).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (3,) and v.culprit.nodes == ("cn-02",)
    assert v.restartable and v.action is Action.EXCLUDE_AND_RETRY and v.exclude_nodes == ("cn-02",)


def test_the_kernels_global_oom_on_the_jobs_only_node_is_its_demand(tmp_path):
    v = analyze_run(_oom(tmp_path, "02:16:40", killer="Out of memory", one_node=True)).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (3,)
    assert not v.restartable and v.action is Action.STOP


def _local_enospc(rank: int) -> list[str]:
    return [f"{rank}: [rank{rank}]: OSError: [Errno 28] No space left on device: '/local_nvme/stage/r{rank}.pt'"]


def _df(host: str, used: str) -> str:
    return (f"$ ssh {host} df -h /local_nvme /home\nFilesystem      Size  Used Avail Use% Mounted on\n"
            f"/dev/md127      3.5T  3.5T     0 {used} /local_nvme\nhome-nfs:/home   50T   38T   13T  76% /home\n")


def test_a_node_local_disk_full_on_one_node_of_several_names_the_writer_and_its_node(tmp_path):
    run = _job(tmp_path, _local_enospc(2) + ["srun: error: cn-01: tasks 0-1: Terminated"])
    (run / "df_after_failure.txt").write_text(_df("cn-02", "100%") + _df("cn-01", "4%"))
    v = analyze_run(run).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (2,) and v.culprit.nodes == ("cn-02",)
    assert v.restartable and v.action is Action.EXCLUDE_AND_RETRY and v.exclude_nodes == ("cn-02",)


def test_a_node_local_path_without_df_takes_the_writers_node(tmp_path):
    lines = _local_enospc(2) + ["srun: error: cn-02: task 2: Exited with exit code 1",
                                "srun: error: cn-01: tasks 0-1: Terminated"]  # fmt: skip
    v = analyze_run(_job(tmp_path, lines)).verdict
    assert v.culprit.ranks == (2,) and v.culprit.nodes == ("cn-02",) and v.action is Action.EXCLUDE_AND_RETRY


def test_a_node_local_disk_full_on_the_jobs_only_node_is_its_demand(tmp_path):
    run = _job(tmp_path, ["0: [rank0]: OSError: [Errno 28] No space left on device"])
    (run / "df-cn-01.txt").write_text("Filesystem      Size  Used Avail Use% Mounted on\n"
                                      "/dev/md0        3.5T  3.5T     0 100% /local_nvme\n")  # fmt: skip
    out = run / "slurm-5150.out"
    out.write_text(out.read_text().replace(" on cn-02", " on cn-01"))
    v = analyze_run(run).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (0,) and v.culprit.nodes == ("cn-01",)
    assert not v.restartable and v.action is Action.STOP


def test_df_listings_give_each_mount_its_host():
    text = (_df("gpu-c07", "100%") + "$ df -h /scratch     (trn-07, after the crash)\n"
            "Filesystem  Size  Used Avail Use% Mounted on\n/dev/sdb1  1T  1T  0 100% /scratch\n"
            "gpu-a01: Filesystem Size Used Avail Use% Mounted on\ngpu-a01: tmpfs 250G 250G 0 100% /dev/shm\n")
    rows = sample_disks(text.encode())
    assert [(r.host, r.mount, r.full, r.local) for r in rows] == [
        ("gpu-c07", "/local_nvme", True, True), ("gpu-c07", "/home", False, False),
        ("trn-07", "/scratch", True, True), ("gpu-a01", "/dev/shm", True, True)]  # fmt: skip
    assert file_host("df-trn-07.txt") == "trn-07" and file_host("df_after_failure.txt") is None
