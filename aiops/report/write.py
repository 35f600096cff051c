"""Write a report of a period into a directory in the asked formats; the files are named by the period's end
(`report-20260101T000000Z.html`) so that a directory of scheduled reports sorts by time."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from aiops.errors import InputError
from aiops.report.build import build_report
from aiops.report.model import Report
from aiops.report.period import Period
from aiops.report.render_html import render_html
from aiops.report.render_md import render_md
from aiops.store import Store
from aiops.store.writable import prepare_folder, writing

FORMATS = ("html", "md", "pdf")
FIX = "write reports into a folder this user can write (--out, or [report] out_dir)"


@dataclass(frozen=True)
class Written:
    report: Report
    paths: dict[str, Path]


def parse_formats(text: str, source: str = "command line", field: str = "--format") -> tuple[str, ...]:
    names = tuple(dict.fromkeys(p.strip().lower() for p in text.split(",") if p.strip()))
    bad = [n for n in names if n not in FORMATS]
    if bad or not names:
        raise InputError(source, field, f"unknown format {', '.join(bad) or '(none)'}", FORMATS)
    return names


def stem(period: Period) -> str:
    return "report-" + datetime.fromtimestamp(period.end_ts_s, UTC).strftime("%Y%m%dT%H%M%SZ")


def write_report(store: Store, period: Period, out_dir: Path, formats: tuple[str, ...]) -> Written:
    report = build_report(store, period)
    prepare_folder(out_dir, "the report", FIX)
    with writing(out_dir, "the report", FIX):
        return Written(report, _write(report, out_dir / stem(period), formats))


def _write(report: Report, base: Path, formats: tuple[str, ...]) -> dict[str, Path]:
    paths: dict[str, Path] = {}
    html_path = base.with_suffix(".html")
    if "html" in formats or "pdf" in formats:
        html_path.write_text(render_html(report), encoding="utf-8")
        if "html" in formats:
            paths["html"] = html_path
    if "md" in formats:
        paths["md"] = base.with_suffix(".md")
        paths["md"].write_text(
            render_md(report, link=str(html_path) if "html" in formats else None), encoding="utf-8"
        )
    if "pdf" in formats:
        from aiops.report.pdf import html_to_pdf

        paths["pdf"] = base.with_suffix(".pdf")
        html_to_pdf(html_path, paths["pdf"])
        if "html" not in formats:
            html_path.unlink(missing_ok=True)
    return paths
