"""What a tick collects (`collect`): each due source read, timed and watched; its rows buffered for the next
flush and fed to the exporter as they come (a collector's failure is a `collector_errors` row, never the loop's);
a source with nothing to read said once in the log (`say_unavailable`). Runs without the workspace open."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from collectors.base import RowBatch

if TYPE_CHECKING:
    from aiops.service.service import Service

log = logging.getLogger("aiops.service")


def collect(svc: Service, name: str, collector: Any, interval_s: float = 0.0) -> None:
    assert svc.sources is not None
    now_ts_s = svc.sources.clock()
    started = time.perf_counter()
    tables: dict[str, Any] = {}
    failure = ""
    try:
        if hasattr(collector, "rows"):
            batches: dict[str, RowBatch] = collector.rows(now_ts_s)
        else:  # Arrow tables (the fleet's Prometheus reader): stored, not re-exported at /metrics
            tables, batches = collector.collect(now_ts_s), {}
            errors = tables.pop("collector_errors", None)  # counted and logged as a row collector's are
            if errors is not None:
                rows = [tuple(r.values()) for r in errors.to_pylist()]
                batches = {"collector_errors": RowBatch(tuple(errors.column_names), rows)}
    except Exception as exc:  # a collector never takes the loop down: its failure is data
        failure = f"{type(exc).__name__}: {exc}"
        batches = {
            "collector_errors": RowBatch(
                ("ts_s", "collector", "component", "error", "detail"),
                [(now_ts_s, name, None, type(exc).__name__, str(exc)[:500])],
            )
        }
    produced = any(batch.rows for table, batch in batches.items() if table != "collector_errors")
    svc.watch.saw(name, collector, now_ts_s, interval_s, failure, produced or bool(tables))
    svc.metrics.timing(name, time.perf_counter() - started)
    if (
        getattr(collector, "name", None) == "workloads" and "gpu_processes" in batches
    ):  # a collect, even empty
        svc.workloads_ts_s, svc.workloads_node = now_ts_s, getattr(collector, "node", None)
    say_unavailable(svc, name, batches.get("collector_errors"))
    svc.buffer.add(batches)
    svc.buffer.add_tables(tables)
    for table, batch in batches.items():
        svc.metrics.observe(table, batch.columns, batch.rows)
    read_from_ts_s = now_ts_s  # a reader's data starts at its clock before the read, ends at it after
    if not hasattr(collector, "rows"):
        if not tables and not batches:
            return  # nothing read yet: the data clock has not moved
        now_ts_s = max(now_ts_s, svc.sources.clock())
    svc.newest_ts_s = now_ts_s
    if svc.first_ts_s is None:
        svc.first_ts_s = read_from_ts_s  # detection starts there (a fleet's look-back included)
    if svc.oldest_unflushed_ts_s is None:
        svc.oldest_unflushed_ts_s = read_from_ts_s


def say_unavailable(svc: Service, name: str, batch: RowBatch | None) -> None:
    """A collector that finds nothing to read (no GPU driver, no InfiniBand) writes its `unavailable` row once
    at its first collect; the log says it once too, so `journalctl -u aiops` shows what this node lacks."""
    if batch is None or "error" not in batch.columns or "detail" not in batch.columns:
        return
    error_at, detail_at = batch.columns.index("error"), batch.columns.index("detail")
    who_at = batch.columns.index("collector") if "collector" in batch.columns else None
    for row in batch.rows:
        said = (name if who_at is None else str(row[who_at]), str(row[detail_at]))
        if row[error_at] == "unavailable" and said not in svc.said_unavailable:
            svc.said_unavailable.add(said)
            log.warning("collector unavailable", extra={"collector": said[0], "detail": said[1]})
