"""The rules a fourth blind round of cases asked for, on small logs written for these tests: what the
launchers say about ranks (torchrun's failure box and its local `[defaultN]` prefix, DeepSpeed's rank
mapping, NCCL's pid), the kernel lines that name only a pid, victims' network lines, and the verdict's
reasoning about lost nodes, NaN on several nodes, teardown on every rank and a host resource one node
of several ran out of."""

from __future__ import annotations

from pathlib import Path

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.api import Action, Category, Role
from nvrx_hpc.attribution.lines import LineContext, classify_line, split_prefixes


def _run(tmp_path: Path, files: dict[str, list[str]]) -> Path:
    run = tmp_path / "4100"
    run.mkdir(parents=True)
    for name, lines in files.items():
        (run / name).write_text("\n".join(lines) + "\n")
    return run


def _box(rank: int, local: int, host: str, pid: int, code: int = 1, when: str = "2024-06-01_10:00:05") -> list[str]:
    return ["[0]:", f"  time      : {when}", f"  host      : {host}", f"  rank      : {rank} (local_rank: {local})",
            f"  exitcode  : {code} (pid: {pid})", "  error_file: <N/A>"]  # fmt: skip


def test_torchruns_local_prefix_gives_way_to_the_global_rank():
    assert split_prefixes("[default6]:[rank14]:x") == (14, None, "x")
    assert split_prefixes("[default6]:x") == (6, None, "x")
    hit = classify_line("[default3]:ValueError: bad", 1, LineContext("x"))
    assert hit.rank == 3 and hit.fields["tee_local"] == "3"


def test_the_box_maps_the_local_prefix_and_the_pid_to_the_global_rank_and_gives_its_time(tmp_path):
    out = ["[default2]:Traceback (most recent call last):", "[default2]:KeyError: 'label'",
           "E0601 10:00:06.000000 1 api.py:826] failed (exitcode: 1) local_rank: 2 (pid: 7002) of binary: python",
           *_box(26, 2, "c-n4", 7002)]  # fmt: skip
    v = analyze_run(_run(tmp_path, {"train.err": out})).verdict
    assert v.category is Category.APPLICATION and v.culprit.ranks == (26,) and v.culprit.nodes == ("c-n4",)
    assert "2024-06-01 10:00:05" in v.root_cause  # the box's time stands in for the untimed traceback


def test_an_xid_pid_takes_the_global_rank_of_ncclss_world_communicator_not_the_local_rank(tmp_path):
    out = ["g3:5105:5200 [5] NCCL INFO comm 0x5 rank 21 nRanks 32 nNodes 4 localRanks 8 localRank 5 MNNVL 0",
           "g1:3100:3200 [0] NCCL INFO comm 0x6 rank 0 nRanks 32 nNodes 4 localRanks 8 localRank 0 MNNVL 0",
           "E0601 10:00:06.000000 1 api.py:826] failed (exitcode: -6) local_rank: 5 (pid: 5105) of binary: python"]
    kern = ["Jun  1 10:00:01 g3 kernel: NVRM: Xid (PCI:0000:ab:00): 94, pid=5105, name=python, Contained: SM"]
    v = analyze_run(_run(tmp_path, {"slurm-4100.out": out, "g3.kern.log": kern})).verdict
    assert v.category is Category.GPU_HARDWARE and v.culprit.ranks == (21,) and v.culprit.nodes == ("g3",)


def test_deepspeeds_rank_mapping_and_exit_line_name_the_rank_a_segfault_without_one_hit(tmp_path):
    out = ["ds-a: [INFO] [launch.py:162:main] global_rank_mapping=defaultdict(<class 'list'>, "
           "{'ds-a': [0, 1, 2, 3], 'ds-b': [4, 5, 6, 7]})",
           "ds-a: Fatal Python error: Segmentation fault",
           "ds-a: [ERROR] [launch.py:325:sigkill_handler] ['python', '-u', 'train.py', '--local_rank=2'] exits "
           "with return code = -11",
           "ds-b: [rank5]:[E601 10:00:09.1 ProcessGroupNCCL.cpp:1515] [PG 0 Rank 5] Process group watchdog thread "
           "terminated with exception: NCCL error: remote process exited or there was a network error"]  # fmt: skip
    v = analyze_run(_run(tmp_path, {"console.log": out})).verdict
    assert v.category is Category.FRAMEWORK_CRASH and v.culprit.ranks == (2,) and v.culprit.nodes == ("ds-a",)


def test_a_task_blocked_in_the_kernel_is_the_one_srun_had_to_kill(tmp_path):
    kern = ["Jun  1 09:40:00 s1 kernel: INFO: task python:9001 blocked for more than 122 seconds."]
    out = ["srun: error: s2: tasks 4-7: Aborted (core dumped)", "srun: error: s1: tasks 1-3: Terminated",
           "srun: error: s1: task 0: Killed"]
    v = analyze_run(_run(tmp_path, {"slurm-4100.out": out, "s1.kern.log": kern})).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (0,) and v.culprit.nodes == ("s1",)


def test_a_flushed_ib_request_and_a_peer_timeout_are_victims_lines():
    ctx = LineContext("x")
    flush = classify_line("n1:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with status=5 "
                          "opcode=0 len=0 vendor err 249 (Recv)", 1, ctx)  # fmt: skip
    retry = classify_line("n1:1:2 [0] NCCL WARN NET/IB : Got completion from peer 10.0.0.2<1> with status=12 "
                          "opcode=0 len=0 vendor err 129 (Recv)", 1, ctx)  # fmt: skip
    timeout = classify_line("n1:1:2 [0] NCCL WARN NET/OFI Request 0x1 completed with error. RC: 110. Error: "
                            "Connection timed out. Completed length: 0", 1, ctx)  # fmt: skip
    local = classify_line("n2:1:2 [0] NCCL WARN NET/OFI Request 0x1 completed with error. RC: 5. Error: "
                          "Input/output error. Completed length: 0", 1, ctx)  # fmt: skip
    assert (flush.role, retry.role, timeout.role, local.role) == (Role.WEAK, Role.ROOT, Role.WEAK, Role.ROOT)
    assert local.node == "n2"


def test_a_failed_node_is_blamed_with_the_ranks_no_other_node_holds(tmp_path):
    out = ["Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/12", "srun: error: Node failure on f3",
           "srun: error: f1: tasks 0-3: Killed", "srun: error: f2: tasks 4-7: Killed"]
    v = analyze_run(_run(tmp_path, {"slurm-4100.err": out})).verdict
    assert v.category is Category.HOST and v.culprit.nodes == ("f3",) and v.culprit.ranks == (8, 9, 10, 11)
    # more ranks left over than one node holds: the logs do not say which ran there
    out[0] = "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/16"
    v = analyze_run(_run(tmp_path / "b", {"slurm-4100.err": out})).verdict
    assert v.culprit.nodes == ("f3",) and v.culprit.ranks == ()


def test_nan_on_ranks_of_several_nodes_is_the_runs_not_one_gpus(tmp_path):
    out = [f"[rank{r}]: AssertionError: Rank {r}: found NaN in local grad norm in backward pass. Device: 0, "
           f"node: m{r // 4}" for r in (1, 6)]  # fmt: skip
    v = analyze_run(_run(tmp_path, {"train.log": out})).verdict
    assert v.category is Category.NUMERICAL and v.culprit.ranks == () and v.culprit.nodes == ()
    one = analyze_run(_run(tmp_path / "b", {"train.log": out[:1]})).verdict
    assert one.culprit.ranks == (1,) and one.culprit.nodes == ("m0",)


def test_teardown_on_every_rank_names_nobody(tmp_path):
    out = ["srun: error: t2: tasks 4-7: Exited with exit code 1", "srun: error: t1: tasks 0-3: Exited with exit code 1"]
    v = analyze_run(_run(tmp_path, {"slurm-4100.err": out})).verdict
    assert v.category is Category.UNKNOWN and v.culprit.ranks == () and v.culprit.nodes == ()
    some = analyze_run(_run(tmp_path / "b", {"slurm-4100.err": [out[0], "WORLD_SIZE=8"]})).verdict
    assert some.category is Category.UNKNOWN and some.culprit.nodes == ("t2",)  # the suspects are kept


def test_shared_memory_that_ran_out_on_one_node_of_several_is_that_nodes_fault(tmp_path):
    shm = "ERROR: Unexpected bus error encountered in worker. This might be caused by insufficient shared memory (shm)."
    one = _run(tmp_path, {"node1.log": [shm, *_box(5, 1, "h2", 301)], "node0.log": _box(0, 0, "h1", 201)})
    v = analyze_run(one).verdict
    assert v.category is Category.HOST and v.culprit.ranks == (5,) and v.culprit.nodes == ("h2",)
    assert v.restartable and v.action is Action.EXCLUDE_AND_RETRY
    alone = analyze_run(_run(tmp_path / "b", {"train.log": [f"[rank1]: {shm}"]})).verdict
    assert alone.category is Category.HOST and not alone.restartable  # the job's own demand
