"""Where a failure happened, from logs laid out the way multi-node jobs leave them: 4 nodes x 2 ranks,
`srun --label` output and one syslog-format `<host>.kern.log` per node. The silent rank of a hang, the
node and rank of a syslog Xid and of a cgroup OOM kill, one timeline for stamps without a year, and the
smaller rules (file names, prefixes, pids, torchrun's box)."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Category
from nvrx_hpc.attribution.hang_suspects import hang_suspects
from nvrx_hpc.attribution.lines import LineContext, classify_line, split_prefixes
from nvrx_hpc.attribution.localise import known_ranks, node_of_file

HOSTS = ["gpu-n01", "gpu-n02", "gpu-n03", "gpu-n04"]  # ranks 2k and 2k+1 run on HOSTS[k]


def _watchdog(rank: int, seq: int = 9142) -> str:
    return (f"{rank}: [rank{rank}]:[E0314 02:51:07.551 ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught "
            f"collective operation timeout: WorkNCCL(SeqNum={seq}, OpType=ALLREDUCE, NumelIn=1024, NumelOut=1024, "
            "Timeout(ms)=600000) ran for 600041 milliseconds before timing out.")  # fmt: skip


def _job(tmp_path: Path, out_lines: list[str], kern: dict[str, list[str]]) -> Path:
    run = tmp_path / "81300"
    run.mkdir()
    started = [f"{r}: [2024-03-14 02:10:0{r}] rank {r} started on {HOSTS[r // 2]}" for r in range(8)]
    (run / "slurm-81300.out").write_text("\n".join(started + out_lines) + "\n")
    for host in HOSTS:
        lines = [f"Mar 14 01:50:00 {host} kernel: [   88.100000] nvidia-nvswitch: probe done", *kern.get(host, [])]
        (run / f"{host}.kern.log").write_text("\n".join(lines) + "\n")
    return run


def test_the_silent_rank_of_a_hang_is_named_not_the_seven_that_report(tmp_path):
    teardown = [f"srun: error: {h}: tasks {2 * i}-{2 * i + 1}: Aborted (core dumped)" for i, h in enumerate(HOSTS)]
    run = _job(tmp_path, [_watchdog(r) for r in range(8) if r != 5] + teardown, {})
    v = analyze_run(run).verdict
    assert v.category is Category.DISTRIBUTED_HANG
    assert v.culprit.ranks == (5,) and v.culprit.nodes == ("gpu-n03",)
    assert v.restartable and v.action.value == "retry"


def test_a_hang_every_rank_reports_names_nobody(tmp_path):
    run = _job(tmp_path, [_watchdog(r) for r in range(8)], {})
    v = analyze_run(run).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == () and v.culprit.nodes == ()


def test_the_rank_behind_is_named_from_the_watchdogs_progress_lines():
    lines = [f"[PG 0 Rank {r}] Timeout at NCCL work: 5120, last enqueued NCCL work: 5122, last completed NCCL work: "
             "5119." for r in (0, 1, 2)]  # fmt: skip
    lines.append("[PG 0 Rank 3] Timeout at NCCL work: 5117, last enqueued NCCL work: 5117, last completed NCCL "
                 "work: 5116.")
    hits = [classify_line(f"{r}: {line}", 1, LineContext("x")) for r, line in enumerate(lines)]
    assert hang_suspects(hits, {0, 1, 2, 3}) == ((3,), "behind")


def test_a_syslog_xid_names_its_node_time_and_the_rank_on_that_gpu(tmp_path):
    xid = ("Mar 14 02:31:07 gpu-n03 kernel: [ 1893.412230] NVRM: Xid (PCI:0000:3b:00): 79, pid=48211, name=python, "
           "GPU has fallen off the bus.")  # fmt: skip
    out = ["5: [rank5]: RuntimeError: CUDA error: unspecified launch failure",
           *[_watchdog(r) for r in (0, 1, 2, 3, 4, 6, 7)],
           "srun: error: gpu-n03: tasks 4-5: Exited with exit code 1"]  # fmt: skip
    report = analyze_run(_job(tmp_path, out, {"gpu-n03": [xid]}))
    v = report.verdict
    assert v.category is Category.GPU_HARDWARE and v.signature == "xid_hardware"
    assert v.culprit.nodes == ("gpu-n03",) and v.culprit.ranks == (5,)
    assert v.action.value == "exclude_and_retry" and v.exclude_nodes == ("gpu-n03",)
    # a syslog stamp has no year: it takes the year of the job's dated lines (2024), not the file's
    assert "2024-03-14 02:31:07" in v.root_cause and "unknown time" not in v.root_cause
    xid_events = [t for t in v.timeline if t.kind == "log.xid_hardware"]
    assert xid_events and xid_events[0].node == "gpu-n03"
    assert xid_events[0].time == datetime(2024, 3, 14, 2, 31, 7).timestamp()


def test_a_cgroup_oom_kill_names_the_task_of_its_cgroup_path(tmp_path):
    kern = [
        "Mar  3 14:02:11 gpu-n02 kernel: oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=step_0,"
        "mems_allowed=0-1,oom_memcg=/slurm/uid_1000/job_4242/step_0/task_3,task_memcg=/slurm/uid_1000/job_4242/"
        "step_0/task_3,task=python,pid=8812,uid=1000",
        "Mar  3 14:02:11 gpu-n02 kernel: Memory cgroup out of memory: Killed process 8812 (python) total-vm:3012kB",
    ]
    out = ["slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been OOM "
           "Killed."]
    v = analyze_run(_job(tmp_path, out, {"gpu-n02": kern})).verdict
    assert v.category is Category.HOST and not v.restartable and v.action.value == "stop"
    assert v.culprit.ranks == (3,) and v.culprit.nodes == ("gpu-n02",)


def test_node_of_a_kernel_log_from_its_file_name():
    names = {"gpu-n03.kern.log": "gpu-n03", "dmesg-node017.txt": "node017", "journalctl-k-dgx-17.txt": "dgx-17",
             "n2.dmesg": "n2", "c12-journal.log": "c12", "dmesg.txt": None, "step-0.log": None,
             "a100-r3-12.dmesg-T.txt": "a100-r3-12", "gpu-b07.journalctl-k.txt": "gpu-b07"}  # fmt: skip
    for name, host in names.items():
        assert node_of_file(Path("/run") / name, Path("/run")) == host, name
    assert node_of_file(Path("/run/nodes/a03/syslog"), Path("/run")) == "a03"


def test_prefixes_and_headers_give_rank_node_and_time():
    assert split_prefixes("3: [default3]:hello") == (3, None, "hello")
    assert split_prefixes("node-b7: [rank9]: ValueError: x") == (9, "node-b7", "ValueError: x")
    assert split_prefixes("ValueError: x") == (None, None, "ValueError: x")
    ctx = LineContext("x", year=2030)
    hit = classify_line("2024-06-02T11:49:55+0200 hgx07 kernel: NVRM: Xid (PCI:0000:ab:00): 94, pid=1, x", 1, ctx)
    assert hit.node == "hgx07" and hit.clock == "iso" and hit.time == datetime(2024, 6, 2, 11, 49, 55).timestamp()
    hit = classify_line("[Tue Feb 13 09:41:22 2024] NVRM: Xid (PCI:0000:b7:00): 48, pid=7, DBE", 1, ctx)
    assert hit.time == datetime(2024, 2, 13, 9, 41, 22).timestamp()
    hit = classify_line("[ 8812.553100] NVRM: Xid (PCI:0000:3b:00): 79, pid=11920, GPU has fallen off the bus.", 1, ctx)
    assert hit.time is None and hit.clock == "boot" and hit.fields["boot_s"] == "8812.553100"
    hit = classify_line("slurmstepd-gpu-n07: error: Detected 1 oom_kill event in StepId=9.0 cgroup.", 1, ctx)
    assert hit.node == "gpu-n07"
    hit = classify_line("srun: error: cpu-n3: task 0: Illegal instruction (core dumped)", 1, ctx)
    assert (hit.signature, hit.rank, hit.node) == ("segfault", 0, "cpu-n3")


def test_known_ranks_come_from_task_lists_world_sizes_and_gaps():
    ctx = LineContext("x")
    hits = [classify_line("srun: error: n1: tasks 0-3: Killed", 1, ctx)]
    assert known_ranks(hits) == {0, 1, 2, 3}
    hits = [classify_line("n1:1:1 [0] NCCL INFO comm 0x1f rank 0 nranks 16 cudaDev 0 - Init COMPLETE", 1, ctx)]
    assert known_ranks(hits) == set(range(16))
    assert known_ranks([], [0, 6]) == set(range(7))


def test_a_pid_and_torchruns_box_name_the_rank_and_host(tmp_path):
    (tmp_path / "torchrun.err").write_text("\n".join([
        "E0419 14:00:01.000000 2200 api.py:869] failed (exitcode: -11) local_rank: 3 (pid: 2231) of binary: python",
        "Root Cause (first observed failure):", "[0]:", "  host      : h100-07", "  rank      : 3 (local_rank: 3)",
        "  exitcode  : -11 (pid: 2231)", "  traceback : Signal 11 (SIGSEGV) received by PID 2231",
    ]) + "\n")  # fmt: skip
    v = analyze_run(tmp_path).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (3,) and v.culprit.nodes == ("h100-07",)


def test_torchs_unpadded_glog_month_is_read_so_the_timeouts_come_before_the_cancel(tmp_path):
    """torch prints `[E520 ...` for May 20: those timeouts are the failure, the later cancel its cascade."""
    out = [_watchdog(r).replace("[E0314 02:51:07", "[E520 04:18:11") for r in range(8) if r != 5]
    out += ["srun: error: gpu-n01: tasks 0-1: Aborted (core dumped)",
            "slurmstepd: error: *** STEP 81300.0 ON gpu-n01 CANCELLED AT 2024-05-20T04:18:20 ***"]
    v = analyze_run(_job(tmp_path, out, {})).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (5,) and v.restartable


def test_an_nfs_stall_the_kernel_recovers_from_is_not_the_cause_of_a_later_xid(tmp_path):
    kern = ["Mar 14 01:58:02 gpu-n03 kernel: nfs: server fs01 not responding, still trying",
            "Mar 14 01:58:03 gpu-n03 kernel: nfs: server fs01 OK",
            "Mar 14 02:14:41 gpu-n03 kernel: NVRM: Xid (PCI:0000:4b:00): 79, pid='<unknown>', name=<unknown>, "
            "GPU has fallen off the bus."]
    out = ["5: [rank5]:[E314 02:14:42.118 ProcessGroupNCCL.cpp:1595] [PG 0 (default_pg) Rank 5] Process group "
           "watchdog thread terminated with exception: CUDA error: unspecified launch failure",
           "srun: error: gpu-n03: task 5: Aborted (core dumped)"]
    v = analyze_run(_job(tmp_path, out, {"gpu-n03": kern})).verdict
    assert v.category is Category.GPU_HARDWARE and v.culprit.nodes == ("gpu-n03",) and v.culprit.ranks == (5,)


def test_an_nfs_stall_without_recovery_stays_a_host_fault(tmp_path):
    kern = ["Mar 14 01:58:02 gpu-n03 kernel: nfs: server fs01 not responding, still trying"]
    v = analyze_run(_job(tmp_path, ["srun: error: gpu-n03: task 5: Terminated"], {"gpu-n03": kern})).verdict
    assert v.category is Category.HOST and v.culprit.nodes == ("gpu-n03",)


def test_a_kernel_oom_kill_names_the_one_task_srun_reports_killed_on_that_host(tmp_path):
    kern = ["Mar 14 03:41:17 gpu-n04 kernel: Out of memory: Killed process 90232 (python) total-vm:612288304kB"]
    out = ["srun: error: gpu-n04: task 6: Killed",
           "srun: error: gpu-n01: tasks 0-1: Aborted", "srun: error: gpu-n04: task 7: Aborted"]
    v = analyze_run(_job(tmp_path, out, {"gpu-n04": kern})).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (6,) and v.culprit.nodes == ("gpu-n04",)


def test_a_collectors_stamp_before_the_runner_prefix_keeps_the_rank_and_gives_the_time(tmp_path):
    # Logs shipped through a collector or `ts` carry a stamp before srun's label on every line.
    line = "2024-03-14T02:51:07.551Z 5: RuntimeError: CUDA error: an illegal memory access was encountered"
    hit = classify_line(line, 1, LineContext("x.out"))
    assert hit is not None and hit.rank == 5 and hit.time == datetime(2024, 3, 14, 2, 51, 7, 551000).timestamp()
    assert split_prefixes("[2024-03-14 02:51:07] [rank12]: boom") == (12, None, "boom")
    # any line: torchrun's box keeps its indent; a glog line is not read as a journal host
    assert split_prefixes("2024-03-14T02:51:07Z   host      : dgx-b-04")[2] == "  host      : dgx-b-04"
    assert split_prefixes("2024-05-06T10:00:00Z E0506 10:00:00.123 4012 api.py:869] failed")[2].startswith("E0506")
    # a journal header is kept whole: its stamp and host are read_header's
    assert split_prefixes("2024-10-02T14:32:40+02:00 gpu-n03 kernel: x")[2].startswith("2024-10-02T14:32:40")
    teardown = [f"2024-03-14T02:52:00Z srun: error: {h}: tasks {2 * i}-{2 * i + 1}: Aborted"
                for i, h in enumerate(HOSTS)]
    run = _job(tmp_path, [f"2024-03-14T02:51:07Z {_watchdog(r)}" for r in range(8) if r != 5] + teardown, {})
    v = analyze_run(run).verdict
    assert v.category is Category.DISTRIBUTED_HANG and v.culprit.ranks == (5,)
