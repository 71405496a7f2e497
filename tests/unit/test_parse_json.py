"""sinfo/squeue/scontrol --json in both shapes (recorded 22.05 v0.0.38, handwritten v0.0.40/v0.0.44)."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest

from nvrx_hpc.core.errors import SlurmParseError
from nvrx_hpc.slurm.api import JobInfo, NodeInfo
from nvrx_hpc.slurm.parse_json import (
    data_parser_version,
    expand_stdout_pattern,
    job_state_from_tokens,
    node_state_from_tokens,
    parse_jobs_json,
    parse_nodes_json,
    split_wait_status,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
DRAIN_REASON = 'nvrx: GPU 3 "xid 79"; fell off the bus'


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def by_name(nodes: list[NodeInfo]) -> dict[str, NodeInfo]:
    return {n.name: n for n in nodes}


def by_id(jobs: list[JobInfo]) -> dict[int, JobInfo]:
    return {j.job_id: j for j in jobs}


# ---- nodes -------------------------------------------------------------------------------------
def test_sinfo_v0038_all_idle() -> None:
    nodes = parse_nodes_json(read("sinfo-v0.0.38-22.05.8-all-idle.json"))
    assert [(n.name, n.state, n.flags) for n in nodes] == [
        (f"n{i}", "idle", frozenset()) for i in range(1, 5)
    ]
    assert all(n.usable and n.responding and not n.drained and n.reason is None for n in nodes)


def test_sinfo_v0038_idle_allocated_mixed_drained() -> None:
    nodes = by_name(parse_nodes_json(read("sinfo-v0.0.38-22.05.8.json")))
    assert {name: n.state for name, n in nodes.items()} == {
        "n1": "idle",
        "n2": "allocated",
        "n3": "mixed",
        "n4": "idle",  # 22.05 keeps the base state and puts DRAIN in state_flags
    }
    n4 = nodes["n4"]
    assert n4.flags == {"DRAIN"} and n4.drained and not n4.draining and not n4.usable
    assert n4.reason == DRAIN_REASON
    assert n4.reason_set_by == "root"
    assert n4.reason_time == datetime(2026, 12, 2, 15, 0, 16, tzinfo=timezone.utc)
    assert nodes["n2"].usable and nodes["n2"].reason_set_by is None


def test_sinfo_v0038_not_responding() -> None:
    n1 = by_name(parse_nodes_json(read("sinfo-v0.0.38-22.05.8-not-responding.json")))["n1"]
    assert n1.state == "idle" and n1.flags == {"NOT_RESPONDING"}
    assert not n1.responding and not n1.usable


def test_scontrol_nodes_v0044_handwritten() -> None:
    nodes = by_name(parse_nodes_json(read("scontrol-nodes-v0.0.44-handwritten.json")))
    assert nodes["gpu-a1-b1"].state == "idle" and nodes["gpu-a1-b1"].usable
    assert nodes["gpu-a1-b3"].state == "allocated"
    drained = nodes["gpu-a2-b1"]
    assert (drained.state, drained.flags, drained.reason) == ("idle", {"DRAIN"}, DRAIN_REASON)
    assert drained.reason_set_by == "root"
    assert drained.reason_time == datetime.fromtimestamp(1796223616, tz=timezone.utc)
    draining = nodes["gpu-a2-b2"]
    assert draining.state == "mixed" and draining.draining
    down = nodes["gpu-a2-b3"]
    assert down.down and not down.responding and down.reason == "Not responding"
    completing = nodes["gpu-a2-b4"]
    assert completing.flags == {"COMPLETING"} and completing.usable
    # no reason: user and time stay None even though the fields exist
    assert nodes["gpu-a1-b2"].reason is None and nodes["gpu-a1-b2"].reason_time is None


def test_sinfo_v0044_groups_are_flattened_and_deduplicated() -> None:
    nodes = parse_nodes_json(read("sinfo-v0.0.44-handwritten.json"))
    names = [n.name for n in nodes]
    assert len(names) == len(set(names)) == 6  # gpu-a1-b1 is in two partitions
    found = by_name(nodes)
    assert found["gpu-a2-b1"].reason == DRAIN_REASON and found["gpu-a2-b1"].drained
    assert found["gpu-a2-b1"].reason_time == datetime.fromtimestamp(1796223616, tz=timezone.utc)
    assert found["gpu-a2-b3"].flags == {"NOT_RESPONDING"} and found["gpu-a2-b3"].down
    assert found["gpu-a2-b4"].state == "idle"


def test_both_shapes_give_equal_values_for_the_same_node() -> None:
    old = by_name(parse_nodes_json(read("sinfo-v0.0.38-22.05.8.json")))["n4"]
    new = by_name(parse_nodes_json(read("scontrol-nodes-v0.0.44-handwritten.json")))["gpu-a2-b1"]
    assert (old.state, old.flags, old.reason, old.reason_set_by) == (
        new.state,
        new.flags,
        new.reason,
        new.reason_set_by,
    )


@pytest.mark.parametrize(
    ("tokens", "expected"),
    [
        (["IDLE", "DRAIN"], ("idle", {"DRAIN"})),
        (["idle", "DRAIN"], ("idle", {"DRAIN"})),
        (["DOWN", "NOT_RESPONDING"], ("down", {"NOT_RESPONDING"})),
        (["MIXED"], ("mixed", set())),
        (["DRAIN"], ("unknown", {"DRAIN"})),
        ([], ("unknown", set())),
    ],
)
def test_node_state_from_tokens(tokens: list[str], expected: tuple[str, set[str]]) -> None:
    assert node_state_from_tokens(tokens) == expected


# ---- jobs --------------------------------------------------------------------------------------
NOW_0038 = 1796223640  # a few seconds after squeue-v0.0.38-22.05.8.json was recorded


def test_squeue_v0038_running_pending_completed_failed() -> None:
    jobs = by_id(parse_jobs_json(read("squeue-v0.0.38-22.05.8.json"), now=NOW_0038))
    assert {j: info.state for j, info in jobs.items()} == {
        1: "COMPLETED", 2: "FAILED", 3: "COMPLETED", 4: "RUNNING", 5: "RUNNING", 6: "PENDING", 7: "PENDING",
    }  # fmt: skip
    failed = jobs[2]
    assert (failed.exit_code, failed.signal) == (3, None)  # raw wait status 768
    assert failed.state_reason == "NonZeroExitCode" and failed.finished
    assert failed.stdout == "/tmp/lab-adapter/rec/job-2.out"  # %j expanded

    running = jobs[4]
    assert running.name == "half n3" and running.comment == "nvrx: run 7"
    assert running.nodes == ("n3",) and running.node_list == "n3" and running.batch_host == "n3"
    assert running.exit_code is None and running.signal is None  # not finished yet
    assert running.time_limit == 600
    assert running.time_left == 600 - (NOW_0038 - 1796223617)

    srun_job = jobs[1]
    assert srun_job.nodes == ("n1", "n2", "n3", "n4") and srun_job.stdout is None
    assert (srun_job.exit_code, srun_job.signal) == (0, None)

    pending = jobs[6]
    assert pending.nodes == () and pending.batch_host is None and pending.state_reason == "ReqNodeNotAvail"
    assert pending.time_left == pending.time_limit == 60
    held = jobs[7]
    assert held.time_limit is None and held.time_left is None and held.state_reason == "JobHeldUser"


def test_squeue_v0038_requeue_signal_cancel() -> None:
    jobs = by_id(parse_jobs_json(read("squeue-v0.0.38-22.05.8-requeued.json"), now=NOW_0038))
    assert jobs[4].restart_count == 1 and jobs[4].running
    requeued = jobs[5]
    assert (requeued.state, requeued.state_reason, requeued.restart_count) == ("PENDING", "BeginTime", 1)
    assert requeued.excluded_nodes == ("n1", "n4")
    assert requeued.comment == 'nvrx: attempt 2; "quoted" text'
    assert (jobs[8].state, jobs[8].exit_code, jobs[8].signal) == ("FAILED", 0, 9)
    assert (jobs[9].state, jobs[9].exit_code, jobs[9].signal) == ("CANCELLED", 0, 15)


def test_squeue_v0044_handwritten() -> None:
    now = 1796224000
    jobs = by_id(parse_jobs_json(read("squeue-v0.0.44-handwritten.json"), now=now))
    run = jobs[101]
    assert run.state == "RUNNING" and run.state_flags == frozenset()
    assert run.nodes == ("gpu-a1-b1", "gpu-a1-b2", "gpu-a1-b3") and run.node_list == "gpu-a1-b[1-3]"
    assert run.time_limit == 7200 and run.time_left == 7200 - 600
    assert run.restart_count == 2 and run.excluded_nodes == ("gpu-a2-b1", "gpu-a2-b3")
    assert run.stdout == "/home/alice/run/logs/llama pretrain-101.out"  # stdout_expanded wins
    assert run.exit_code is None
    assert jobs[102].time_limit is None and jobs[102].time_left is None  # infinite
    assert jobs[102].stdout == "/home/alice/run/w-102.out"
    assert (jobs[103].state, jobs[103].exit_code, jobs[103].signal) == ("FAILED", 3, None)
    assert (jobs[104].exit_code, jobs[104].signal) == (0, None)
    assert (jobs[105].state, jobs[105].exit_code, jobs[105].signal) == ("CANCELLED", None, 9)
    assert jobs[106].state == "PENDING" and jobs[106].state_flags == {"REQUEUED"}
    assert jobs[107].state == "OUT_OF_MEMORY" and jobs[107].state_flags == {"COMPLETING"}
    assert jobs[107].exit_code == 137 and jobs[107].finished


def test_squeue_v0040_plain_integer_exit_code() -> None:
    jobs = by_id(parse_jobs_json(read("squeue-v0.0.40-handwritten.json"), now=1796224000))
    assert (jobs[201].exit_code, jobs[201].signal) == (3, None)
    assert (jobs[202].exit_code, jobs[202].signal) == (0, 11)
    assert jobs[203].stdout == "/scratch/bob/slurm-203.out"  # sbatch's default name
    assert jobs[203].time_left == 600 - 60


def test_failed_exit_3_is_the_same_in_both_shapes() -> None:
    old = by_id(parse_jobs_json(read("squeue-v0.0.38-22.05.8.json")))[2]
    new = by_id(parse_jobs_json(read("squeue-v0.0.44-handwritten.json")))[103]
    assert (
        (old.state, old.exit_code, old.signal)
        == (new.state, new.exit_code, new.signal)
        == ("FAILED", 3, None)
    )


def test_data_parser_version() -> None:
    assert data_parser_version(json.loads(read("squeue-v0.0.38-22.05.8.json"))) == "v0.0.38"
    assert data_parser_version(json.loads(read("squeue-v0.0.44-handwritten.json"))) == "v0.0.44"
    assert data_parser_version({}) is None


@pytest.mark.parametrize(
    ("status", "expected"), [(0, (0, None)), (768, (3, None)), (9, (0, 9)), (15, (0, 15))]
)
def test_split_wait_status(status: int, expected: tuple[int, int | None]) -> None:
    assert split_wait_status(status) == expected


def test_job_state_from_tokens() -> None:
    assert job_state_from_tokens(["COMPLETING"]) == ("COMPLETING", frozenset())  # 22.05 prints the flag alone
    assert job_state_from_tokens(["PENDING", "REQUEUED"]) == ("PENDING", {"REQUEUED"})
    assert job_state_from_tokens(["REQUEUED", "PENDING"]) == ("PENDING", {"REQUEUED"})


def test_expand_stdout_pattern() -> None:
    values = {
        "job_id": 42,
        "name": "run a",
        "user": "alice",
        "node": "n1",
        "array_job_id": 0,
        "array_task_id": None,
    }
    assert expand_stdout_pattern("out-%x-%j-%u-%N.%%.log", values) == "out-run a-42-alice-n1.%.log"
    assert expand_stdout_pattern("o-%6j-%A_%a-%t", values) == "o-000042-42_%a-%t"


# ---- errors ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("sinfo: error: unrecognized option", "not JSON"),
        ("[1, 2]", "top level is not an object"),
        ('{"meta": {}}', "no 'nodes' or 'sinfo' list"),
        ('{"nodes": [{"state": "idle"}]}', "no name"),
        ('{"nodes": [{"name": "n1", "state": 3}]}', "state field"),
    ],
)
def test_bad_node_json_is_quoted_in_the_error(text: str, what: str) -> None:
    with pytest.raises(SlurmParseError) as caught:
        parse_nodes_json(text)
    assert what in caught.value.message


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("", "not JSON"),
        ('{"jobs": {}}', "no 'jobs' list"),
        ('{"jobs": [{"name": "x"}]}', "no job_id"),
        ('{"jobs": [{"job_id": 1, "job_state": "FAILED", "exit_code": "3"}]}', "exit_code"),
        ('{"jobs": [{"job_id": 1, "job_state": "RUNNING", "nodes": "n[1-"}]}', "job 1 nodes"),
        ('{"jobs": [{"job_id": 1, "job_state": "RUNNING", "time_limit": "x"}]}', "number field"),
    ],
)
def test_bad_job_json_is_quoted_in_the_error(text: str, what: str) -> None:
    with pytest.raises(SlurmParseError) as caught:
        parse_jobs_json(text)
    assert what in caught.value.message
