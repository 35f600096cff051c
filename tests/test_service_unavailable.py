"""A collector that finds nothing to read says so once in the service's log, not only in collector_errors
(docs/SERVICE.md): the service runs on an empty root (no /proc, /sys or /dev/kmsg under it) and no GPU driver."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from aiops.config import parse_config
from aiops.service.service import Service
from aiops.store import Store


def test_absent_collectors_are_logged_once_each(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "empty-host"
    root.mkdir()
    db = tmp_path / "ws.duckdb"
    config = parse_config(
        {"store": {"path": str(db)}, "http": {"listen": ""}, "collectors": {"root": str(root)}}, "f.toml"
    )
    with caplog.at_level(logging.WARNING, logger="aiops.service"):
        assert Service(config).run(duration_s=2.5) == 0  # two or more collects of each 1 s collector
    said = [
        (r.__dict__["collector"], r.__dict__["detail"])
        for r in caplog.records
        if r.msg == "collector unavailable"
    ]
    with Store(db, read_only=True) as store:
        rows = store.query("SELECT collector, detail FROM collector_errors WHERE error = 'unavailable'")
    assert sorted(said) == sorted((r["collector"], r["detail"]) for r in rows)  # each row logged, once
    assert len(said) == len(set(said))
    assert {"procfs", "netdev", "hwmon", "kmsg", "rank-timing"} <= {collector for collector, _ in said}
    assert any("kmsg unavailable" in detail and str(root) in detail for _, detail in said)
