"""The service's report schedule: inside a flush (the store held), write the report when the cron expression
says one is due or one was missed while the service was down (once, at start), keep the last N, and queue its
headline for every webhook (aiops/integrations/report.py). A failing report is logged and counted by the
flush's guard; the next due time tries again."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from aiops.config import Config, ReportConfig
from aiops.errors import StorageError
from aiops.report.schedule import is_due, last_run_ts_s, reports_dir, set_last_run, write_scheduled
from aiops.store import Store
from aiops.store.writable import prepare_file, prepare_folder

if TYPE_CHECKING:
    from aiops.integrations.sink_queue import Sink

log = logging.getLogger("aiops.service.reports")


def check_paths(db_path: str, config: Config) -> None:
    """Where the service writes (its workspace, and its scheduled reports when on) can be written; else one
    `StorageError` naming the place and what it is for, before the service starts anything."""
    whose = "the fleet's" if config.node.name == "fleet" else "this node agent's"
    prepare_file(db_path, f"{whose} workspace (telemetry, incidents, proposals, audit log)")
    if config.report.enabled:
        prepare_folder(
            reports_dir(config.report, db_path),
            "the scheduled reports ([report] out_dir)",
            "set [report] out_dir to a folder this user can write",
        )


class ReportSchedule:
    def __init__(
        self,
        config: ReportConfig,
        store_path: str,
        sinks: Callable[[], list[Sink]],
        node: str,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.config = config
        self.out_dir = reports_dir(config, store_path)
        self.sinks = sinks
        self.node = node
        self.wall_clock = wall_clock
        self.written = 0
        self.queued = 0

    def start(self, store: Store) -> None:
        """With no run recorded, record now (nothing was missed); else a missed schedule runs at the next flush."""
        if self.config.enabled and last_run_ts_s(store) is None:
            set_last_run(store, self.wall_clock())

    def maybe_run(self, store: Store, telemetry_now_ts_s: float) -> bool:
        if not self.config.enabled:
            return False
        now_ts_s = self.wall_clock()
        if not is_due(self.config, now_ts_s, last_run_ts_s(store)):
            return False
        set_last_run(store, now_ts_s)  # first: a report that fails is not retried every flush
        try:
            written = write_scheduled(store, self.config, self.out_dir, telemetry_now_ts_s)
        except (
            StorageError
        ) as exc:  # the folder became unwritable since the start: one line, tried when next due
            log.error("report not written", extra={"error": str(exc)})
            return False
        self.written += 1
        link = str(written.paths.get("html") or next(iter(written.paths.values()), self.out_dir))
        from aiops.integrations.report import (
            enqueue_report,  # the sinks' payloads: loaded once a report is due
        )

        self.queued += enqueue_report(
            store, self.sinks(), written, link=link, node=self.node, now_ts_s=now_ts_s
        )
        log.info(
            "report",
            extra={"paths": [str(p) for p in written.paths.values()], "headline": written.report.headline},
        )
        return True
