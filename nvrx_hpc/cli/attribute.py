"""`nvrx-hpc attribute PATH...`: say what failed, where, and whether a restart can help; write and post the report."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Annotated

import typer

from nvrx_hpc.cli._output import JsonOption, print_json, print_table, print_text

log = logging.getLogger(__name__)


def _print_outcome(outcome) -> None:
    r = outcome.report
    c = r["culprit"]
    print_text(f"category:     {r['category']}")
    print_text(f"root cause:   {r['root_cause']}")
    pods = f"; pod {', '.join(c['pods'])}" if c.get("pods") else ""  # a Kubernetes job's pod on the culprit node
    print_text(f"culprit:      nodes {', '.join(c['nodes']) or '-'}; ranks {', '.join(map(str, c['ranks'])) or '-'}"
               f"; GPUs {', '.join(c['gpus']) or '-'}{pods}")  # fmt: skip
    rec = r["recommendation"]
    print_text(f"restartable:  {'yes' if r['restartable'] else 'no'} ({rec['action']}"
               + (f", exclude {', '.join(rec['exclude_nodes'])})" if rec["exclude_nodes"] else ")"))  # fmt: skip
    print_text(f"confidence:   {r['confidence']:.2f}")
    for path in outcome.written:
        print_text(f"report:       {path}")
    for p in outcome.posted:
        print_text(f"posted:       {p.backend}: {'ok' if p.ok else 'FAILED'} ({p.detail})")
    if outcome.service:
        print_text(f"service:      stored as report {outcome.service.get('id')}")
        for n in outcome.service.get("nodes", []):
            print_text(f"  node {n['node']}: culprit {n['culprit_count']}x" + ("; DRAIN advised" if n["drain"] else ""))
    for e in r.get("errors", []):
        typer.secho(f"unreadable:   {e['source']}: {e['error']}", err=True)


def register(app: typer.Typer) -> None:
    @app.command()
    def attribute(
        paths: Annotated[list[Path] | None, typer.Argument(help="A run directory, or log / dump files.")] = None,
        json_output: JsonOption = False,
        out: Annotated[Path | None, typer.Option(help="Write report.json/.md/.html here (default: run dir).")] = None,
        no_write: Annotated[bool, typer.Option("--no-write", help="Write no report files.")] = False,
        post: Annotated[list[str] | None, typer.Option(help="Also post with this backend (repeatable).")] = None,
        engine: Annotated[str | None, typer.Option(help="Scan engine: auto, hyperscan, re2, grep, python.")] = None,
        job_id: Annotated[str | None, typer.Option(help="Job id for the report (default: the run dir name).")] = None,
        server: Annotated[str | None, typer.Option(help="Attribution service URL: submit the report there.")] = None,
        fetch: Annotated[int | None, typer.Option(help="With --server: print stored report ID and exit.")] = None,
        nodes: Annotated[bool, typer.Option("--nodes", help="With --server: print the node history.")] = False,
        epilog: Annotated[bool, typer.Option("--epilog", help="Run as the Epilog's detached analysis.")] = False,
        budget_s: Annotated[float | None, typer.Option(help="Stop the analysis after this many seconds.")] = None,
    ) -> None:
        """Analyse a failed job: category, root cause, culprit nodes/ranks/GPUs, restartable, evidence."""
        from nvrx_hpc.attribution.pipeline import run_attribution
        from nvrx_hpc.attribution.settings import load_settings
        from nvrx_hpc.core.errors import AttributionError

        settings = load_settings(overrides={"engine": engine, "service_url": server})
        if fetch is not None or nodes:
            from nvrx_hpc.attribution.client import ServiceClient

            if not settings.service_url:
                raise AttributionError("--fetch and --nodes need --server URL (or service_url in the settings)")
            client = ServiceClient(settings.service_url, settings.token(), timeout=settings.post_timeout_s)
            if fetch is not None:
                print_json(client.get(fetch))
                return
            rows = client.nodes()
            columns = ["node", "culprit_count", "recent_node_faults", "drain", "reason"]
            print_table(rows, columns, json_output, title="node history")
            return
        if not paths:
            raise AttributionError(
                "no run directory or file given",
                hint="nvrx-hpc attribute <submit dir>/nvrx-runs/<job id>   (or log / flight-recorder files)",
            )
        if budget_s is not None and budget_s <= 0:
            raise AttributionError(f"--budget-s {budget_s:g} must be above 0")
        if not epilog:  # a user pointed at the wrong directory: say so rather than report "unknown, retry"
            _require_inputs(paths)
        backends = [*settings.post, *(post or [])]
        outcome = run_attribution(
            paths, settings, out_dir=out, write=not no_write, backends=backends, server=server,
            job_id=job_id, ask_slurm=epilog, budget_s=budget_s or (settings.epilog_budget_s if epilog else None),
        )  # fmt: skip
        if json_output:
            print_json(outcome.to_dict())
        else:
            _print_outcome(outcome)


def _require_inputs(paths: list[Path]) -> None:
    """Raise when `paths` hold no log, event, failure record, health snapshot or dump to analyse."""
    from nvrx_hpc.attribution.inputs import discover
    from nvrx_hpc.core.errors import AttributionError

    found = discover(paths)
    if not any((found.logs, found.events, found.records, found.fr_dumps, found.stacks, found.health)):
        raise AttributionError(
            f"nothing to analyse in {', '.join(str(p) for p in paths)}: no log, event, record or dump file",
            hint="pass the job's run directory (<submit dir>/nvrx-runs/<job id>) or its log files",
        )
