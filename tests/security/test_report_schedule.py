"""The report schedule through the service itself: `aiops run --sim` with a one-minute cron schedule, a JSON
webhook on loopback and a workspace whose last report is an hour old. The missed schedule runs once at start,
the next minute's runs on time, only the last report is kept (keep_last = 1), and the receiver gets each
report's headline with the path of its HTML, once."""

from __future__ import annotations

import time
from pathlib import Path

from aiops.report.schedule import LAST_RUN_KEY
from aiops.store import Store
from tests.notify_helpers import Request, receiver
from tests.service_helpers import free_port, running_service

SCENARIO = """\
name: report-schedule
seed: 5
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 2, nics_per_node: 1}
jobs:
  - {name: llm, nodes: all, step_compute_s: 1.0, allreduce_mb: 64}
faults:
  - {kind: thermal_throttle, target: node0/gpu1, start_s: 20, duration_s: 60, severity: 0.9}
"""


def _reports(requests: list[Request]) -> int:
    return sum(1 for r in requests if r.body["event"] == "report")


def test_one_minute_schedule_writes_reports_and_notifies(tmp_path: Path) -> None:
    port = free_port()
    out = tmp_path / "reports"
    (tmp_path / "aiops.toml").write_text(
        f'[report]\nenabled = true\ncron = "* * * * *"\nout_dir = "{out}"\nkeep_last = 1\nformats = "html,md"\n'
        'since = "1h"\n\n'
        f'[notify]\nretry_max_s = 2\n\n[[notify.webhooks]]\nurl = "http://127.0.0.1:{port}/hook"\nkind = "json"\n'
    )
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    db = tmp_path / "ws.duckdb"
    with Store(db) as store:  # the service last wrote a report an hour ago: the schedule was missed since
        store.conn.execute(
            "INSERT INTO service_state VALUES (?, ?, ?)", [LAST_RUN_KEY, repr(time.time() - 3600), 0.0]
        )
    with receiver(port=port) as hook, running_service(tmp_path, db, "--sim", str(scenario), "--speed", "5"):
        first = hook.wait_for(lambda rs: _reports(rs) >= 1, timeout_s=30)
        started = time.time()
        hook.wait_for(lambda rs: _reports(rs) >= 2, timeout_s=90)
        time.sleep(3)  # a duplicate, if one were coming, would arrive within a retry interval
        got = [r for r in hook.got(None) if r.body["event"] == "report"]
    assert any(r.body["event"] == "report" for r in first)
    assert len(got) == 2, [
        r.body for r in got
    ]  # the missed run once, then the next minute: no catch-up flood
    assert time.time() - started < 75
    keys = [r.body["dedup_key"] for r in got]
    assert len(set(keys)) == 2 and all(k.startswith("report:report-") for k in keys)
    for request in got:
        report = request.body["report"]
        assert report["headline"] and report["has_telemetry"] is True
        assert report["end_ts_s"] - report["start_ts_s"] == 3600
        assert report["link"].endswith(".html")
    # keep_last = 1: only the last report's files remain, and they are the ones the last notification names
    remaining = sorted(p.name for p in out.iterdir())
    last = got[-1].body["report"]["files"]
    assert remaining == sorted(Path(p).name for p in last.values()), remaining
    html = Path(last["html"]).read_text()
    assert "Data coverage" in html and "<svg" in html
    with Store(db, read_only=True) as store:
        rows = store.query("SELECT kind, status FROM notifications WHERE kind = 'report' ORDER BY id")
        last_run = float(store.scalar("SELECT value FROM service_state WHERE key = ?", [LAST_RUN_KEY]))
    assert [r["status"] for r in rows] == ["delivered", "delivered"]
    assert time.time() - last_run < 120
