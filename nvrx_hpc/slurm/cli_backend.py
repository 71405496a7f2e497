"""`SlurmBackend` over Slurm's command-line tools, every call through one `CommandRunner`.

Queries use `--json` where the installed Slurm has it and fall back to `scontrol -o show` text when
the option is missing or its output does not parse (then the backend stays on text, logging once):

| query | JSON (preferred) | text fallback |
|---|---|---|
| version | `sinfo --version` | |
| nodes | `sinfo --json` (21.08-22.05), `scontrol --json show nodes` (23.02+) | `scontrol -o show node` |
| jobs | `squeue --json --all --states=all`, filtered here (22.05 ignores -j) | `scontrol -o show job [ID]` |

From 23.02 on `sinfo --json` groups nodes per partition and state instead of listing them, so the
per-node `scontrol --json show nodes` is used there.

Changes are `scontrol update` argv lists; values travel as single argv items (`Reason=...`), so
spaces, quotes and `;` reach Slurm unchanged and nothing is ever parsed by a shell. Every command
has a deadline (10 s by default); a timeout raises SlurmTimeout, a failure SlurmCommandError naming
the argv and stderr.

Requeue with node exclusion is `requeuehold`, then `update ExcNodeList`, then `release`. The obvious
order (update, then `requeue`) fails on a running job: 22.05 refuses `update ExcNodeList` with "Job is
no longer pending execution", and after a plain `requeue` the update races the restart
(`cred_expire` + 1 s later). Holding first makes the update safe; `release` always follows.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import TypeVar

from nvrx_hpc.core.errors import SlurmCommandError, SlurmParseError
from nvrx_hpc.slurm.api import (
    JobInfo,
    NodeInfo,
    SlurmJobNotFound,
    SlurmNodeNotFound,
    SlurmRequestError,
    SlurmVersion,
)
from nvrx_hpc.slurm.hostlist import HostlistError, compress, expand
from nvrx_hpc.slurm.parse_json import parse_jobs_json, parse_nodes_json
from nvrx_hpc.slurm.parse_text import parse_jobs_text, parse_nodes_text, parse_version
from nvrx_hpc.slurm.runner import CommandRunner

__all__ = ["CliBackend", "DEFAULT_TIMEOUT"]

log = logging.getLogger(__name__)

DEFAULT_TIMEOUT = 10.0
T = TypeVar("T")

# stderr of a client that does not know --json (or cannot load its serializer plugin)
_NO_JSON_MARKERS = ("unrecognized option", "invalid option", "unknown option", "serializer", "data_parser")


def _json_unsupported(exc: SlurmCommandError) -> bool:
    text = exc.stderr.lower()
    return any(marker in text for marker in _NO_JSON_MARKERS)


def _job_id(job_id: int | str) -> str:
    text = str(job_id).strip()
    if not text.isdigit():
        raise SlurmRequestError(f"job id must be a number, got {job_id!r}")
    return text


def _node_names(nodes: Iterable[str] | str) -> list[str]:
    """Node names from a list of names or hostlists (`["n1", "n[3-4]"]`) or one hostlist string."""
    items = [nodes] if isinstance(nodes, str) else list(nodes)
    for item in items:
        if not isinstance(item, str) or any(ch.isspace() for ch in item):
            raise SlurmRequestError(f"bad node name or hostlist {item!r}: names hold no whitespace")
    try:
        names = [name for item in items for name in expand(item)]
        if not names:
            raise SlurmRequestError("no node names given")
        compress(names)  # rejects names holding brackets, commas or whitespace
    except HostlistError as exc:
        raise SlurmRequestError(f"bad node name or hostlist: {exc.message}") from exc
    return names


def _one_line(value: str, what: str) -> str:
    if not isinstance(value, str):
        raise SlurmRequestError(f"{what} must be text, got {type(value).__name__}")
    if "\n" in value or "\r" in value or "\0" in value:
        raise SlurmRequestError(f"{what} must be one line (no newline or NUL): {value!r}")
    return value


class CliBackend:
    """Talks to Slurm through sinfo, squeue and scontrol. `runner` is the one door to the commands.

    `timeout`: seconds per command; None takes the runner's `default_timeout` (10 s unless configured,
    see `slurm.command_timeout_s`). `use_json`: None decides from the version (`--json` from 21.08 on);
    False forces text.
    """

    def __init__(
        self,
        runner: CommandRunner | None = None,
        *,
        timeout: float | None = None,
        use_json: bool | None = None,
    ) -> None:
        self._runner = runner if runner is not None else CommandRunner()
        self.timeout = (
            timeout if timeout is not None else getattr(self._runner, "default_timeout", DEFAULT_TIMEOUT)
        )
        self._use_json = use_json
        self._version: SlurmVersion | None = None

    # ---- plumbing ----------------------------------------------------------------------------
    def _run(self, argv: list[str]) -> str:
        return self._runner.run(argv, timeout=self.timeout).stdout

    def _json_wanted(self) -> bool:
        if self._use_json is None:
            self._use_json = self.version().has_cli_json
        return self._use_json

    def _try_json(self, argv: list[str], parse: Callable[[str], T]) -> T | None:
        """Run a --json query and parse it; None (and text from now on) when JSON does not work here."""
        try:
            return parse(self._run(argv))
        except SlurmCommandError as exc:
            if not _json_unsupported(exc):
                raise
            why = exc.message
        except SlurmParseError as exc:
            why = exc.message
        log.warning("%s is unusable here (%s); using scontrol text output from now on", " ".join(argv), why)
        self._use_json = False
        return None

    def _update(self, argv: list[str], *, job_id: str | None = None, nodes: list[str] | None = None) -> None:
        """Run an scontrol change; map Slurm's "invalid id/name" answers to the not-found errors."""
        log.info("slurm: %s", " ".join(argv))
        try:
            self._run(argv)
        except SlurmCommandError as exc:
            text = exc.stderr.lower()
            if job_id is not None and "invalid job id" in text:
                raise SlurmJobNotFound(job_id) from exc
            if nodes is not None and "invalid node name" in text:
                known = [n.name for n in self.list_nodes()]
                missing = [n for n in nodes if n not in known] or nodes
                raise SlurmNodeNotFound(missing[0], known) from exc
            raise

    # ---- queries -----------------------------------------------------------------------------
    def version(self) -> SlurmVersion:
        if self._version is None:
            self._version = parse_version(self._run(["sinfo", "--version"]))
        return self._version

    def list_nodes(self) -> list[NodeInfo]:
        if self._json_wanted():
            argv = (
                ["scontrol", "--json", "show", "nodes"]
                if self.version().has_scontrol_json
                else ["sinfo", "--json"]
            )
            nodes = self._try_json(argv, parse_nodes_json)
            if nodes is not None:
                return nodes
        return parse_nodes_text(self._run(["scontrol", "-o", "show", "node"]))

    def node(self, name: str) -> NodeInfo:
        nodes = self.list_nodes()  # 22.05's sinfo --json ignores -n, so ask for all and pick
        for info in nodes:
            if info.name == name:
                return info
        raise SlurmNodeNotFound(name, [n.name for n in nodes])

    def jobs(self, job_ids: Iterable[int | str] | None = None) -> dict[int, JobInfo]:
        wanted = None if job_ids is None else {int(_job_id(j)) for j in job_ids}
        found: list[JobInfo] | None = None
        if self._json_wanted():
            found = self._try_json(["squeue", "--json", "--all", "--states=all"], parse_jobs_json)
        if found is None:
            argv = ["scontrol", "-o", "show", "job"]
            if wanted is not None and len(wanted) == 1:
                argv.append(str(next(iter(wanted))))
            try:
                found = parse_jobs_text(self._run(argv))
            except SlurmCommandError as exc:
                if "invalid job id" not in exc.stderr.lower():
                    raise
                found = []
        return {job.job_id: job for job in found if wanted is None or job.job_id in wanted}

    def job(self, job_id: int | str) -> JobInfo:
        number = int(_job_id(job_id))
        found = self.jobs([number]).get(number)
        if found is None:
            raise SlurmJobNotFound(number)
        return found

    # ---- changes -----------------------------------------------------------------------------
    def drain(self, nodes: Iterable[str] | str, reason: str) -> None:
        names = _node_names(nodes)
        if not _one_line(reason, "drain reason").strip():
            raise SlurmRequestError("Slurm requires a reason to drain a node; got an empty one")
        argv = ["scontrol", "update", f"NodeName={compress(names)}", "State=DRAIN", f"Reason={reason}"]
        self._update(argv, nodes=names)

    def resume(self, nodes: Iterable[str] | str) -> None:
        names = _node_names(nodes)
        try:
            self._update(["scontrol", "update", f"NodeName={compress(names)}", "State=RESUME"], nodes=names)
        except SlurmCommandError as exc:
            # 22.05 answers "Invalid node state specified" when a node is neither drained nor down.
            if "invalid node state" not in exc.stderr.lower():
                raise
            stuck = [n for n in self.list_nodes() if n.name in names and (n.drained or n.down)]
            if stuck:
                raise
            log.info("slurm: %s already resumed", compress(names))

    def requeue(
        self, job_id: int | str, exclude: Iterable[str] | str = (), nodes: int | None = None, tasks: int | None = None
    ) -> None:
        jid = _job_id(job_id)
        items = [exclude] if isinstance(exclude, str) else list(exclude)
        excluded = _node_names(items) if any(items) else []
        for name, value in (("NumNodes", nodes), ("NumTasks", tasks)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise SlurmRequestError(f"requeue of job {jid}: {name} must be a positive integer, not {value!r}")
        if not excluded and nodes is None and tasks is None:
            self._update(["scontrol", "requeue", jid], job_id=jid)
            return
        changes = [f"ExcNodeList={compress({*self.job(jid).excluded_nodes, *excluded})}"] if excluded else []
        changes += [f"NumNodes={nodes}"] if nodes is not None else []
        changes += [f"NumTasks={tasks}"] if tasks is not None else []  # else a smaller job keeps the old task count
        # Held while it changes: released at once, the job could start again (or pend forever) with the old shape.
        held = False
        try:
            self._update(["scontrol", "requeuehold", jid], job_id=jid)
            held = True
        except SlurmCommandError as exc:
            if "pending execution" not in exc.stderr.lower():
                raise
            log.info("slurm: job %s is still pending; only updating %s", jid, " ".join(changes))
        try:
            self._update(["scontrol", "update", f"JobId={jid}", *changes], job_id=jid)
        except BaseException:
            if held:
                try:
                    self._update(["scontrol", "release", jid], job_id=jid)
                except Exception:  # the first error is the one to report; this one is logged
                    log.exception("slurm: could not release job %s after a failed update", jid)
            raise
        if held:
            self._update(["scontrol", "release", jid], job_id=jid)

    def set_comment(self, job_id: int | str, text: str) -> None:
        jid = _job_id(job_id)
        self._update(
            ["scontrol", "update", f"JobId={jid}", f"Comment={_one_line(text, 'comment')}"], job_id=jid
        )
