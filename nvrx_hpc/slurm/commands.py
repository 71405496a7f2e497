"""The Slurm command lines product code runs outside the backend: srun steps, sbatch, `scontrol show config`,
`srun --help`. Built here so that nvrx_hpc.slurm is the only package that spells a Slurm command; the
callers choose what runs inside the step."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from nvrx_hpc.core.errors import SlurmParseError
from nvrx_hpc.slurm.hostlist import compress
from nvrx_hpc.slurm.parse_text import parse_show_config
from nvrx_hpc.slurm.runner import CommandRunner, CompletedCommand

__all__ = ["srun_argv", "srun_help", "submit_batch", "show_config", "without_spank_options", "NVRX_PLUGIN"]

NVRX_PLUGIN = "nvrx"  # our SPANK plugin's name, as Slurm spells its options in the environment

# Where an srun inside an allocation finds the SPANK options its job was submitted with: sbatch hands them to
# the batch script's environment under these prefixes, and every srun there applies them to its step.
_SPANK_OPTION_PREFIXES = ("SLURM_SPANK__SLURM_SPANK_OPTION_", "_SLURM_SPANK_OPTION_")


def without_spank_options(env: dict[str, str], plugin: str) -> dict[str, str]:
    """`env` less the options of SPANK `plugin` that the job was submitted with, so that a step launched with
    it gets only the options its own command line gives: `sbatch --nvrx` must not turn the plugin on for a
    health probe, whose task would register as a rank. Only for steps that never run first on a node: without
    PrologFlags=Alloc the Prolog there runs at the first step and reads its options."""
    inherited = tuple(f"{prefix}{plugin}_" for prefix in _SPANK_OPTION_PREFIXES)
    return {k: v for k, v in env.items() if not k.startswith(inherited)}


def srun_argv(
    nodes: Sequence[str],
    command: Sequence[str],
    *,
    job_name: str,
    tasks_per_node: int | None = 1,
    kill_on_bad_exit: bool = True,
    output: Path | None = None,
    append: bool = False,
    label: bool = False,
    cpus_per_task: int | None = None,
    gpus_per_task: int | None = None,
    extra: Sequence[str] = (),
    export: Sequence[str] | None = None,
) -> list[str]:
    """A step inside the current allocation on exactly `nodes`: `--overlap` so it shares CPUs with the
    steps already running (the agents beside the training), quiet and unbuffered.

    `tasks_per_node` None gives one task in all (a probe); `export` names the variables passed on top
    of the whole environment (`--export=ALL,...`).
    """
    argv = ["srun", "--overlap", f"--nodes={len(nodes)}", f"--nodelist={compress(list(nodes))}"]
    if tasks_per_node is None:
        argv.append("--ntasks=1")
    else:
        argv += [f"--ntasks-per-node={tasks_per_node}", f"--ntasks={len(nodes) * tasks_per_node}"]
    argv += [f"--kill-on-bad-exit={int(kill_on_bad_exit)}", f"--job-name={job_name}"]
    if output is not None:
        argv.append(f"--output={output}")
    if append:
        argv.append("--open-mode=append")
    if label:
        argv.append("--label")
    argv += ["--quiet", "--unbuffered"]
    if cpus_per_task is not None:
        argv.append(f"--cpus-per-task={cpus_per_task}")
    if gpus_per_task is not None:
        argv.append(f"--gpus-per-task={gpus_per_task}")
    argv += list(extra)
    if export is not None:
        argv.append("--export=" + ",".join(["ALL", *sorted(export)]))
    return [*argv, *command]


def srun_help(runner: CommandRunner, timeout: float) -> CompletedCommand:
    """`srun --help`: its option list shows which SPANK plugins srun loaded (ours adds `--nvrx`)."""
    return runner.run(["srun", "--help"], timeout=timeout, check=False)


def submit_batch(runner: CommandRunner, script: Path, timeout: float) -> str:
    """`sbatch --parsable SCRIPT`; returns the job id.

    Raises:
        SlurmError: sbatch failed or timed out (from the runner); SlurmParseError: no job id in its reply.
    """
    done = runner.run(["sbatch", "--parsable", str(script)], timeout=timeout)
    job = done.stdout.strip().split(";")[0]
    if not job.isdigit():
        raise SlurmParseError("sbatch --parsable output (a job id)", done.stdout)
    return job


def show_config(runner: CommandRunner, timeout: float) -> dict[str, str]:
    """`scontrol show config` as a map of its keys (the live configuration slurmctld uses).

    Raises:
        SlurmError: scontrol failed or timed out.
    """
    return parse_show_config(runner.run(["scontrol", "show", "config"], timeout=timeout).stdout)
