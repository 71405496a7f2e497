"""Report files: report.json, report.md and a self-contained report.html (inline CSS and an SVG
timeline; no script, nothing fetched). Every value from the logs is escaped before it reaches HTML."""

from __future__ import annotations

import html
import json
import os
import tempfile
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from nvrx_hpc.core.errors import AttributionError

__all__ = ["to_markdown", "to_html", "write_reports", "timeline_svg"]

# Marker of each timeline kind: (shape, colour), by the kind's last word that names one; failures and hangs
# are crosses (a rank that exited, the launcher's culprit, a lost agent, a failing check, a log line that
# is a cause); kinds not listed are grey circles.
_MARKS = {
    "started": ("circle", "#2b8a3e"), "failed": ("cross", "#c92a2a"), "exited": ("cross", "#c92a2a"),
    "culprit": ("cross", "#c92a2a"), "lost": ("cross", "#c92a2a"), "hung": ("cross", "#e8590c"),
    "restart": ("diamond", "#1c7ed6"), "requeue": ("diamond", "#5f3dc4"), "checkpoint": ("square", "#0b7285"),
    "saved": ("square", "#0b7285"), "committed": ("square", "#0b7285"), "excluded": ("triangle", "#862e9c"),
    "stop": ("square", "#495057"), "stopped": ("square", "#495057"),
}  # fmt: skip
_FAILURE_SOURCES = ("log.", "record.", "health.")  # timeline kinds made from evidence of a failure


def _when(t: float | None) -> str:
    return datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S") if t is not None else "-"


_MD_ESCAPES = str.maketrans({"&": "&amp;", "<": "&lt;", ">": "&gt;", "`": "&#96;", "|": "\\|", "\n": " ", "\r": " "})


def _md_cell(value: Any) -> str:
    """Quoted text (log lines, paths) as inert Markdown: no raw HTML, no code span or table cell to break out of."""
    return str(value).translate(_MD_ESCAPES)


def to_markdown(report: Mapping[str, Any]) -> str:
    """The report as Markdown for a terminal, a ticket or a chat message."""
    c = report["culprit"]
    rec = report.get("recommendation", {})
    lines = [
        f"# Failure report for job {report.get('job_id') or '?'}",
        "",
        f"**{report['category']}** — {_md_cell(report['root_cause'])}",
        "",
        f"- culprit nodes: {', '.join(c['nodes']) or '-'}"
        + (f" (pod {', '.join(c['pods'])})" if c.get("pods") else ""),
        f"- culprit ranks: {', '.join(str(r) for r in c['ranks']) or '-'}",
        f"- culprit GPUs: {', '.join(c['gpus']) or '-'}",
        f"- restartable: {'yes' if report['restartable'] else 'no'}; recommendation: {rec.get('action', '-')}"
        + (f" (exclude {', '.join(rec['exclude_nodes'])})" if rec.get("exclude_nodes") else ""),
        f"- confidence: {report['confidence']:.2f}",
        "",
        "## Evidence",
        "",
        "| role | source | where | text |",
        "|---|---|---|---|",
    ]
    for e in report.get("evidence", []):
        where = e.get("line", e.get("entry", ""))
        lines.append(f"| {e.get('role', '')} | {_md_cell(e['source'])} | {where} | {_md_cell(e['text'][:200])} |")
    if report.get("cascade"):
        lines += ["", "## Cascade", "", "| signature | lines | ranks | nodes |", "|---|---|---|---|"]
        for k in report["cascade"]:
            ranks = ", ".join(str(r) for r in k["ranks"][:12]) + (" ..." if len(k["ranks"]) > 12 else "")
            nodes = ", ".join(k["nodes"][:8]) or "-"
            lines.append(f"| {_md_cell(k['signature'])} | {k['count']} | {ranks or '-'} | {nodes} |")
    fr = report.get("flight_recorder")
    if fr and fr.get("findings"):
        lines += ["", "## Flight recorder", ""]
        lines += [f"- group {f['pg']} ({f['desc'] or '-'}): {f['op']} #{f['seq']}, never joined "
                  f"{f['never_joined'] or '-'}, behind {f['behind'] or '-'}, no dump {f['missing_dumps'] or '-'}"
                  + (f", mismatch {f['mismatch']['type']} at #{f['mismatch']['seq']}" if f.get("mismatch") else "")
                  + "".join(f"; {_md_cell(p['detail'])}" for p in (f.get("p2p") or [])[:4])
                  for f in fr["findings"]]  # fmt: skip
    if report.get("timeline"):
        lines += ["", "## Timeline", "", "| time | kind | node | rank | detail |", "|---|---|---|---|---|"]
        for t in report["timeline"][:200]:
            lines.append(
                f"| {_when(t['time'])} | {t['kind']} | {t['node'] or '-'} | "
                f"{'-' if t['rank'] is None else t['rank']} | {_md_cell(t['detail'])} |"
            )
    if report.get("errors"):
        lines += ["", "## Inputs that could not be read", ""]
        lines += [f"- {_md_cell(e['source'])}: {_md_cell(e['error'])}" for e in report["errors"]]
    return "\n".join(lines) + "\n"


def _mark(kind: str) -> tuple[str, str]:
    if kind.startswith(_FAILURE_SOURCES):
        return ("cross", "#e8590c" if "hang" in kind or "timeout" in kind else "#c92a2a")
    for word in reversed(kind.replace(".", "_").split("_")):
        if word in _MARKS:
            return _MARKS[word]
    return ("circle", "#868e96")


def _shape(shape: str, x: float, y: float, colour: str) -> str:
    if shape == "cross":
        return (f'<path d="M{x - 5} {y - 5}L{x + 5} {y + 5}M{x - 5} {y + 5}L{x + 5} {y - 5}" '
                f'stroke="{colour}" stroke-width="2.5"/>')  # fmt: skip
    if shape == "diamond":
        return f'<path d="M{x} {y - 6}L{x + 6} {y}L{x} {y + 6}L{x - 6} {y}Z" fill="{colour}"/>'
    if shape == "triangle":
        return f'<path d="M{x} {y - 6}L{x + 6} {y + 5}L{x - 6} {y + 5}Z" fill="{colour}"/>'
    if shape == "square":
        return f'<rect x="{x - 5}" y="{y - 5}" width="10" height="10" fill="{colour}"/>'
    return f'<circle cx="{x}" cy="{y}" r="5" fill="{colour}"/>'


def timeline_svg(timeline: list[Mapping[str, Any]], width: int = 960) -> str:
    """An SVG with one lane per node (and per rank where known); time runs left to right."""
    timed = [t for t in timeline if t.get("time") is not None]
    if not timed:
        return '<p class="muted">No timed events to plot.</p>'
    lanes: list[str] = []
    for t in timed:
        lane = t.get("node") or "job"
        if t.get("rank") is not None:
            lane = f"{lane} / rank {t['rank']}"
        if lane not in lanes:
            lanes.append(lane)
    lanes.sort()
    t0, t1 = min(t["time"] for t in timed), max(t["time"] for t in timed)
    span = max(t1 - t0, 1e-3)
    left, row = 190, 22
    height = 40 + row * len(lanes)
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
             f'aria-label="timeline">']  # fmt: skip
    for i, lane in enumerate(lanes):
        y = 20 + i * row
        parts.append(f'<text x="4" y="{y + 4}" font-size="11">{html.escape(lane)}</text>')
        parts.append(f'<line x1="{left}" y1="{y}" x2="{width - 10}" y2="{y}" stroke="#dee2e6"/>')
    for t in timed:
        lane = t.get("node") or "job"
        if t.get("rank") is not None:
            lane = f"{lane} / rank {t['rank']}"
        x = left + (width - left - 20) * (t["time"] - t0) / span
        y = 20 + lanes.index(lane) * row
        shape, colour = _mark(t["kind"])
        tip = html.escape(f"{_when(t['time'])} {t['kind']}: {t.get('detail', '')}")
        parts.append(f"<g><title>{tip}</title>{_shape(shape, round(x, 1), y, colour)}</g>")
    axis_y = height - 8
    parts.append(f'<text x="{left}" y="{axis_y}" font-size="10">{_when(t0)}</text>')
    parts.append(f'<text x="{width - 10}" y="{axis_y}" font-size="10" text-anchor="end">{_when(t1)}</text>')
    parts.append("</svg>")
    return "".join(parts)


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:1000px;color:#212529}"
    "table{border-collapse:collapse;margin:1em 0;font-size:13px}td,th{border:1px solid #dee2e6;padding:3px 6px;"
    "text-align:left;vertical-align:top}code{font-size:12px;word-break:break-all}.muted{color:#868e96}"
    ".cat{display:inline-block;padding:2px 8px;border-radius:4px;background:#fff3bf}"
)


def _rows(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in r) + "</tr>" for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def to_html(report: Mapping[str, Any]) -> str:
    """A single self-contained HTML page: verdict, evidence, cascade, timeline plot, unreadable inputs."""
    c = report["culprit"]
    rec = report.get("recommendation", {})
    esc = html.escape
    body = [
        f"<h1>Failure report for job {esc(str(report.get('job_id') or '?'))}</h1>",
        f"<p><span class='cat'>{esc(report['category'])}</span> {esc(report['root_cause'])}</p>",
        _rows(["culprit nodes", "culprit ranks", "culprit GPUs", "restartable", "recommendation", "confidence"], [[
            (", ".join(c["nodes"]) or "-") + (f" (pod {', '.join(c['pods'])})" if c.get("pods") else ""),
            ", ".join(str(r) for r in c["ranks"]) or "-", ", ".join(c["gpus"]) or "-",
            "yes" if report["restartable"] else "no",
            rec.get("action", "-") + (f" (exclude {', '.join(rec['exclude_nodes'])})" if rec.get("exclude_nodes")
                                      else ""),
            f"{report['confidence']:.2f}",
        ]]),  # fmt: skip
        "<h2>Timeline</h2>",
        "<p class='muted'>circle: start, cross: failure or hang, diamond: restart or requeue, square: checkpoint "
        "or stop, triangle: node excluded</p>",
        timeline_svg(list(report.get("timeline", []))),
        "<h2>Evidence</h2>",
        _rows(["role", "source", "where", "text"], [
            [e.get("role", ""), e["source"], e.get("line", e.get("entry", "")), e["text"][:400]]
            for e in report.get("evidence", [])
        ]),  # fmt: skip
    ]
    if report.get("cascade"):
        body += ["<h2>Cascade</h2>", _rows(["signature", "lines", "ranks", "nodes"], [
            [k["signature"], k["count"], ", ".join(str(r) for r in k["ranks"][:16]), ", ".join(k["nodes"][:8])]
            for k in report["cascade"]
        ])]  # fmt: skip
    if report.get("errors"):
        body += ["<h2>Inputs that could not be read</h2>",
                 _rows(["source", "error"], [[e["source"], e["error"]] for e in report["errors"]])]  # fmt: skip
    title = esc(f"nvrx-hpc report, job {report.get('job_id') or '?'}")
    return (f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>{title}</title>"
            f"<style>{_CSS}</style></head><body>{''.join(body)}</body></html>\n")  # fmt: skip


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_reports(report: Mapping[str, Any], directory: Path) -> list[Path]:
    """Write report.json, report.md and report.html into `directory` (each atomically).

    Raises:
        AttributionError: the directory cannot be written.
    """
    out = []
    try:
        for name, text in (
            ("report.json", json.dumps(report, indent=2, sort_keys=False, default=str) + "\n"),
            ("report.md", to_markdown(report)),
            ("report.html", to_html(report)),
        ):
            path = directory / name
            _atomic_write(path, text)
            out.append(path)
    except OSError as exc:
        raise AttributionError(
            f"cannot write the report into {directory}: {exc.strerror or exc}",
            hint="check that the run directory exists and is writable, or pass --out DIR",
        ) from None
    return out
