"""`aiops report`: a health report of a period (HTML, Markdown, PDF) from a workspace, read-only."""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from aiops.cli.configured import add_db_argument, cli_config, configured_workspace
from aiops.store.writable import prepare_folder
from aiops.text import markup, terminal


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("report", help="write a health report of a period (HTML with plots, Markdown, PDF)")
    add_db_argument(p)
    p.add_argument("--since", default=None, help="the period before --end: 24h, 7d, 90m (default 24h)")
    p.add_argument("--start", default=None, help="ISO 8601 (UTC unless it says), epoch seconds, or latest")
    p.add_argument(
        "--end",
        default=None,
        help="as --start; default now (or the newest GPU sample when nothing is in the period up to now); "
        "latest: the newest GPU sample",
    )
    p.add_argument("--out", required=True, help="directory to write report-<end>.{html,md,pdf} into")
    p.add_argument("--format", default="html,md", help="comma-separated: html, md, pdf (default html,md)")
    p.add_argument(
        "--memory-limit-mb",
        type=int,
        default=None,
        help="DuckDB memory for the report's queries, spilling to a temporary directory past it (default 512)",
    )
    p.add_argument("--threads", type=int, default=None, help="DuckDB threads (default: cores, at most 4)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from aiops.report import limits  # here: matplotlib loads only for a report
    from aiops.report.period import report_period
    from aiops.report.write import parse_formats, write_report

    formats = parse_formats(args.format)
    memory_mb = limits.check_memory_limit_mb(
        limits.DEFAULT_MEMORY_LIMIT_MB if args.memory_limit_mb is None else args.memory_limit_mb
    )
    threads = limits.check_threads(limits.default_threads() if args.threads is None else args.threads)
    out = prepare_folder(args.out, "the report (--out)", "give --out a folder this user can write")
    workspace = configured_workspace(args.db, cli_config(args)).require()
    with (
        tempfile.TemporaryDirectory(prefix="aiops-report-") as spill,
        workspace.read(own_instance=True) as store,
    ):
        limits.apply_report_limits(store, memory_limit_mb=memory_mb, threads=threads, temp_dir=Path(spill))
        latest = store.scalar("SELECT max(ts_s) FROM gpu_samples")
        period, note = report_period(
            since=args.since, start=args.start, end=args.end, now_ts_s=time.time(), latest_ts_s=latest
        )
        written = write_report(store, period, out, formats)
    console = terminal(soft_wrap=True)
    if note:
        console.print(markup(note))
    console.print(markup(written.report.headline))
    for kind, path in written.paths.items():
        console.print(f"{kind}: {markup(str(path))}")
    return 0
