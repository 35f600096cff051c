"""`log_events` (migration 10): investigate's events land in the workspace with file, line and raw text."""

from __future__ import annotations

from pathlib import Path

from aiops.evidence import investigate
from aiops.evidence.storage import EventWriter
from aiops.store import Store, Workspace

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"


def test_events_are_stored_with_line_and_raw_text(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "w.duckdb")
    path = REAL / "xid48-dbe-xid64-gpu-operator-validator-2024" / "kern.log"
    with workspace.write() as store:
        writer = EventWriter(store, "inv-1")
        investigate([path], sink=writer)
        writer.flush()
    with workspace.read() as store:
        rows = store.query(
            "SELECT source, line, host, kind, code, component, raw FROM log_events WHERE kind = 'xid' ORDER BY line"
        )
    assert [(r["line"], r["code"]) for r in rows] == [(4, 48), (5, 64)]
    assert {r["host"] for r in rows} == {"worker4"} and rows[0]["component"] == "0000:07:00.0"
    assert rows[0]["raw"] == path.read_text(encoding="utf-8").splitlines()[3]
    assert writer.written == 9


def test_batches_flush_before_the_end(tmp_path: Path) -> None:
    store = Store(":memory:")
    log = tmp_path / "dmesg.txt"
    line = "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
    log.write_text(line * 12_000)
    writer = EventWriter(store, "inv-2")
    investigate([log], sink=writer)
    assert writer.written == 10_000  # two full batches written while streaming
    writer.flush()
    assert store.scalar("SELECT count(*) FROM log_events WHERE code = 79") == 12_000
