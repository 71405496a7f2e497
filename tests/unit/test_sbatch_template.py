"""The packaged sbatch template (data/sbatch/pytorch.sbatch.j2) via `nvrx-hpc render`: goldens, bad input, quoting."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from nvrx_hpc.core.errors import ConfigError
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.launcher.sbatch import build_vars, render_script, slurm_time_seconds

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "fixtures" / "templates"
PY = "/usr/bin/python3"  # fixed, so the golden files do not depend on this machine's interpreter

CASES = {
    "minimal": dict(nodes=2, run_dir="/scratch/runs/exp1", command=["python", "train.py"], python=PY),
    "full": dict(
        nodes=4, spares=2, tasks_per_node=8, time="1-12:00:00", partition="gpu,gpu-long", job_name="llama 70b",
        run_dir="/scratch/runs/exp 2", command=["torchrun-free", "train.py", "--lr", "3e-4", "--name", "it's"],
        max_restarts=5, min_nodes=3, heartbeat_timeout=120, initial_timeout=900.5, signal_grace=300, python=PY,
    ),
    "site": dict(nodes=2, spares=1, run_dir="/scratch/runs/exp3", command=["python", "train.py"], python=PY,
                 mode="site"),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rendered_script_matches_the_golden_file(case):
    script = render_script(build_vars(**CASES[case]))
    golden = GOLDEN / f"pytorch-{case}.sbatch"
    if os.environ.get("NVRX_UPDATE_GOLDEN") == "1":
        golden.write_text(script)
    assert script == golden.read_text(), f"rerun with NVRX_UPDATE_GOLDEN=1 to accept the change to {golden.name}"


def test_exit_codes_in_the_script_come_from_the_enum():
    script = render_script(build_vars(**CASES["minimal"]))
    for code in ExitCode:
        if code is ExitCode.INPROCESS_ESCALATE:  # a training rank's exit code, never `nvrx-hpc run`'s
            assert f"= {int(code)}\n" not in script
            continue
        assert f"#   {code.name} = {int(code)}\n" in script


def _render(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "nvrx_hpc", "render", *args], capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


def test_render_cli_prints_the_script():
    done = _render("--nodes", "2", "--spares", "1", "--tasks-per-node", "2", "--run-dir", "/r", "--python", PY,
                   "--", "python", "train.py", "--steps", "10")
    assert done.returncode == 0, done.stderr
    assert "#SBATCH --nodes=3\n" in done.stdout
    assert f"\n{PY} -m nvrx_hpc run --spares 1 --tasks-per-node 2 --run-dir /r -- python train.py --steps 10 &\n" \
        in done.stdout
    assert done.stdout.endswith('exit "$code"\n')


INVALID = [
    (["--nodes", "0"], "'nodes': Input should be greater than or equal to 1 (got 0)"),
    (["--spares", "-1"], "'spares': Input should be greater than or equal to 0 (got -1)"),
    (["--tasks-per-node", "0"], "'tasks_per_node': Input should be greater than or equal to 1 (got 0)"),
    (["--time", "1:99"], "'time': '1:99': minutes and seconds must be 0-59"),
    (["--time", "tomorrow"], "'time': 'tomorrow' is not a Slurm time"),
    (["--time", "1-24"], "'time': '1-24': hours after the day must be 0-23"),
    (["--time", "1"], "'signal_grace': 60 s is not shorter than the time limit '1' (60 s)"),
    (["--partition", "gpu;rm"], "'partition': 'gpu;rm' is not a partition name"),
    (["--partition", "gpu partition"], "'partition': 'gpu partition' is not a partition name"),
    (["--run-dir", "runs/exp1"], "'run_dir': must be an absolute path, got 'runs/exp1'"),
    (["--run-dir", "/runs/a\nb"], "'run_dir': the run directory must not contain control characters"),
    (["--job-name", "a\nb"], "'job_name': the value must not contain control characters"),
    (["--job-name", ""], "'job_name': String should have at least 1 character"),
    (["--min-nodes", "3"], "'min_nodes': 3 is more than nodes (2)"),
    (["--max-restarts", "-1"], "'max_restarts': Input should be greater than or equal to 0 (got -1)"),
    (["--heartbeat-timeout", "0"], "'heartbeat_timeout': Input should be greater than 0 (got 0.0)"),
    (["--initial-timeout", "-5"], "'initial_timeout': Input should be greater than 0 (got -5.0)"),
    (["--signal-grace", "0"], "'signal_grace': Input should be greater than or equal to 1 (got 0)"),
    (["--python", ""], "'python': String should have at least 1 character"),
]


def _argv(args: list[str]) -> list[str]:
    base = {"--nodes": "2", "--run-dir": "/r"}
    base.update(dict(zip(args[::2], args[1::2], strict=True)))
    return [x for kv in base.items() for x in kv] + ["--", "python", "train.py"]


@pytest.mark.parametrize(("args", "message"), INVALID, ids=[a[0] + "=" + repr(a[1]) for a, _ in INVALID])
def test_each_invalid_variable_is_a_usage_error_naming_it(args, message, monkeypatch, capsys):
    """The console-script entry point in this process (the CLI import costs 0.7 s per subprocess)."""
    from nvrx_hpc.cli.main import run

    monkeypatch.setattr(sys, "argv", ["nvrx-hpc", "render", *_argv(args)])
    with pytest.raises(SystemExit) as exit_:
        run()
    out, err = capsys.readouterr()
    assert exit_.value.code == int(ExitCode.USAGE), out
    assert f"error: sbatch variable {message}" in err
    assert "hint: " in err and out == ""


@pytest.mark.parametrize("case", [0, 3, 9, 13])  # nodes, time, run_dir, min_nodes: through `python -m nvrx_hpc`
def test_invalid_variables_through_the_real_command(case):
    args, message = INVALID[case]
    done = _render(*_argv(args))
    assert done.returncode == int(ExitCode.USAGE), done.stdout
    assert f"error: sbatch variable {message}" in done.stderr and done.stdout == ""


def test_missing_command_is_a_usage_error():
    done = _render("--nodes", "2", "--run-dir", "/r")
    assert done.returncode == int(ExitCode.USAGE)
    assert "sbatch variable 'command': no training command given" in done.stderr
    assert "put the training command after --" in done.stderr


def test_unknown_variable_and_missing_template_are_config_errors(tmp_path):
    with pytest.raises(ConfigError, match="'flavour': Extra inputs are not permitted"):
        build_vars(nodes=1, run_dir="/r", command=["x"], flavour="vanilla")
    with pytest.raises(ConfigError, match="cannot read the sbatch template"):
        render_script(build_vars(nodes=1, run_dir="/r", command=["x"]), tmp_path / "none.j2")
    broken = tmp_path / "broken.j2"
    broken.write_text("{{ no_such_variable }}\n")
    with pytest.raises(ConfigError, match="no_such_variable"):  # StrictUndefined
        render_script(build_vars(nodes=1, run_dir="/r", command=["x"]), broken)


def test_slurm_time_forms():
    assert [slurm_time_seconds(t) for t in ("90", "2:30", "2:30:00", "1-12", "1-12:30", "1-0:0:15")] == [
        5400, 150, 9000, 129600, 131400, 86415]
    assert slurm_time_seconds("UNLIMITED") is None


HOSTILE = ["it's", 'say "hi"', "a; rm -rf /", "$(touch /tmp/nvrx-pwned)", "`id`", "line1\nline2", "  ", "*", "$HOME",
           "#not-a-comment", "back\\slash", ""]


def test_hostile_values_reach_the_launcher_exactly(tmp_path):
    """Run the rendered script with bash (outside Slurm the #SBATCH lines are comments): the 'python' it
    execs records its argv, which must be exactly what render was given."""
    record = tmp_path / "argv.json"
    fake = tmp_path / "fake python $(x) 'q'"
    fake.write_text(f"#!{sys.executable}\nimport json, sys\njson.dump(sys.argv[1:], open({str(record)!r}, 'w'))\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    run_dir = "/tmp/runs/it's $(touch /tmp/nvrx-pwned); `id` \"x\""
    variables = build_vars(nodes=1, run_dir=run_dir, command=["train", *HOSTILE], python=str(fake),
                           job_name="j'o\"b; $(id) `id` #x", partition="p1,p-2")
    script = tmp_path / "job.sbatch"
    script.write_text(render_script(variables))
    done = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=30, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(record.read_text()) == [
        "-m", "nvrx_hpc", "run", "--spares", "0", "--tasks-per-node", "1", "--run-dir", run_dir, "--",
        "train", *HOSTILE,
    ]
    assert not Path("/tmp/nvrx-pwned").exists()
    sbatch_lines = [line for line in script.read_text().splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --job-name='j'\"'\"'o\"b; $(id) `id` #x'" in sbatch_lines
