"""`nvrx-hpc cluster up|down|status|env`: a real Slurm cluster on this host for tests and the demo."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

import nvrx_hpc
from nvrx_hpc.cli._output import JsonOption, print_json, print_result, print_table
from nvrx_hpc.core.config import ClusterConfig, load_config
from nvrx_hpc.core.errors import ConfigError, NvrxError
from nvrx_hpc.core.exit_codes import ExitCode
from nvrx_hpc.slurm.devcluster import ClusterStatus, DevCluster, DevClusterSpec
from nvrx_hpc.slurm.spank_build import build_plugin

app = typer.Typer(help="A real local Slurm cluster (munge, slurmctld, N slurmd) for tests and the demo.")

_STATE_DIR = typer.Option(
    None, "--state-dir", help="Where the cluster keeps everything [default: cluster.state_dir, /tmp/nvrx-cluster]."
)


def _cluster_config(**flags) -> ClusterConfig:
    """Flags given on the command line override the config (site TOML, NVRX_CLUSTER__* env)."""
    overrides = {f"cluster.{key}": value for key, value in flags.items() if value is not None}
    return load_config(overrides=overrides).config.cluster


def _state_dir(flag: Path | None) -> Path:
    return Path(_cluster_config(state_dir=str(flag.absolute()) if flag else None).state_dir)


def _default_plugin(state_dir: Path) -> Path | None:
    """The plugin built from the sources the package carries, into <state dir>/plugin (make is incremental)."""
    try:
        return build_plugin(state_dir / "plugin", version=nvrx_hpc.__version__)
    except NvrxError as exc:
        typer.secho(f"warning: cannot build the SPANK plugin: {exc.message}", err=True)
        return None


def _status_dict(status: ClusterStatus) -> dict:
    return {
        "running": status.running,
        "state_dir": status.state_dir,
        "slurm_conf": status.slurm_conf,
        "error": status.error,
        "daemons": [{"name": d.name, "pid": d.pid, "alive": d.alive} for d in status.daemons],
        "nodes": [
            {"name": n.name, "state": n.state, "flags": sorted(n.flags), "reason": n.reason or ""}
            for n in status.nodes
        ],
    }


def _print_status(status: ClusterStatus, as_json: bool) -> None:
    data = _status_dict(status)
    if as_json:
        print_json(data)
        return
    rows = [{**n, "node": n["name"], "flags": ",".join(n["flags"])} for n in data["nodes"]]
    print_table(rows, ["node", "state", "flags", "reason"], False, title=f"dev cluster at {status.state_dir}")
    daemons = ", ".join(f"{d.name}({d.pid}{'' if d.alive else ' dead'})" for d in status.daemons)
    print_result(data, False, [f"daemons: {daemons or 'none'}", *([status.error] if status.error else []),
                               f"use it: eval \"$(nvrx-hpc cluster env --state-dir {shlex.quote(status.state_dir)})\""])


@app.command()
def up(
    nodes: int | None = typer.Option(None, "--nodes", "-n", min=1, max=64, help="Virtual nodes n1..nN [default: 4]."),
    state_dir: Path | None = _STATE_DIR,
    cpus: int | None = typer.Option(None, "--cpus-per-node", min=1, help="CPUs each node declares [default: 2]."),
    ctld_port: int | None = typer.Option(None, "--ctld-port", min=1024, max=65535, help="slurmctld port [16817]."),
    slurmd_port_base: int | None = typer.Option(
        None, "--slurmd-port-base", min=1024, max=65535, help="Port of n1; nK uses base+K-1 [default: 16901]."
    ),
    spank: Path | None = typer.Option(
        None, "--spank", help="SPANK plugin to load [default: built from the packaged sources into STATE_DIR/plugin]."
    ),
    no_spank: bool = typer.Option(False, "--no-spank", help="Start without the SPANK plugin."),
    timeout: float = typer.Option(60.0, "--timeout", min=1, help="Seconds to wait for all nodes to be idle."),
    as_json: JsonOption = False,
) -> None:
    """Start munge, slurmctld and N slurmd, and wait until every node is idle (idempotent)."""
    if spank is not None and no_spank:
        raise ConfigError("--spank and --no-spank exclude each other", hint="give one of them")
    if spank is not None and not spank.is_file():
        raise ConfigError(
            f"SPANK plugin {spank} does not exist",
            hint="leave --spank out (`up` builds the packaged sources), or build one with `make -C spank`",
        )
    settings = _cluster_config(
        state_dir=str(state_dir.absolute()) if state_dir else None,
        nodes=nodes,
        cpus_per_node=cpus,
        ctld_port=ctld_port,
        slurmd_port_base=slurmd_port_base,
    )
    plugin = None if no_spank else (spank.resolve() if spank else _default_plugin(Path(settings.state_dir)))
    if plugin is None and not no_spank:
        typer.secho("warning: starting the dev cluster without the SPANK plugin", err=True)
    spec = DevClusterSpec(
        state_dir=Path(settings.state_dir),
        nodes=settings.nodes,
        cpus_per_node=settings.cpus_per_node,
        ctld_port=settings.ctld_port,
        slurmd_port_base=settings.slurmd_port_base,
        spank_plugin=plugin,
    )
    status = DevCluster(spec).up(timeout=timeout)
    _print_status(status, as_json)


@app.command()
def down(
    state_dir: Path | None = _STATE_DIR,
    keep_munge: bool = typer.Option(False, "--keep-munge", help="Leave munged running even if we started it."),
    as_json: JsonOption = False,
) -> None:
    """Cancel the cluster's jobs and stop exactly the daemons `up` started."""
    state_dir = _state_dir(state_dir)
    try:
        cluster = DevCluster.at(state_dir)
    except NvrxError:
        print_result({"state_dir": str(state_dir), "stopped": []}, as_json,
                     f"no dev cluster at {state_dir}; nothing to stop")  # fmt: skip
        return
    stopped = cluster.down(stop_munge=not keep_munge)
    print_result({"state_dir": str(state_dir), "stopped": stopped}, as_json,
                 f"stopped {len(stopped)} daemons: {', '.join(stopped) or 'none were running'}")  # fmt: skip


@app.command()
def status(state_dir: Path | None = _STATE_DIR, as_json: JsonOption = False) -> None:
    """Show the daemons and nodes; exits 69 when the cluster is not running."""
    result = DevCluster.at(_state_dir(state_dir)).status()
    _print_status(result, as_json)
    if not result.running:
        raise typer.Exit(int(ExitCode.UNAVAILABLE))


@app.command()
def env(state_dir: Path | None = _STATE_DIR, as_json: JsonOption = False) -> None:
    """Print the exports a shell needs: eval "$(nvrx-hpc cluster env)"."""
    variables = DevCluster.at(_state_dir(state_dir)).env
    print_result(variables, as_json, [f"export {key}={shlex.quote(value)}" for key, value in variables.items()])


# ---- simulated GPU faults (the `sim` health backend reads them; see docs/health.md) ----------------


def _fault_nodes(state_dir: Path | None, nodes: list[str]) -> tuple[Path, list[str]]:
    from nvrx_hpc.slurm.devcluster import Layout

    cluster = DevCluster.at(_state_dir(state_dir))
    unknown = [n for n in nodes if n not in cluster.spec.node_names]
    if unknown:
        names = ", ".join(cluster.spec.node_names)
        raise ConfigError(f"no node {', '.join(unknown)} in the dev cluster; nodes are {names}")
    return Layout(cluster.spec.state_dir).gpu_faults, nodes


@app.command("inject-gpu-fault")
def inject_gpu_fault(
    node: str = typer.Argument(..., help="Virtual node, e.g. n2."),
    faults: list[str] = typer.Argument(..., help="KEY=VALUE[@GPU], e.g. xid=79 or ecc_uncorrected=2@1."),
    state_dir: Path | None = _STATE_DIR,
    as_json: JsonOption = False,
) -> None:
    """Inject simulated GPU faults on a node (read by health.gpu_backend = sim)."""
    from nvrx_hpc.health.sim_faults import inject, parse_fault

    parsed = [parse_fault(f) for f in faults]
    fault_dir, _ = _fault_nodes(state_dir, [node])
    total = inject(fault_dir, node, parsed)
    file = fault_dir / (node + ".json")
    print_result({"node": node, "injected": len(parsed), "total": len(total), "file": str(file)}, as_json,
                 f"{node}: {len(parsed)} fault(s) injected, {len(total)} in {file}")  # fmt: skip


@app.command("clear-gpu-faults")
def clear_gpu_faults(
    nodes: list[str] | None = typer.Argument(None, help="Nodes to clear [default: every node]."),
    state_dir: Path | None = _STATE_DIR,
    as_json: JsonOption = False,
) -> None:
    """Remove the simulated GPU faults of some nodes (default: all)."""
    from nvrx_hpc.health.sim_faults import clear

    fault_dir, names = _fault_nodes(state_dir, list(nodes or []))
    cleared = clear(fault_dir, names or None)
    text = f"cleared simulated GPU faults of: {', '.join(cleared) or 'no node had any'}"
    print_result({"cleared": cleared}, as_json, text)


def register(root: typer.Typer) -> None:
    root.add_typer(app, name="cluster")
