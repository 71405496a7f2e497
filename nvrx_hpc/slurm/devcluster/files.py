"""Writes the dev cluster's configuration: slurm.conf, per-node dirs, plugstack, hook wrappers, env."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import shlex
import sys
from dataclasses import asdict
from importlib import resources
from pathlib import Path

import jinja2

import nvrx_hpc
from nvrx_hpc.slurm.devcluster.layout import DevClusterSpec, Layout

__all__ = ["write_config", "client_env", "read_spec", "spec_to_json", "config_fingerprint", "running_fingerprint"]

_TEMPLATES = jinja2.Environment(
    loader=jinja2.PackageLoader("nvrx_hpc.slurm.devcluster", ""),  # package data, also inside a wheel
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,  # noqa: S701 - renders slurm.conf, not HTML
)


def client_env(layout: Layout) -> dict[str, str]:
    """What a shell, a test or a job needs to use this cluster."""
    return {
        "SLURM_CONF": str(layout.slurm_conf),
        # Open MPI across virtual nodes of one host: shared-memory segment names collide, so TCP on lo only.
        "OMPI_MCA_btl": "self,tcp",
        "OMPI_MCA_btl_tcp_if_include": "lo",
        "OMPI_MCA_oob_tcp_if_include": "lo",
        "OMPI_ALLOW_RUN_AS_ROOT": "1",
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
        "GLOO_SOCKET_IFNAME": "lo",
        "NVRX_CLUSTER__STATE_DIR": str(layout.root),
        "NVRX_AGENT__SOCKET": agent_socket_template(layout),  # where site agents listen (site mode)
        "NVRX_AGENT__RECORD_DIR": str(layout.agent_records),  # root's pid records of site agents
        # User-mode agents check the same per-node burst buffers as the Prolog (bb/nK is 1777; /dev/shm/nvrx,
        # the default, may belong to root and refuse another user's job).
        "NVRX_AGENT__BB_DIR": f"{layout.root}/bb/%n/%j",
    }


def agent_socket_template(layout: Layout) -> str:
    """The site agents' socket: the plugstack's agent_socket, the Prolog's and the launcher's agent.socket."""
    return f"{layout.root}/run/%n/agent-%j.sock"


def spec_to_json(spec: DevClusterSpec) -> str:
    data = asdict(spec)
    data.pop("node_names")
    return json.dumps({k: (str(v) if isinstance(v, Path) else v) for k, v in data.items()}, sort_keys=True)


def read_spec(layout: Layout) -> DevClusterSpec | None:
    try:
        data = json.loads(layout.spec_file.read_text())
    except (OSError, ValueError):
        return None
    plugin = data.get("spank_plugin")
    return DevClusterSpec(
        state_dir=Path(data["state_dir"]),
        nodes=data["nodes"],
        cpus_per_node=data["cpus_per_node"],
        ctld_port=data["ctld_port"],
        slurmd_port_base=data["slurmd_port_base"],
        spank_plugin=Path(plugin) if plugin else None,
        cluster_name=data["cluster_name"],
    )


def _hook_wrapper(kind: str, layout: Layout) -> str:
    """Slurm's Prolog= takes a path without arguments, so a two-line wrapper calls `nvrx-hpc prolog`."""
    # slurmd runs the hooks with a bare environment: point it at the sys.path entry this nvrx_hpc was
    # imported from (site-packages, or a tree on PYTHONPATH), so the hooks run the same code as `up`.
    import_root = Path(nvrx_hpc.__file__).resolve().parent.parent
    env = {
        "PYTHONPATH": str(import_root),
        "NVRX_HEALTH__HOOK_LOG": str(layout.log / "hooks.jsonl"),
        "NVRX_CLUSTER__STATE_DIR": str(layout.root),
        # No GPUs here: the health gate reads simulated GPUs and the faults injected under gpu-faults/.
        "NVRX_HEALTH__GPU_BACKEND": "sim",
        "NVRX_AGENT__BB_DIR": str(layout.root / "bb" / "%n" / "%j"),  # the same per-node dirs as plugstack
        "NVRX_AGENT__SOCKET": agent_socket_template(layout),
        "NVRX_AGENT__RECORD_DIR": str(layout.agent_records),
    }
    exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
    return (
        "#!/bin/sh\n"
        f"# Written by `nvrx-hpc cluster up`: slurmd runs this as root as the {kind.capitalize()}.\n"
        f"export {exports}\n"
        f"exec {shlex.quote(sys.executable)} -m nvrx_hpc {kind}\n"
    )


def _plugstack_line(spec: DevClusterSpec, layout: Layout) -> str:
    # `required`: a misconfigured plugin must stop jobs loudly; at run time it fails open by itself.
    args = [
        f"agent_socket={agent_socket_template(layout)}",
        f"bb_dir={layout.root}/bb/%n/%j",
        "timeout_ms=500",
        "default=off",
    ]
    return f"required {spec.spank_plugin} {' '.join(args)}\n"


def write_config(spec: DevClusterSpec, layout: Layout) -> None:
    """Write every file a fresh start needs. Job state and spool are reset by the caller."""
    for path in (layout.etc, layout.state, layout.log, layout.pids, layout.plugstack_dir, layout.gpu_faults):
        path.mkdir(parents=True, exist_ok=True)
    user = pwd.getpwuid(os.getuid()).pw_name
    node_list = f"n[1-{spec.nodes}]" if spec.nodes > 1 else "n1"
    text = _TEMPLATES.get_template("slurm.conf.j2").render(spec=spec, layout=layout, user=user, node_list=node_list)
    layout.slurm_conf.write_text(text)
    for node in spec.node_names:
        for path in (layout.node_etc(node), layout.spool(node), layout.pmix(node)):
            path.mkdir(parents=True, exist_ok=True)
        for path in (layout.agent_run(node), layout.burst_buffer(node)):
            path.mkdir(parents=True, exist_ok=True)
            path.chmod(0o1777)  # jobs of any user make their own sub-directories here
        # Each slurmd reads its own directory, so each gets a private PMIx tmp dir: without it
        # `srun --mpi=pmix` across virtual nodes fails on a shared /tmp/spmix_appdir_* path.
        link = layout.node_etc(node) / "slurm.conf"
        if not link.is_symlink():
            link.symlink_to("../slurm.conf")
        (layout.node_etc(node) / "mpi.conf").write_text(f"PMIxCliTmpDirBase={layout.pmix(node)}\n")
    layout.plugstack_conf.write_text(f"include {layout.plugstack_dir}/*.conf\n")
    plugin_conf = layout.plugstack_dir / "nvrx.conf"
    if spec.spank_plugin is not None:
        plugin_conf.write_text(_plugstack_line(spec, layout))
    elif plugin_conf.exists():
        plugin_conf.unlink()
    for kind in ("prolog", "epilog"):
        script = layout.hook_script(kind)
        script.write_text(_hook_wrapper(kind, layout))
        script.chmod(0o755)
    env = client_env(layout)
    layout.env_file.write_text("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()))
    layout.spec_file.write_text(spec_to_json(spec) + "\n")
    (layout.etc / "fingerprint").write_text(config_fingerprint() + "\n")


def config_fingerprint() -> str:
    """A hash of the code that writes the cluster's files: a running cluster older than it is restarted."""
    digest = hashlib.sha256()
    here = resources.files("nvrx_hpc.slurm.devcluster")
    for name in ("files.py", "slurm.conf.j2"):
        digest.update(here.joinpath(name).read_bytes())
    return digest.hexdigest()[:16]


def running_fingerprint(layout: Layout) -> str | None:
    try:
        return (layout.etc / "fingerprint").read_text().strip()
    except OSError:
        return None
