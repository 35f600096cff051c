"""Build a Report of a period from a store: the sections whose data exists, coverage always, and a headline
that never calls a period without telemetry healthy."""

from __future__ import annotations

import time
from contextlib import nullcontext

from aiops.report import plots, sections, sections_ops, sections_profile, sections_safety
from aiops.report import queries as q
from aiops.report import queries_health as qh
from aiops.report.model import Report, Section
from aiops.report.period import Period
from aiops.report.text import utc
from aiops.store import Store

NO_TELEMETRY = "No telemetry in this period"


def _headline(has_telemetry: bool, incidents: int, open_incidents: int, drain: int, lost_gpu_h: str) -> str:
    if not has_telemetry:
        return f"{NO_TELEMETRY}: nothing can be said about the fleet's health."
    parts = [
        f"{incidents} incident{'s' if incidents != 1 else ''} ({open_incidents} still open)"
        if incidents
        else "no incidents"
    ]
    if drain:
        parts.append(f"{drain} GPU{'s' if drain != 1 else ''} to drain")
    if incidents:
        parts.append(f"{lost_gpu_h} GPU-hours lost")
    return "; ".join(parts) + "."


def build_report(
    store: Store, period: Period, *, now_ts_s: float | None = None, drawings: bool = True
) -> Report:
    """The report of `period`; with `drawings=False` its plots are described, not drawn (empty `svg`)."""
    with nullcontext() if drawings else plots.in_words_only():
        return _build(store, period, now_ts_s)


def _build(store: Store, period: Period, now_ts_s: float | None) -> Report:
    generated = time.time() if now_ts_s is None else now_ts_s
    interval_s = q.sample_interval_s(store, period)
    has_telemetry = any(r["rows"] for r in q.coverage(store, period))
    report = Report(
        title=f"GPU fleet health report, {utc(period.start_ts_s)} to {utc(period.end_ts_s)}",
        start_ts_s=period.start_ts_s,
        end_ts_s=period.end_ts_s,
        generated_ts_s=generated,
        headline="",
        has_telemetry=has_telemetry,
    )
    gpu_samples = int(
        store.scalar(
            "SELECT count(*) FROM gpu_samples WHERE ts_s >= ? AND ts_s < ?",
            [period.start_ts_s, period.end_ts_s],
        )
        or 0
    )
    found: list[Section | None] = []
    counters = qh.gpu_counters(store, period)
    if gpu_samples:
        series = q.gpu_series(store, period)
        found += [
            sections.summary(store, period, interval_s, series),
            sections_ops.incidents(store, period),
            sections.thermal(store, period, interval_s),
            sections.power(store, period, interval_s, series),
            sections_ops.health(store, period, counters),
        ]
    else:
        found.append(sections_ops.incidents(store, period) if qh.incidents(store, period) else None)
    found += [
        sections_ops.network(store, period),
        sections_ops.actions(store, period),
        sections_safety.safety(store, period),
        sections_safety.components(store, period),
        sections_profile.profile(store, period),
        sections_ops.coverage(store, period, interval_s),
    ]
    report.sections = [s for s in found if s is not None]
    rows = qh.incidents(store, period)
    lost = sum(
        qh.gpu_hours_lost(store, r["opened_ts_s"], r["end_ts_s"], list(r["components"] or [])) for r in rows
    )
    drain = sum(1 for r in counters.rows if qh.drain_reason(r))
    report.headline = _headline(
        has_telemetry, len(rows), sum(1 for r in rows if not r["resolved"]), drain, f"{lost:,.2f}"
    )
    return report
