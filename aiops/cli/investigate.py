"""`aiops investigate FILE [FILE ...] [--json] [--db D]`: the analyst on the logs operators already have.

FILE may be a directory or an archive (a bundle: tar/tgz/txz/zip, nvidia-bug-report.log.gz, a sosreport,
a must-gather). Formats are detected from content (aiops/evidence/detect.py); a file no parser recognises is
listed in `sources` and skipped. Exit 0 whatever the verdict; 2 only when nothing at all could be read. With `--db`, every recognised line is also stored in the
workspace's `log_events` table; without it nothing is written (docs/INVESTIGATE.md)."""

from __future__ import annotations

import argparse
import json
import uuid
from pathlib import Path
from typing import Any

from rich.table import Table

from aiops.cli.configured import cli_config, configured_workspace
from aiops.evidence import investigate
from aiops.evidence.events import FORMATS
from aiops.evidence.storage import EventWriter
from aiops.text import as_text, markup, terminal

SHOWN_SKIPPED = 20  # reasons printed for skipped files; a bundle may hold thousands


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser(
        "investigate",
        help="diagnose from log files and bundles (dmesg, nvidia-smi, NCCL/PyTorch, ibstat, nvidia-bug-report...)",
        description="Formats accepted (detected from content): " + "; ".join(FORMATS.values()),
    )
    p.add_argument("files", nargs="+", metavar="FILE", help="evidence files, directories or archives")
    p.add_argument("--json", action="store_true", help="print only the JSON result on stdout")
    p.add_argument(
        "--db", default=None, help="also store the recognised lines in this workspace (log_events)"
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    paths = [Path(f) for f in args.files]
    if args.db:
        investigation = uuid.uuid4().hex[:12]
        with configured_workspace(args.db, cli_config(args)).write() as store:
            writer = EventWriter(store, investigation)
            result = investigate(paths, sink=writer)
            writer.flush()
        result["investigation"] = investigation
    else:
        result = investigate(paths)
    if args.json:
        print(json.dumps(result))
        return 0
    show(result)
    return 0


def show(result: dict[str, Any]) -> None:
    console = terminal()
    colour = {"diagnosed": "bold red", "inconclusive": "bold yellow", "healthy": "bold green"}
    console.print(f"verdict: [{colour.get(result['verdict'], 'bold')}]{markup(result['verdict'])}[/]")
    if result["hypotheses"]:
        table = Table(title="hypotheses")
        for column in ("root cause", "component", "confidence", "summary"):
            table.add_column(column)
        for h in result["hypotheses"]:
            table.add_row(
                as_text(h["root_cause"]),
                as_text(h["component"]),
                f"{h['confidence']:.2f}",
                as_text(h["summary"]),
            )
        console.print(table)
        for h in result["hypotheses"][:3]:
            console.print(f"[bold]{markup(h['root_cause'])}[/] on {markup(h['component'])}:")
            for ev in h["evidence"]:
                console.print(f"  {markup(ev['title'])}")
                for cite, row in zip(ev.get("sources", [ev["source"]]), ev["rows"], strict=False):
                    console.print(as_text(f"    {cite}  {row}"))
    if result.get("findings") and result["verdict"] != "diagnosed":
        console.print("[bold]found, unexplained:[/]")
        for f in result["findings"]:
            console.print(as_text(f"  {f['source']}  {f['title']}: {f['rows'][0]}"))
            if "watch" in f:
                console.print(as_text(f"    {f['watch']}"))
    if result.get("next_steps"):
        console.print("[bold]next steps:[/]")
        for step in result["next_steps"]:
            tests = f" ({step['for']})" if step.get("for") else ""
            console.print(as_text(f"  $ {step['run']}"))
            console.print(as_text(f"    shows{tests}: {step['shows']}"))
    sources = Table(title="sources")
    for column in ("file", "format", "lines", "parsed", "unknown"):
        sources.add_column(column)
    for s in result["sources"]:
        name = s["file"] + (f" [{s['section']}]" if s.get("section") else "")
        sources.add_row(
            as_text(name), as_text(s["format"]), str(s["lines"]), str(s["parsed"]), str(s["unknown"])
        )
    console.print(sources)
    skipped = [s["reason"] for s in result["sources"] if "reason" in s]
    for reason in skipped[:SHOWN_SKIPPED]:
        console.print(as_text(f"skipped: {reason}"))
    if len(skipped) > SHOWN_SKIPPED:
        console.print(f"skipped: {len(skipped) - SHOWN_SKIPPED} more (all of them are in --json's sources)")
