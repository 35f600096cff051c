"""Scheduled reports: whether one is due (the cron expression's latest due time is after the last run, which
the workspace keeps in `service_state`), writing it, and keeping the last N. The service (aiops/service/
reports.py) calls these inside its flush; a schedule missed while the service was down runs once at start."""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from aiops.config import ReportConfig
from aiops.cron import parse_cron
from aiops.report.period import Period, parse_duration_s
from aiops.store import Store

if TYPE_CHECKING:
    from aiops.report.write import Written

LAST_RUN_KEY = "report.last_run_ts_s"
_SUFFIXES = (".html", ".md", ".pdf")


def reports_dir(config: ReportConfig, store_path: str) -> Path:
    return Path(config.out_dir).expanduser() if config.out_dir else Path(store_path + ".reports")


def last_run_ts_s(store: Store) -> float | None:
    value = store.scalar("SELECT value FROM service_state WHERE key = ?", [LAST_RUN_KEY])
    return float(value) if value is not None else None


def set_last_run(store: Store, ts_s: float) -> None:
    store.conn.execute(
        "INSERT OR REPLACE INTO service_state VALUES (?, ?, ?)", [LAST_RUN_KEY, repr(ts_s), time.time()]
    )


def is_due(config: ReportConfig, now_ts_s: float, last_ts_s: float | None) -> bool:
    """A report is due when the expression's latest due time at or before now is after the last run. With no
    run recorded, nothing was missed: the caller records a baseline instead."""
    if last_ts_s is None:
        return False
    due_ts_s = parse_cron(config.cron).previous_due_ts_s(now_ts_s)
    return due_ts_s is not None and due_ts_s > last_ts_s


def prune(out_dir: Path, keep_last: int) -> list[Path]:
    """Delete all but the newest `keep_last` reports (a report: the files of one `report-<end>` stem)."""
    stems = sorted({p.stem for p in out_dir.glob("report-*") if p.suffix in _SUFFIXES})
    removed: list[Path] = []
    for stem in stems[: max(len(stems) - keep_last, 0)]:
        for suffix in _SUFFIXES:
            path = out_dir / f"{stem}{suffix}"
            if path.exists():
                path.unlink()
                removed.append(path)
    return removed


def write_scheduled(store: Store, config: ReportConfig, out_dir: Path, end_ts_s: float) -> Written:
    """The report of the `since` period ending at `end_ts_s` (the telemetry's clock), then the old ones pruned."""
    from aiops.report.write import parse_formats, write_report  # here: matplotlib loads only when one is due

    period = Period(end_ts_s - parse_duration_s(config.since, "report.since"), end_ts_s)
    written = write_report(store, period, out_dir, parse_formats(config.formats, "config", "report.formats"))
    prune(out_dir, config.keep_last)
    return written
