"""Rows held between the workspace's writes (docs/SERVICE.md, "The loop"): a node agent writes its collectors'
rows into DuckDB once a detection window (most of its CPU is a fixed cost per statement, docs/BENCHMARKS.md
"Footprint"); between two writes, every `[store] flush_interval_s`, the rows not yet in the workspace are
written whole to `<db>.held` (JSON lines, replaced atomically), so a kill -9 loses at most the rows of the last
`flush_interval_s`. The next start ingests that file first (a row the workspace already has is skipped by its
key, as a replayed window is) and removes it.

The file is data, never code: JSON only, each line's table must be one of the workspace's, and its columns are
checked by the store as any batch's are; a line that is not that is skipped and said in the log, and a file
whose rows the store refuses (a value of the wrong type) is kept aside as `<db>.held.refused`, said in the log,
and the agent starts.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

import duckdb

from aiops.errors import AiopsError, IngestError
from aiops.store import Store
from collectors.base import RowBatch

log = logging.getLogger("aiops.service")


class HeldRows:
    """The rows collected since the workspace's last write, mirrored to `<db>.held` (none for `:memory:`)."""

    def __init__(self, db_path: str) -> None:
        self.path: Path | None = None if db_path in ("", ":memory:") else Path(f"{db_path}.held")
        self.kept = False  # the file holds rows the workspace has not

    def keep(self, batches: list[tuple[str, Any]]) -> bool:
        """Write `batches` (every row not yet in the workspace) as the file's whole content. False when they
        cannot be kept so (no file, an Arrow table, a value JSON does not carry): the caller writes the
        workspace instead."""
        if self.path is None or not all(isinstance(batch, RowBatch) for _, batch in batches):
            return False
        try:
            lines = [
                json.dumps({"table": table, "columns": list(batch.columns), "rows": batch.rows}) + "\n"
                for table, batch in batches
            ]
        except (TypeError, ValueError):
            return False
        part = self.path.with_name(self.path.name + ".part")
        try:
            # 0640, as the workspace's file
            descriptor = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o640)
            with open(descriptor, "w", encoding="utf-8") as out:
                out.writelines(lines)
            os.replace(part, self.path)  # the file is the old rows or the new ones, never half of them
        except OSError as exc:
            log.warning("rows not held to a file", extra={"path": str(self.path), "error": str(exc)})
            return False
        self.kept = True
        return True

    def clear(self) -> None:
        """The workspace has every row the file held (its write committed)."""
        if self.kept and self.path is not None:
            self.path.unlink(missing_ok=True)
            self.kept = False

    def restore(self, store: Store) -> int:
        """At start: ingest what a killed run held, then remove the file; returns the rows read."""
        if self.path is None or not self.path.exists():
            return 0
        batches: list[tuple[str, RowBatch]] = []
        skipped = 0
        for number, line in enumerate(
            self.path.read_text(encoding="utf-8", errors="replace").splitlines(), 1
        ):
            batch = _batch(store, line)
            if batch is None:
                skipped += 1
                log.warning("a held line skipped", extra={"path": str(self.path), "line": number})
            else:
                batches.append(batch)
        try:
            store.ingest_all(batches)  # one transaction: all of the file's rows or none
        except (AiopsError, duckdb.Error) as exc:  # a value the table refuses: kept aside, the agent starts
            refused = self.path.with_name(self.path.name + ".refused")
            os.replace(self.path, refused)
            log.error("held rows refused", extra={"path": str(refused), "error": str(exc)[:500]})
            return 0
        self.path.unlink(missing_ok=True)
        rows = sum(len(batch.rows) for _, batch in batches)
        log.info("held rows restored", extra={"path": str(self.path), "rows": rows, "skipped_lines": skipped})
        return rows


def _batch(store: Store, line: str) -> tuple[str, RowBatch] | None:
    try:
        data = json.loads(line)
    except ValueError:
        return None
    if not isinstance(data, dict):
        return None
    table, columns, rows = data.get("table"), data.get("columns"), data.get("rows")
    if not isinstance(table, str) or not isinstance(columns, list) or not isinstance(rows, list):
        return None
    try:
        store.columns(table)  # a table of the workspace's, or none of the file's business
    except IngestError:
        return None
    if not all(isinstance(c, str) for c in columns):
        return None
    if not all(isinstance(row, list) and len(row) == len(columns) for row in rows):
        return None
    return table, RowBatch(tuple(columns), [tuple(row) for row in rows])
