"""CliBackend against a fake runner (passed to the constructor) that replays output recorded on 22.05.8."""

from __future__ import annotations

import json
import types
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from nvrx_hpc.core.errors import (
    ConfigError,
    SlurmCommandError,
    SlurmNotInstalled,
    SlurmParseError,
    SlurmTimeout,
)
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.slurm.api import SlurmBackend, SlurmJobNotFound, SlurmNodeNotFound, SlurmRequestError
from nvrx_hpc.slurm.backend import get_backend
from nvrx_hpc.slurm.cli_backend import DEFAULT_TIMEOUT, CliBackend
from nvrx_hpc.slurm.pyslurm_backend import PyslurmBackend
from nvrx_hpc.slurm.runner import CompletedCommand

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "slurm"
STDERR = json.loads((FIXTURES / "scontrol-stderr-22.05.8.json").read_text())
DRAIN_REASON = 'nvrx: GPU 3 "xid 79"; fell off the bus'

VERSION = ("sinfo", "--version")
SINFO_JSON = ("sinfo", "--json")
SCONTROL_NODES_JSON = ("scontrol", "--json", "show", "nodes")
SCONTROL_NODES = ("scontrol", "-o", "show", "node")
SQUEUE_JSON = ("squeue", "--json", "--all", "--states=all")
SCONTROL_JOBS = ("scontrol", "-o", "show", "job")


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@dataclass
class Reply:
    stdout: str = ""
    rc: int = 0
    stderr: str = ""
    timeout: bool = False


def failed(key: str) -> Reply:
    return Reply(rc=STDERR[key]["rc"], stderr=STDERR[key]["stderr"])


@dataclass
class FakeRunner:
    """Stands in for CommandRunner: answers argv lists from a table and records every call.

    A table value may be a list of replies, used in turn (the last one repeats).
    """

    replies: dict[tuple[str, ...], Reply | list[Reply]]
    calls: list[tuple[str, ...]] = field(default_factory=list)
    timeouts: list[float | None] = field(default_factory=list)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float | None = None,
        check: bool = True,
        input_text: str | None = None,
    ) -> CompletedCommand:
        assert not isinstance(argv, str)
        key = tuple(argv)
        self.calls.append(key)
        self.timeouts.append(timeout)
        if key not in self.replies:
            raise AssertionError(f"unexpected command {key}")
        reply = self.replies[key]
        if isinstance(reply, list):
            reply = reply.pop(0) if len(reply) > 1 else reply[0]
        if reply.timeout:
            raise SlurmTimeout(list(key), timeout or 0)
        if check and reply.rc:
            raise SlurmCommandError(list(key), reply.rc, reply.stderr)
        return CompletedCommand(key, reply.rc, reply.stdout, reply.stderr)


def backend(
    replies: dict[tuple[str, ...], Reply | list[Reply]], **kwargs: object
) -> tuple[CliBackend, FakeRunner]:
    runner = FakeRunner({VERSION: Reply(fixture("sinfo-version-22.05.8.txt")), **replies})
    return CliBackend(runner, **kwargs), runner  # type: ignore[arg-type]


# ---- queries -----------------------------------------------------------------------------------
def test_is_a_slurm_backend() -> None:
    cli, _ = backend({})
    assert isinstance(cli, SlurmBackend)


def test_version_is_asked_once() -> None:
    cli, runner = backend({})
    assert str(cli.version()) == "22.05.8"
    cli.version()
    assert runner.calls == [VERSION]


def test_list_nodes_uses_sinfo_json_on_2205() -> None:
    cli, runner = backend({SINFO_JSON: Reply(fixture("sinfo-v0.0.38-22.05.8.json"))})
    nodes = cli.list_nodes()
    assert [n.name for n in nodes] == ["n1", "n2", "n3", "n4"]
    assert nodes[3].drained and nodes[3].reason == DRAIN_REASON
    assert runner.calls == [VERSION, SINFO_JSON]
    assert set(runner.timeouts) == {DEFAULT_TIMEOUT}


def test_list_nodes_uses_per_node_scontrol_json_from_2302() -> None:
    runner = FakeRunner(
        {
            VERSION: Reply("slurm 25.11.2\n"),
            SCONTROL_NODES_JSON: Reply(fixture("scontrol-nodes-v0.0.44-handwritten.json")),
        }
    )
    nodes = CliBackend(runner).list_nodes()  # type: ignore[arg-type]
    assert len(nodes) == 7 and runner.calls == [VERSION, SCONTROL_NODES_JSON]


def test_json_option_missing_falls_back_to_text_and_stays_there() -> None:
    cli, runner = backend(
        {
            SINFO_JSON: Reply(rc=1, stderr="sinfo: unrecognized option '--json'\n"),
            SCONTROL_NODES: Reply(fixture("scontrol-show-node-22.05.8.txt")),
        }
    )
    first = cli.list_nodes()
    second = cli.list_nodes()
    assert first == second and first[3].reason == DRAIN_REASON
    assert runner.calls == [VERSION, SINFO_JSON, SCONTROL_NODES, SCONTROL_NODES]


def test_unparsable_json_falls_back_to_text() -> None:
    cli, runner = backend(
        {
            SINFO_JSON: Reply('{"surprise": []}'),
            SCONTROL_NODES: Reply(fixture("scontrol-show-node-22.05.8.txt")),
        }
    )
    assert [n.state for n in cli.list_nodes()] == ["idle", "allocated", "mixed", "idle"]
    assert runner.calls[-1] == SCONTROL_NODES


def test_other_command_errors_do_not_fall_back() -> None:
    cli, runner = backend(
        {
            SINFO_JSON: Reply(
                rc=1, stderr="slurm_load_node error: Unable to contact slurm controller (connect failure)"
            )
        }
    )
    with pytest.raises(SlurmCommandError) as caught:
        cli.list_nodes()
    assert "sinfo --json exited 1" in caught.value.message
    assert "Unable to contact slurm controller" in caught.value.message
    assert caught.value.exit_code == ExitCode.UNAVAILABLE
    assert SCONTROL_NODES not in runner.calls


def test_timeout_is_raised_not_hidden() -> None:
    cli, runner = backend({SINFO_JSON: Reply(timeout=True)}, timeout=2.5)
    with pytest.raises(SlurmTimeout) as caught:
        cli.list_nodes()
    assert "sinfo --json" in str(caught.value) and "2.5 s" in str(caught.value)
    assert runner.timeouts == [2.5, 2.5]


def test_use_json_false_goes_straight_to_text() -> None:
    cli, runner = backend({SCONTROL_NODES: Reply(fixture("scontrol-show-node-22.05.8.txt"))}, use_json=False)
    cli.list_nodes()
    assert runner.calls == [SCONTROL_NODES]


def test_node_lookup_and_not_found() -> None:
    cli, _ = backend({SINFO_JSON: Reply(fixture("sinfo-v0.0.38-22.05.8.json"))})
    assert cli.node("n3").state == "mixed"
    with pytest.raises(SlurmNodeNotFound) as caught:
        cli.node("n9")
    assert "'n9'" in caught.value.message and "n[1-4]" in caught.value.message


def test_jobs_are_filtered_client_side() -> None:
    cli, runner = backend({SQUEUE_JSON: Reply(fixture("squeue-v0.0.38-22.05.8.json"))})
    assert sorted(cli.jobs()) == [1, 2, 3, 4, 5, 6, 7]
    assert sorted(cli.jobs([2, 4, 99])) == [2, 4]
    failed_job = cli.job(2)
    assert (failed_job.state, failed_job.exit_code) == ("FAILED", 3)
    assert all(call == SQUEUE_JSON for call in runner.calls[1:])  # no -j: 22.05 ignores it in --json


def test_finished_job_that_aged_out_is_a_clear_error() -> None:
    cli, _ = backend({SQUEUE_JSON: Reply(fixture("squeue-v0.0.38-22.05.8.json"))})
    with pytest.raises(SlurmJobNotFound) as caught:
        cli.job(99999)
    assert "99999" in caught.value.message and "MinJobAge" in (caught.value.hint or "")


def test_job_text_fallback_asks_for_the_one_job() -> None:
    cli, runner = backend(
        {
            SQUEUE_JSON: Reply(rc=1, stderr="squeue: unrecognized option '--json'"),
            (*SCONTROL_JOBS, "2"): Reply(fixture("scontrol-show-job-2-failed-22.05.8.txt")),
            (*SCONTROL_JOBS, "99999"): failed("show_job_invalid_id"),
        }
    )
    assert cli.job(2).exit_code == 3
    with pytest.raises(SlurmJobNotFound):
        cli.job(99999)
    assert runner.calls[-1] == (*SCONTROL_JOBS, "99999")


@pytest.mark.parametrize("bad", ["12; rm -rf /", "", "-1", "1 2"])
def test_bad_job_ids_never_reach_slurm(bad: str) -> None:
    cli, runner = backend({})
    with pytest.raises(SlurmRequestError):
        cli.job(bad)
    assert runner.calls == []


# ---- changes -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reason",
    [DRAIN_REASON, 'it\'s "x"=y;  two  spaces\ttab é', "$(reboot) `id` && echo; ' \"", " leading space"],
)
def test_drain_passes_the_reason_as_one_argv_item(reason: str) -> None:
    argv = ("scontrol", "update", "NodeName=n[2-3]", "State=DRAIN", f"Reason={reason}")
    cli, runner = backend({argv: Reply()})
    cli.drain(["n3", "n2"], reason)
    assert runner.calls == [argv]


def test_drain_accepts_a_hostlist_string() -> None:
    argv = ("scontrol", "update", "NodeName=gpu-a1-b[3-4]", "State=DRAIN", "Reason=x")
    cli, runner = backend({argv: Reply()})
    cli.drain("gpu-a1-b[3-4]", "x")
    assert runner.calls == [argv]


@pytest.mark.parametrize(
    ("nodes", "reason", "why"),
    [
        ([], "x", "no node names"),
        (["n1"], "", "requires a reason"),
        (["n1"], "   ", "requires a reason"),
        (["n1"], "two\nlines", "one line"),
        (["n[1-"], "x", "bad node name"),
        (["n 1"], "x", "no whitespace"),
        (["n1,n2 n3"], "x", "no whitespace"),
        (["n[1-2],n3"], "x", None),  # a list item may itself be a hostlist
    ],
)
def test_bad_drain_requests(nodes: list[str], reason: str, why: str | None) -> None:
    cli, runner = backend({("scontrol", "update", "NodeName=n[1-3]", "State=DRAIN", "Reason=x"): Reply()})
    if why is None:
        cli.drain(nodes, reason)  # accepted: expanded to valid names
        return
    with pytest.raises(SlurmRequestError, match=why) as caught:
        cli.drain(nodes, reason)
    assert caught.value.exit_code == ExitCode.USAGE
    assert runner.calls == []


def test_drain_unknown_node_names_it() -> None:
    argv = ("scontrol", "update", "NodeName=n9", "State=DRAIN", "Reason=x")
    cli, _ = backend(
        {argv: failed("update_node_invalid_name"), SINFO_JSON: Reply(fixture("sinfo-v0.0.38-22.05.8.json"))}
    )
    with pytest.raises(SlurmNodeNotFound, match="'n9'"):
        cli.drain(["n9"], "x")


def test_resume() -> None:
    argv = ("scontrol", "update", "NodeName=n4", "State=RESUME")
    cli, runner = backend({argv: Reply()})
    cli.resume(["n4"])
    assert runner.calls == [argv]


def test_resume_of_a_node_that_is_not_drained_is_a_no_op() -> None:
    argv = ("scontrol", "update", "NodeName=n1", "State=RESUME")
    cli, _ = backend(
        {argv: failed("resume_not_drained"), SINFO_JSON: Reply(fixture("sinfo-v0.0.38-22.05.8.json"))}
    )
    cli.resume(["n1"])  # n1 is idle: nothing to do, no error


def test_resume_that_leaves_a_node_drained_raises() -> None:
    argv = ("scontrol", "update", "NodeName=n4", "State=RESUME")
    cli, _ = backend(
        {argv: failed("resume_not_drained"), SINFO_JSON: Reply(fixture("sinfo-v0.0.38-22.05.8.json"))}
    )
    with pytest.raises(SlurmCommandError, match="Invalid node state"):
        cli.resume(["n4"])


def test_requeue_without_exclusion() -> None:
    cli, runner = backend({("scontrol", "requeue", "5"): Reply()})
    cli.requeue(5)
    assert runner.calls == [("scontrol", "requeue", "5")]


def test_requeue_with_exclusion_holds_updates_then_releases() -> None:
    update = ("scontrol", "update", "JobId=4", "ExcNodeList=n[2-3]")
    cli, runner = backend(
        {
            SQUEUE_JSON: Reply(fixture("squeue-v0.0.38-22.05.8.json")),  # job 4 runs, excludes nothing yet
            ("scontrol", "requeuehold", "4"): Reply(),
            update: Reply(),
            ("scontrol", "release", "4"): Reply(),
        }
    )
    cli.requeue(4, exclude=["n3", "n2"])
    assert runner.calls[-3:] == [("scontrol", "requeuehold", "4"), update, ("scontrol", "release", "4")]


def test_requeue_to_fewer_nodes_changes_the_size_while_held() -> None:
    """Shrink on requeue: ExcNodeList and NumNodes in one update between hold and release, never after."""
    update = ("scontrol", "update", "JobId=4", "ExcNodeList=n2", "NumNodes=3", "NumTasks=6")
    cli, runner = backend(
        {
            SQUEUE_JSON: Reply(fixture("squeue-v0.0.38-22.05.8.json")),
            ("scontrol", "requeuehold", "4"): Reply(),
            update: Reply(),
            ("scontrol", "release", "4"): Reply(),
        }
    )
    cli.requeue(4, exclude=["n2"], nodes=3, tasks=6)
    assert runner.calls[-3:] == [("scontrol", "requeuehold", "4"), update, ("scontrol", "release", "4")]
    with pytest.raises(SlurmRequestError, match="NumNodes"):
        cli.requeue(4, nodes=0)


def test_requeue_merges_existing_exclusions() -> None:
    update = ("scontrol", "update", "JobId=5", "ExcNodeList=n[1-2,4]")  # job 5 already excludes n1,n4
    cli, runner = backend(
        {
            SQUEUE_JSON: Reply(fixture("squeue-v0.0.38-22.05.8-requeued.json")),
            ("scontrol", "requeuehold", "5"): Reply(),
            update: Reply(),
            ("scontrol", "release", "5"): Reply(),
        }
    )
    cli.requeue(5, exclude="n2")
    assert update in runner.calls


def test_requeue_of_a_pending_job_only_excludes() -> None:
    update = ("scontrol", "update", "JobId=6", "ExcNodeList=n1")
    cli, runner = backend(
        {
            SQUEUE_JSON: Reply(fixture("squeue-v0.0.38-22.05.8.json")),
            ("scontrol", "requeuehold", "6"): failed("requeuehold_pending"),
            update: Reply(),
        }
    )
    cli.requeue(6, exclude=["n1"])
    assert runner.calls[-2:] == [("scontrol", "requeuehold", "6"), update]
    assert ("scontrol", "release", "6") not in runner.calls  # it was never held by us


def test_requeue_releases_even_when_the_update_fails() -> None:
    update = ("scontrol", "update", "JobId=4", "ExcNodeList=n1")
    cli, runner = backend(
        {
            SQUEUE_JSON: Reply(fixture("squeue-v0.0.38-22.05.8.json")),
            ("scontrol", "requeuehold", "4"): Reply(),
            update: failed("update_excnodelist_running"),
            ("scontrol", "release", "4"): Reply(),
        }
    )
    with pytest.raises(SlurmCommandError, match="no longer pending"):
        cli.requeue(4, exclude=["n1"])
    assert runner.calls[-1] == ("scontrol", "release", "4")


def test_requeue_of_an_unknown_job() -> None:
    cli, _ = backend({("scontrol", "requeue", "99999"): failed("update_job_invalid_id")})
    with pytest.raises(SlurmJobNotFound):
        cli.requeue(99999)


@pytest.mark.parametrize("text", ['nvrx: attempt 2; "quoted" text', "", "a=b c=d"])
def test_set_comment(text: str) -> None:
    argv = ("scontrol", "update", "JobId=4", f"Comment={text}")
    cli, runner = backend({argv: Reply()})
    cli.set_comment(4, text)
    assert runner.calls == [argv]


def test_set_comment_rejects_newlines_and_unknown_jobs() -> None:
    cli, _ = backend({("scontrol", "update", "JobId=99999", "Comment=x"): failed("update_job_invalid_id")})
    with pytest.raises(SlurmRequestError, match="one line"):
        cli.set_comment(4, "a\nb")
    with pytest.raises(SlurmJobNotFound):
        cli.set_comment(99999, "x")


def test_get_backend_cli_uses_the_given_runner() -> None:
    runner = FakeRunner({VERSION: Reply("slurm 22.05.8\n")})
    cli = get_backend("cli", runner)  # type: ignore[arg-type]
    assert str(cli.version()) == "22.05.8" and runner.calls == [VERSION]


def test_parse_errors_in_text_fallback_propagate() -> None:
    cli, _ = backend({SCONTROL_NODES: Reply("NodeName=n1 Arch=x86_64\n")}, use_json=False)
    with pytest.raises(SlurmParseError, match="no State"):
        cli.list_nodes()


# ---- the backend factory and the optional pyslurm backend ----------------------------------------
def test_get_backend_rejects_unknown_names() -> None:
    with pytest.raises(ConfigError, match="valid backends are cli, pyslurm") as caught:
        get_backend("slurmrestd")
    assert caught.value.exit_code == ExitCode.USAGE


def test_pyslurm_backend_without_pyslurm_says_how_to_get_it() -> None:
    import nvrx_hpc.slurm.pyslurm_backend as module  # importing never fails

    if module.pyslurm_available():
        pytest.skip("pyslurm is installed here")
    with pytest.raises(SlurmNotInstalled) as caught:
        get_backend("pyslurm")
    assert "pyslurm X.Y builds only against Slurm X.Y" in (caught.value.hint or "")


def test_pyslurm_backend_maps_a_stand_in_module() -> None:
    """Runs PyslurmBackend's mapping code once against a stand-in shaped like pyslurm's documented API.

    This is not pyslurm: it only proves the adapter code runs; the real API is untested here.
    """
    calls: list[tuple[str, object]] = []

    class Node:
        def __init__(self, name=None, **changes):
            self.name, self.changes = name, changes
            self.state, self.reason, self.reason_user, self.reason_time_raw = (
                "IDLE+DRAIN",
                "bad gpu",
                "root",
                5,
            )

        @staticmethod
        def load(name):
            return Node(name)

        def modify(self, changes):
            calls.append(("modify", (self.name, changes.changes)))

    class Nodes(dict):
        @staticmethod
        def load():
            return Nodes({"n1": Node("n1")})

    class Job:
        id, name, state, allocated_nodes, excluded_nodes, partition = 7, "j", "FAILED", "n[1-2]", "n4", "p"
        time_limit, exit_code, exit_code_signal, requeue_count = 10, 3, 0, 1
        batch_host, standard_output, comment, state_reason = "n1", "/o", "", "NonZeroExitCode"

        @staticmethod
        def load(job_id):
            return Job()

        def requeue(self, hold=False):
            calls.append(("requeue", hold))

        def modify(self, changes):
            calls.append(("job.modify", changes))

        def release(self):
            calls.append(("release", None))

    class Jobs(dict):
        @staticmethod
        def load():
            return Jobs({7: Job()})

    stand_in = types.SimpleNamespace(
        Node=Node,
        Nodes=Nodes,
        Job=Job,
        Jobs=Jobs,
        JobSubmitDescription=dict,
        RPCError=OSError,
        __version__="23.11.0",
    )
    ps = PyslurmBackend(stand_in)  # type: ignore[arg-type]
    assert isinstance(ps, SlurmBackend) and str(ps.version()) == "23.11.0"
    (node,) = ps.list_nodes()
    assert (node.state, node.flags, node.reason, node.reason_set_by) == ("idle", {"DRAIN"}, "bad gpu", "root")
    job = ps.job(7)
    assert (job.state, job.exit_code, job.signal, job.nodes, job.time_limit) == (
        "FAILED",
        3,
        None,
        ("n1", "n2"),
        600,
    )
    assert ps.jobs([7, 8]).keys() == {7}
    ps.drain("n1", "bad gpu")
    ps.requeue(7, exclude=["n3"])
    assert calls == [
        ("modify", ("n1", {"state": "DRAIN", "reason": "bad gpu"})),
        ("requeue", True),
        ("job.modify", {"excluded_nodes": "n[3-4]"}),
        ("release", None),
    ]
