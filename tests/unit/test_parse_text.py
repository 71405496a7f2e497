"""`scontrol -o show node|job` and `sinfo --version` text, recorded on Slurm 22.05.8."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest

from nvrx_hpc.core.errors import SlurmParseError
from nvrx_hpc.slurm.api import SlurmVersion
from nvrx_hpc.slurm.parse_json import parse_jobs_json, parse_nodes_json
from nvrx_hpc.slurm.parse_text import (
    parse_duration,
    parse_jobs_text,
    parse_key_values,
    parse_nodes_text,
    parse_version,
    split_reason,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
DRAIN_REASON = 'nvrx: GPU 3 "xid 79"; fell off the bus'


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize(
    ("text", "version"),
    [
        (read("sinfo-version-22.05.8.txt"), SlurmVersion(22, 5, 8)),  # Debian: "slurm-wlm 22.05.8"
        ("slurm 22.05.8\n", SlurmVersion(22, 5, 8)),
        ("slurm 23.11.4-1\n", SlurmVersion(23, 11, 4)),
        ("slurm 25.11\n", SlurmVersion(25, 11, 0)),
    ],
)
def test_parse_version(text: str, version: SlurmVersion) -> None:
    assert parse_version(text) == version


def test_version_features() -> None:
    v2205, v2302 = SlurmVersion(22, 5, 8), SlurmVersion(23, 2, 0)
    assert v2205 < v2302 and str(v2205) == "22.05.8"
    assert v2205.has_cli_json and not v2205.has_scontrol_json
    assert v2302.has_scontrol_json
    assert not SlurmVersion(21, 2, 0).has_cli_json


def test_parse_version_rejects_noise() -> None:
    with pytest.raises(SlurmParseError, match="sinfo --version"):
        parse_version("sinfo: fatal: Could not establish a configuration source")


def test_values_with_spaces_stay_whole() -> None:
    pairs = parse_key_values(read("scontrol-show-node-22.05.8.txt").splitlines()[3])
    assert pairs["OS"] == "Linux 6.18.44-fc-v1098 #1 SMP PREEMPT_DYNAMIC @0"
    assert pairs["Reason"] == f"{DRAIN_REASON} [root@2026-12-02T15:00:16]"
    assert pairs["State"] == "IDLE+DRAIN"
    assert pairs["CfgTRES"] == "cpu=2,mem=2000M,billing=2"  # '=' inside a value is not a key
    assert pairs["AllocTRES"] == ""


def test_first_occurrence_of_a_key_wins() -> None:
    pairs = parse_key_values("JobId=1 JobState=RUNNING Comment=evil JobState=COMPLETED")
    assert pairs["JobState"] == "RUNNING"


def test_nodes_text_matches_json() -> None:
    text_nodes = parse_nodes_text(read("scontrol-show-node-22.05.8.txt"))
    json_nodes = parse_nodes_json(read("sinfo-v0.0.38-22.05.8.json"))
    assert [(n.name, n.state, n.flags, n.reason, n.reason_set_by) for n in text_nodes] == [
        (n.name, n.state, n.flags, n.reason, n.reason_set_by) for n in json_nodes
    ]
    # scontrol prints local time without a zone; it is read as local time
    assert text_nodes[3].reason_time == datetime(2026, 12, 2, 15, 0, 16).astimezone()


def test_multiline_node_record() -> None:
    (n4,) = parse_nodes_text(read("scontrol-show-node-22.05.8-multiline.txt"))
    assert (n4.name, n4.state, n4.flags, n4.reason) == ("n4", "idle", {"DRAIN"}, DRAIN_REASON)


def test_not_responding_node() -> None:
    (n1,) = parse_nodes_text(read("scontrol-show-node-22.05.8-not-responding.txt"))
    assert n1.flags == {"NOT_RESPONDING"} and not n1.responding


def test_all_idle_nodes() -> None:
    nodes = parse_nodes_text(read("scontrol-show-node-22.05.8-all-idle.txt"))
    assert [(n.name, n.state, n.flags) for n in nodes] == [
        (f"n{i}", "idle", frozenset()) for i in range(1, 5)
    ]


def test_jobs_text() -> None:
    jobs = {j.job_id: j for j in parse_jobs_text(read("scontrol-show-job-22.05.8.txt"))}
    assert sorted(jobs) == [1, 2, 3, 4, 5, 6, 7]
    assert (jobs[2].state, jobs[2].exit_code, jobs[2].signal) == ("FAILED", 3, None)
    assert jobs[2].time_limit == 365 * 86400
    assert jobs[4].name == "half n3" and jobs[4].comment == "nvrx: run 7" and jobs[4].running
    assert jobs[4].time_limit == 600 and jobs[4].time_left is not None and jobs[4].time_left <= 600
    assert jobs[6].state_reason == "ReqNodeNotAvail,_UnavailableNodes:n4" and jobs[6].nodes == ()
    assert jobs[7].time_limit is None and jobs[7].state_reason == "JobHeldUser"
    assert jobs[1].stdout is None and jobs[2].stdout == "/tmp/lab-adapter/rec/job-2.out"


COMPARED_FIELDS = (
    "name", "state", "nodes", "node_list", "exit_code", "signal", "restart_count",
    "batch_host", "stdout", "comment", "time_limit", "partition", "excluded_nodes",
)  # fmt: skip


def test_jobs_text_agrees_with_json_on_what_both_report() -> None:
    text_jobs = {j.job_id: j for j in parse_jobs_text(read("scontrol-show-job-22.05.8.txt"))}
    json_jobs = {j.job_id: j for j in parse_jobs_json(read("squeue-v0.0.38-22.05.8.json"))}
    for job_id, from_json in json_jobs.items():
        from_text = text_jobs[job_id]
        for field in COMPARED_FIELDS:
            assert getattr(from_text, field) == getattr(from_json, field), (job_id, field)


def test_requeued_and_signalled_jobs_text() -> None:
    jobs = {j.job_id: j for j in parse_jobs_text(read("scontrol-show-job-22.05.8-requeued.txt"))}
    assert (jobs[4].state, jobs[4].restart_count, jobs[4].state_reason) == ("PENDING", 1, "BeginTime")
    assert jobs[5].comment == 'nvrx: attempt 2; "quoted" text'
    assert (jobs[8].exit_code, jobs[8].signal) == (0, 9)
    assert (jobs[9].state, jobs[9].signal) == ("CANCELLED", 15)
    (excluded,) = parse_jobs_text(read("scontrol-show-job-5-excluded-22.05.8.txt"))
    assert excluded.excluded_nodes == ("n1", "n4") and excluded.restart_count == 1


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("UNLIMITED", None),
        ("365-00:00:00", 365 * 86400),
        ("00:01:00", 60),
        ("1-02:03:04", 93784),
        ("05:30", 330),
        ("10", 600),
        ("1-05", 29 * 3600),
        ("1-05:30", 29 * 3600 + 1800),
    ],
)
def test_parse_duration(value: str, seconds: int | None) -> None:
    assert parse_duration(value) == seconds


def test_parse_duration_rejects_other_words() -> None:
    with pytest.raises(SlurmParseError):
        parse_duration("Partition_Limit")


def test_split_reason() -> None:
    text, user, when = split_reason(f"{DRAIN_REASON} [root@2026-12-02T15:00:16]")
    assert (text, user) == (DRAIN_REASON, "root")
    assert when is not None and when.tzinfo is not None
    assert split_reason("(null)") == (None, None, None)
    assert split_reason("no stamp [here]") == ("no stamp [here]", None, None)


@pytest.mark.parametrize(
    "text",
    [
        "NodeName=n1 Arch=x86_64",  # no State
        "JobId=1 JobName=x",  # no JobState
        "JobId=abc JobState=RUNNING",
        "JobId=1 JobState=RUNNING NodeList=n[1-",
    ],
)
def test_broken_records_raise(text: str) -> None:
    with pytest.raises(SlurmParseError):
        if text.startswith("NodeName"):
            parse_nodes_text(text)
        else:
            parse_jobs_text(text)


def test_work_dir_and_submit_time_agree_between_text_and_json(monkeypatch):
    """Both shapes of the same 22.05 jobs (captured on a UTC host): the launcher's run-dir identity and the
    Epilog's run-dir lookup read them, whichever backend is configured."""
    import time

    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    try:
        text = {j.job_id: j for j in parse_jobs_text(read("scontrol-show-job-22.05.8.txt"))}
        json_jobs = parse_jobs_json(read("squeue-v0.0.38-22.05.8.json"))
        for job in json_jobs:
            if job.job_id in text:
                assert (text[job.job_id].work_dir, text[job.job_id].submit_time) == (job.work_dir, job.submit_time)
        assert text[1].work_dir == "/tmp/lab-adapter" and text[1].submit_time == 1796223602
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()


def test_each_shape_says_which_partitions_a_node_is_in():
    """The launcher's requeue-capacity check counts the nodes of the job's partition from these."""
    from nvrx_hpc.slurm.parse_text import parse_nodes_text

    assert {n.partitions for n in parse_nodes_text(read("scontrol-show-node-22.05.8.txt"))} == {("debug",)}
    assert {n.partitions for n in parse_nodes_json(read("sinfo-v0.0.38-22.05.8.json"))} == {("debug",)}
    assert {n.partitions for n in parse_nodes_json(read("sinfo-v0.0.44-handwritten.json"))} >= {("batch",)}
