"""Report files and the `nvrx-hpc attribute` command: JSON schema, Markdown, self-contained HTML with a
timeline plot (log text escaped), --json alone on stdout, and clear errors with exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from nvrx_hpc.attribution.analyze import analyze_run
from nvrx_hpc.attribution.render import timeline_svg, to_html, to_markdown, write_reports
from nvrx_hpc.core.errors import AttributionError
from nvrx_hpc.core.exit_codes import ExitCode

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "logs"
REPO = Path(__file__).resolve().parents[2]


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("NVRX_")}
    full.update({"NVRX_ATTR_CONFIG": "/dev/null", "PYTHONPATH": str(REPO), **(env or {})})
    return subprocess.run([sys.executable, "-m", "nvrx_hpc", "attribute", *args], capture_output=True, text=True,
                          env=full, timeout=120)  # fmt: skip


@pytest.fixture
def run_dir(tmp_path) -> Path:
    return Path(shutil.copytree(CORPUS / "hang_launcher_event", tmp_path / "4242"))


def test_reports_are_written_and_self_contained(run_dir):
    with open(run_dir / "logs" / "step-0.log", "a") as log:
        log.write("0: torch.distributed.DistBackendError: <script>alert(1)</script>\n")
    data = analyze_run(run_dir).to_dict()
    paths = write_reports(data, run_dir)
    assert [p.name for p in paths] == ["report.json", "report.md", "report.html"]
    stored = json.loads((run_dir / "report.json").read_text())
    assert stored["job_id"] == "4242" and stored["category"] == "distributed_hang"
    assert stored["culprit"] == {"nodes": ["n2"], "ranks": [5], "gpus": [], "pods": []}
    page = (run_dir / "report.html").read_text()
    assert "<svg" in page and "<script>" not in page and "&lt;script&gt;alert(1)" in page
    assert "http://" not in page.replace("http://www.w3.org/2000/svg", "")  # nothing fetched from elsewhere
    for kind in ("launcher.rank.hung", "launcher.node.excluded", "launcher.restart"):
        assert kind in page
    md = (run_dir / "report.md").read_text()
    assert md.startswith("# Failure report for job 4242") and "| launcher.rank.hung |" in md


def test_log_text_is_escaped_in_html():
    report = {"category": "application", "root_cause": "<b>x</b>", "culprit": {"nodes": ["<n1>"], "ranks": [1],
              "gpus": []}, "restartable": False, "confidence": 0.5,
              "evidence": [{"source": "a<b", "text": "<script>alert(1)</script>", "line": 1, "role": "root"}],
              "timeline": [{"time": 1.0, "kind": "x<y", "node": "<n>", "rank": 1, "detail": "<i>"}]}  # fmt: skip
    page = to_html(report)
    assert "<script>alert" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<b>x</b>" not in page and "<n1>" not in page
    md = to_markdown(report)  # Markdown renderers pass raw HTML through: it is escaped there too
    assert "<script>" not in md and "&lt;script&gt;alert(1)" in md and "<b>" not in md
    assert "No timed events" in timeline_svg([{"time": None, "kind": "a"}])


def test_unwritable_report_dir_is_a_clear_error(tmp_path):
    with pytest.raises(AttributionError, match="cannot write the report"):
        write_reports({"category": "unknown", "root_cause": "", "culprit": {"nodes": [], "ranks": [], "gpus": []},
                       "restartable": True, "confidence": 0.1}, tmp_path / "absent")  # fmt: skip


def test_cli_json_alone_on_stdout(run_dir):
    done = cli(str(run_dir), "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["category"] == "distributed_hang" and data["recommendation"]["action"] == "retry"
    assert sorted(Path(p).name for p in data["written"]) == ["report.html", "report.json", "report.md"]


def test_cli_human_output_on_loose_files(run_dir):
    done = cli(str(run_dir / "logs" / "step-0.log"), str(run_dir / "events.jsonl"), "--engine", "python")
    assert done.returncode == 0, done.stderr
    assert "category:     distributed_hang" in done.stdout and "report:" not in done.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["/nonexistent/run"], "no such file or directory: /nonexistent/run"),
        ([], "no run directory or file given"),
        (["{case}", "--engine", "turbo"], "attribution.engine = 'turbo' (from the command line) is invalid"),
        (["{case}", "--budget-s", "-1"], "--budget-s -1 must be above 0"),
        (["--nodes"], "--fetch and --nodes need --server URL"),
        (["{empty}"], "nothing to analyse in"),  # the wrong directory: not a report that says "unknown, retry"
    ],
)
def test_cli_errors_are_messages_with_exit_codes(args, message, run_dir, tmp_path):
    (tmp_path / "empty").mkdir()
    done = cli(*[a.replace("{case}", str(run_dir)).replace("{empty}", str(tmp_path / "empty")) for a in args])
    assert done.returncode == ExitCode.USAGE, done.stderr
    assert message in done.stderr and "Traceback" not in done.stderr
    assert "hint:" in done.stderr or "error:" in done.stderr


def test_help_texts_keep_their_bracketed_defaults():
    # rich markup would take `[the cluster's default]` for a tag and drop it
    done = subprocess.run([sys.executable, "-m", "nvrx_hpc", "submit", "--help"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "Partition [the cluster's default]." in " ".join(done.stdout.split())


def test_cli_bad_settings_variable(run_dir):
    done = cli(str(run_dir), env={"NVRX_ATTR_WEBHOOK_URLL": "http://x"})
    assert done.returncode == ExitCode.USAGE
    assert "unknown attribution variable NVRX_ATTR_WEBHOOK_URLL" in done.stderr


def test_the_job_id_comes_from_the_launchers_events_when_the_run_dir_is_not_named_by_it(tmp_path):
    """The demo's failing job runs in `<demo>/failing`: its report must still say which job it was."""
    run = Path(shutil.copytree(CORPUS / "hang_launcher_event", tmp_path / "failing"))
    with open(run / "events.jsonl", "a") as events:
        events.write(json.dumps({"time": 1.0, "kind": "launcher.started", "node": None, "rank": None,
                                 "detail": {"job": "5150", "nodes": ["n1", "n2"]}}) + "\n")  # fmt: skip
    data = analyze_run(run).to_dict()
    assert data["job_id"] == "5150"
    assert to_markdown(data).startswith("# Failure report for job 5150") and "job ?" not in to_html(data)


def test_the_job_id_from_a_slurm_output_file_name(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "slurm-4711.out").write_text("0: ValueError: bad\n")
    assert analyze_run(tmp_path).job_id == "4711"


def test_failures_and_hangs_are_drawn_as_crosses_as_the_legend_says():
    svg = timeline_svg([
        {"time": 1.0, "kind": "launcher.step.started", "node": "n1", "rank": None, "detail": ""},
        {"time": 2.0, "kind": "launcher.rank.exited", "node": "n1", "rank": 2, "detail": "code 1"},
        {"time": 2.1, "kind": "launcher.culprit", "node": "n1", "rank": 2, "detail": "code 1"},
        {"time": 2.2, "kind": "launcher.rank.hung", "node": "n2", "rank": 5, "detail": ""},
        {"time": 2.3, "kind": "log.xid_hardware", "node": "n2", "rank": None, "detail": "Xid 79"},
        {"time": 3.0, "kind": "launcher.restart", "node": None, "rank": None, "detail": ""},
    ])  # fmt: skip
    marks = [part.split("</title>")[1] for part in svg.split("<g><title>")[1:]]
    shapes = ["circle" if m.startswith("<circle") else "cross" if "stroke-width" in m else "path" for m in marks]
    assert shapes == ["circle", "cross", "cross", "cross", "cross", "path"]
