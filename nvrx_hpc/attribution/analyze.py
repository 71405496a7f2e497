"""The attribution entry point: read a run directory (or loose log and dump files), scan, analyse the
flight recorder, decide, and return a `Report`. The restart loop calls `analyze_run(run_dir)` and reads
`report.verdict.action` / `.exclude_nodes`; the CLI and the Epilog also write the report files.

Every file that cannot be read becomes an entry of `report.problems`; the analysis never stops for one.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from nvrx_hpc.attribution.aliases import apply_aliases
from nvrx_hpc.attribution.api import SCHEMA_VERSION, FileProblem, Hit, Verdict
from nvrx_hpc.attribution.batch_host import place_on_batch_host
from nvrx_hpc.attribution.cgroup_task import global_cgroup_tasks
from nvrx_hpc.attribution.channel_ranks import rank_pids_by_channels
from nvrx_hpc.attribution.coll_ops import CollSample, odd_collective
from nvrx_hpc.attribution.collector_clock import drop_lagging_collector_stamps
from nvrx_hpc.attribution.crash_exit import aborts_after_exceptions, crash_exits
from nvrx_hpc.attribution.dump_pids import other_pid_dumps
from nvrx_hpc.attribution.exit_codes import place_by_exit_codes, quiet_terminated
from nvrx_hpc.attribution.fabric import loopback_alone, refused_everywhere
from nvrx_hpc.attribution.file_hosts import place_by_file_host, rank_file_host
from nvrx_hpc.attribution.file_rank import file_proc_ranks
from nvrx_hpc.attribution.fingerprints import drifted_fingerprints
from nvrx_hpc.attribution.first_reporter import first_gpu_reporter
from nvrx_hpc.attribution.fr_analysis import FRReport, analyze_files
from nvrx_hpc.attribution.gpu_bus import named_pair_ranks
from nvrx_hpc.attribution.horovod_stall import lone_stalled_path
from nvrx_hpc.attribution.inputs import RunFiles, discover, rank_of, read_events, read_health, read_records
from nvrx_hpc.attribution.launchers import exception_before_exit
from nvrx_hpc.attribution.library_asserts import library_asserts
from nvrx_hpc.attribution.lines import LineContext
from nvrx_hpc.attribution.local_ranks import launched_worker_ranks, log_dir_ranks, mark_local_prefixes
from nvrx_hpc.attribution.localise import (
    align_years,
    drop_recovered,
    enrich,
    name_victims,
    node_of_file,
    sample_file,
    traceback_ranks,
)
from nvrx_hpc.attribution.lost_node import place_lost_daemon
from nvrx_hpc.attribution.node_ranks import shared_node_ranks
from nvrx_hpc.attribution.one_host_file import place_by_one_host_file
from nvrx_hpc.attribution.output_blocks import block_ranks
from nvrx_hpc.attribution.pod_descriptions import place_in_descriptions, read_descriptions
from nvrx_hpc.attribution.prompts import Session, place_by_prompts, read_prompts
from nvrx_hpc.attribution.ray_actor import dead_actor_pids
from nvrx_hpc.attribution.resources import DiskRow, shm_bus_errors
from nvrx_hpc.attribution.scanner import Scanner
from nvrx_hpc.attribution.single_process import single_process_rank
from nvrx_hpc.attribution.smi_sections import smi_csv_throttles, smi_low_pstate, smi_section_gpus
from nvrx_hpc.attribution.spawn_ranks import spawn_ranks
from nvrx_hpc.attribution.srun_cancel import hang_before_limit, hung_cancels, other_jobs_ends, own_cancels
from nvrx_hpc.attribution.stall import stalled_before_limit
from nvrx_hpc.attribution.store_master import store_on_rank0
from nvrx_hpc.attribution.verdict import Findings, decide
from nvrx_hpc.attribution.xid_app import accesses_the_driver_blames
from nvrx_hpc.core.errors import AttributionError

__all__ = ["Report", "analyze", "analyze_run"]

log = logging.getLogger(__name__)
_JOB_DIR = re.compile(r"^\d+(?:_\d+)?$")
_SLURM_OUT = re.compile(r"^slurm-(\d+(?:_\d+)?)\.(?:out|err|log)$")


@dataclass(frozen=True)
class Report:
    """A verdict plus what it was made from. `to_dict()` is the content of report.json."""

    verdict: Verdict
    job_id: str | None
    run_dir: str | None
    generated_at: float
    seconds: float
    inputs: dict[str, int]
    problems: tuple[FileProblem, ...]
    fr: FRReport | None
    engine: str
    hits: tuple[Hit, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "job_id": self.job_id,
            "run_dir": self.run_dir,
            "generated_at": datetime.fromtimestamp(self.generated_at, timezone.utc).isoformat(),
            "analysis_seconds": round(self.seconds, 3),
        }
        out.update(self.verdict.to_dict())
        out["flight_recorder"] = self.fr.to_dict() if self.fr is not None else None
        out["errors"] = [p.to_dict() for p in self.problems]
        out["inputs"] = {**self.inputs, "engine": self.engine}
        return out


def _job_id(files: RunFiles, events: Sequence[Any], hits: Sequence[Hit], given: str | None) -> str | None:
    """The job id: given, else the run directory's name, the launcher's events (`job`, also under
    `detail`), `status.json`, a `slurm-<id>.out` file name, or Slurm's `*** JOB <id> ON` line."""
    if given:
        return given
    if files.root is not None and _JOB_DIR.match(files.root.name):
        return files.root.name
    for e in events:
        detail = e.raw.get("detail") if isinstance(e.raw.get("detail"), dict) else {}
        for value in (e.raw.get("job_id"), e.raw.get("job"), detail.get("job_id"), detail.get("job")):
            if value not in (None, "") and _JOB_DIR.match(str(value)):
                return str(value)
    if files.root is not None:
        try:
            status = json.loads((files.root / "status.json").read_text(encoding="utf-8"))
            if isinstance(status, dict) and _JOB_DIR.match(str(status.get("job", ""))):
                return str(status["job"])
        except (OSError, ValueError):
            pass
    for path in files.logs:
        m = _SLURM_OUT.match(path.name)
        if m:
            return m.group(1)
    for h in hits:
        job = h.fields.get("job", "")
        if _JOB_DIR.match(job.split(".")[0]):
            return job.split(".")[0]
    return None


def _scan_logs(
    scanner: Scanner, files: RunFiles, since: float | None, problems: list[FileProblem], seen_ranks: set[int],
    dated: list[float], rank_hosts: dict[int, str], addr_hosts: dict[str, str], disks: list[DiskRow],
    listed: set[str], aliases: dict[str, str], at_prompts: set[str], calls: list[CollSample],
    file_ranks: dict[str, dict[int, str]], shells: Session, pods: dict[str, str],
) -> tuple[list[Hit], int]:
    """Hits of every log and stack file; `seen_ranks` gets the ranks their line prefixes and names show,
    `dated` a few of their dated stamps, `rank_hosts` the hosts their prefixes pair with ranks,
    `addr_hosts` the hosts their lines pair with network addresses, `disks` their `df` rows, `listed` the
    hosts of the nodelists they print, `aliases` the Slurm names of hosts and addresses, `file_ranks` each file's
    own rank -> host pairs, `shells` what the pasted sessions say together (their hosts, the hosts they ran a program
    on, whether they started several processes, their containers' hosts), `pods` the node of each Kubernetes pod."""
    hits: list[Hit] = []
    scanned = 0
    # A directory a kernel log is named by (`node036/dmesg.txt`) is that host's: its other files are too.
    host_dirs = {p.parent: p.parent.name for p in files.logs if node_of_file(p, files.root) == p.parent.name}
    for index, path in enumerate([*files.logs, *files.stacks], start=1):
        source = files.source(path)
        try:
            stat = path.stat()
            if since is not None and stat.st_mtime < since:
                continue
            year = datetime.fromtimestamp(stat.st_mtime).year
            rank = rank_of(path)
            named_host = rank_file_host(path.name) if rank is not None else None
            ctx = LineContext(source, rank=rank, year=year, file_index=index,
                              node=node_of_file(path, files.root) or host_dirs.get(path.parent) or named_host)
            found = scanner.scan_file(path, ctx)
            session = read_prompts(path)
            shells.named |= session.named
            shells.ran_on |= session.ran_on
            shells.several = shells.several or session.several
            shells.p2p_off_trains = shells.p2p_off_trains or session.p2p_off_trains
            shells.loopback |= session.loopback
            for container, host in session.containers.items():
                aliases.setdefault(container, host)
            for addr, host in session.addresses.items():
                addr_hosts.setdefault(addr, host)
            found = place_by_prompts(found, session.prompts, file_host=ctx.node, ranks=session.started)
            found = place_in_descriptions(found, read_descriptions(path))
            at_prompts.update(host for _, host in session.prompts if host)
            for r, host in session.env_ranks.items():
                rank_hosts.setdefault(r, host)
            sampled = sample_file(path)
            seen_ranks.update(sampled.ranks)
            dated.extend(sampled.dated)
            for r, host in sampled.hosts.items():
                rank_hosts.setdefault(r, host)
            file_ranks[source] = dict(sampled.hosts)
            for addr, host in sampled.addresses.items():
                addr_hosts.setdefault(addr, host)
            disks.extend(sampled.disks)
            listed.update(sampled.listed)
            calls.append(sampled.coll)
            for alias, node in sampled.aliases.items():
                aliases.setdefault(alias, node)
            for pod, node in sampled.pods.items():
                pods.setdefault(pod, node)
            if rank is not None:
                seen_ranks.add(rank)
            if named_host is not None:
                rank_hosts.setdefault(rank, named_host)
        except OSError as exc:
            problems.append(FileProblem(source, f"cannot read: {exc.strerror or exc}"))
            continue
        except AttributionError as exc:
            problems.append(FileProblem(source, exc.message))
            continue
        scanned += stat.st_size
        hits.extend(found)
    return hits, scanned


def analyze(
    paths: Sequence[str | Path],
    *,
    job_id: str | None = None,
    job_state: str | None = None,
    job_nodes: Sequence[str] = (),
    engine: str = "auto",
    since: float | None = None,
) -> Report:
    """Analyse a run directory or a set of log, events, failure-record and flight-recorder files.

    `job_state` / `job_nodes`: what Slurm says about the job (e.g. "TIMEOUT"), if the caller asked it.
    `since`: ignore files, events and lines older than this epoch time (the restart loop passes the
    start of the attempt it judges).

    Raises:
        AttributionError: no input, a path that does not exist, or an unknown scan engine.
    """
    started = time.monotonic()
    files = discover([Path(p) for p in paths])
    scanner = Scanner(engine=engine)
    problems: list[FileProblem] = []
    events = []
    for path in files.events:
        found, bad = read_events(path, files.source(path))
        events.extend(found)
        problems.extend(bad)
    records, bad = read_records(files.records, files)
    problems.extend(bad)
    health, bad = read_health(files.health, files)
    problems.extend(bad)
    if since is not None:
        events = [e for e in events if e.time is None or e.time >= since]
        records = [r for r in records if r.time is None or r.time >= since]
    seen_ranks: set[int] = set()
    dated: list[float] = []
    rank_hosts: dict[int, str] = {}
    addr_hosts: dict[str, str] = {}
    disks: list[DiskRow] = []
    listed: set[str] = set()
    aliases: dict[str, str] = {}
    at_prompts: set[str] = set()
    calls: list[CollSample] = []
    file_ranks: dict[str, dict[int, str]] = {}
    shells = Session()
    pods: dict[str, str] = {}
    hits, scanned = _scan_logs(scanner, files, since, problems, seen_ranks, dated, rank_hosts, addr_hosts, disks,
                               listed, aliases, at_prompts, calls, file_ranks, shells, pods)
    # a pod the logs' lines name (its host name, before it becomes its node's): the job's, not a listing's neighbour
    named = {h.node for h in hits if h.node} | set(rank_hosts.values())
    hits = place_by_file_host(apply_aliases(hits, rank_hosts, addr_hosts, aliases, {*at_prompts, *shells.named}),
                              {*listed, *rank_hosts.values()})  # fmt: skip
    hits = place_by_one_host_file(hits, file_ranks)
    hits = drop_lagging_collector_stamps(shm_bus_errors(other_pid_dumps(hits), disks))
    for r in records:
        if r.traceback:
            ctx = LineContext(r.source, rank=r.rank, node=r.node, file_index=0)
            hits.extend(dataclasses.replace(h, time=h.time or r.time) for h in scanner.scan_text(r.traceback, ctx))
    dated += [t for t in (*(e.time for e in events), *(r.time for r in records)) if t]
    hits = global_cgroup_tasks(align_years(launched_worker_ranks(log_dir_ranks(mark_local_prefixes(hits))), dated))
    hits = traceback_ranks(place_by_exit_codes(spawn_ranks(block_ranks(file_proc_ranks(hits)))))
    hits = enrich(dead_actor_pids(hits))
    hits = exception_before_exit(hits)
    hits = name_victims(drop_recovered(traceback_ranks(hits, headers=("ray_task_error",))))
    hits = quiet_terminated(aborts_after_exceptions(crash_exits(library_asserts(accesses_the_driver_blames(hits)))))
    hits = rank_pids_by_channels(hits, ((files.source(p), p) for p in files.logs))  # the few pids left unranked
    hits = shared_node_ranks(hang_before_limit(hung_cancels(own_cancels(other_jobs_ends(hits)))))
    by_source = {files.source(p): p for p in files.logs}
    hits = smi_csv_throttles(smi_section_gpus(stalled_before_limit(hits, by_source), by_source), by_source)
    hits = smi_low_pstate(hits)
    hits = single_process_rank(place_on_batch_host(store_on_rank0(hits)))
    hits = lone_stalled_path(first_gpu_reporter(place_lost_daemon(named_pair_ranks(hits, rank_hosts))))
    hits = drifted_fingerprints(refused_everywhere(hits))
    hits = loopback_alone(hits, {*listed, *shells.named, *rank_hosts.values(), *(h.node for h in hits if h.node)})
    if since is not None:
        hits = [h for h in hits if h.time is None or h.time >= since]
    dumps = files.fr_dumps if since is None else [p for p in files.fr_dumps if _mtime(p) >= since]
    fr = analyze_files(dumps, relative_to=files.root) if dumps else None  # an earlier attempt's dumps: not this
    if fr is not None:
        problems.extend(fr.problems)
    if job_state is None:  # not asked of Slurm: a pasted `sacct` row of the job says it (round 18)
        job_state = next((h.fields["state"] for h in hits if h.signature == "sacct_job_state"), None)
    verdict = decide(
        Findings(hits=hits, records=records, events=events, health=health, fr=fr, job_state=job_state,
                 job_nodes=tuple(job_nodes), listed_nodes=frozenset(listed), seen_ranks=frozenset(seen_ranks),
                 rank_hosts=rank_hosts, addr_hosts=addr_hosts, stamps=tuple(dated), disks=tuple(disks),
                 prompt_hosts=frozenset(at_prompts), shell_hosts=frozenset(shells.ran_on),
                 several_started=shells.several, odd_call=odd_collective(calls),
                 pod_nodes={p: n for p, n in pods.items() if p in named},
                 p2p_off_trains=shells.p2p_off_trains, loopback_hosts=frozenset(shells.loopback))
    )  # fmt: skip
    inputs = {
        "logs": len(files.logs),
        "log_bytes": scanned,
        "stack_dumps": len(files.stacks),
        "fr_dumps": len(files.fr_dumps),
        "failure_records": len(files.records),
        "events": len(events),
        "health_snapshots": len(files.health),
        "hits": len(hits),
    }
    return Report(
        verdict=verdict,
        job_id=_job_id(files, events, hits, job_id),
        run_dir=str(files.root) if files.root else None,
        generated_at=time.time(),
        seconds=time.monotonic() - started,
        inputs=inputs,
        problems=tuple(problems),
        fr=fr,
        engine=scanner.engine,
        hits=tuple(hits),
    )


def analyze_run(run_dir: str | Path, **kwargs: Any) -> Report:
    """`analyze([run_dir], ...)`: the call the restart loop makes to decide exclude / retry / stop."""
    path = Path(run_dir)
    if not path.is_dir():
        raise AttributionError(
            f"run directory {path} does not exist or is not a directory",
            hint="the launcher writes <submit dir>/nvrx-runs/<job id>/",
        )
    return analyze([path], **kwargs)


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return float("inf")  # gone or unreadable: analyze_files reports it as a problem
