"""A collector that finds nothing to read says so once in the service's log, not only in collector_errors
(docs/SERVICE.md): the service runs on an empty root (no /proc, /sys or /dev/kmsg under it) and no GPU driver;
and on this host's own root without bcc (issue 27 item 7: "absent collectors are never logged"). Each absent
collector is said at start (the first collect, before any flush) and once, though each collected twice or more."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import pynvml
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
    assert {"procfs", "netdev", "infiniband", "hwmon", "kmsg", "rank-timing"} <= {
        collector for collector, _ in said
    }
    assert any("kmsg unavailable" in detail and str(root) in detail for _, detail in said)
    assert ("infiniband", f"InfiniBand unavailable: {root}/sys/class/infiniband does not exist") in said
    if _nvml_absent():  # a host with a GPU driver has NVML: nothing to say there
        assert any(
            collector == "nvml" and detail.startswith("NVML unavailable:") for collector, detail in said
        )
    _said_at_start(db)


def _nvml_absent() -> bool:
    try:
        pynvml.nvmlInit()
    except (pynvml.NVMLError, OSError):
        return True
    pynvml.nvmlShutdown()
    return False


def _said_at_start(db: Path) -> None:
    """Every `unavailable` row carries the time of the service's first collect (all sources are due at once in
    the first tick), though the service collected each source two or more times."""
    with Store(db, read_only=True) as store:
        first = store.scalar("SELECT min(ts_s) FROM collector_errors")
        late = store.query(
            "SELECT collector, ts_s - ? AS after_s FROM collector_errors WHERE error = 'unavailable' AND ts_s > ? + 0.5",
            [first, first],
        )
    assert late == [], late


def test_no_bcc_is_said_at_start_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On this host's own root (rank timing probes only there), with bcc not importable (as on a host without
    python3-bpfcc): rank timing says why once, at start; without root it says that first."""
    monkeypatch.setitem(
        sys.modules, "bcc", None
    )  # `import bcc` raises ImportError, as where it is not installed
    db = tmp_path / "ws.duckdb"
    config = parse_config(
        {
            "store": {"path": str(db)},
            "http": {"listen": ""},
            "collectors": {"kmsg": {"enabled": False}, "rank_timing": {"enabled": True}},
        },
        "f.toml",
    )
    with caplog.at_level(logging.WARNING):
        assert Service(config).run(duration_s=2.5) == 0
    warned = [
        r.getMessage() + str(r.__dict__.get("detail", ""))
        for r in caplog.records
        if r.levelno >= logging.WARNING
    ]
    assert sum("rank timing unavailable" in w for w in warned) == 1, warned  # one line in the whole log
    said = [
        r.__dict__["detail"]
        for r in caplog.records
        if r.msg == "collector unavailable" and r.__dict__["collector"] == "rank-timing"
    ]
    assert len(said) == 1, said
    assert "bcc is not importable" in said[0] or "root" in said[0] or "CAP_" in said[0], said
    _said_at_start(db)
