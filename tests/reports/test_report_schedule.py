"""The report schedule through the service itself: the service of `aiops run --sim` with a one-minute cron
schedule, a JSON webhook on loopback and a workspace whose last report is an hour old, driven in-process on a
clock the test holds (tests/service_inprocess.py: the minute boundary comes when the test says, not after up to a
minute of wall time). The missed schedule runs once at start, the next minute's runs on time (at the first flush
past the boundary), nothing more until the minute after, only the last report is kept (keep_last = 1), and the
receiver gets each report's headline with the path of its HTML, once."""

from __future__ import annotations

import time
from pathlib import Path

from aiops.report.schedule import LAST_RUN_KEY
from aiops.store import Store, Workspace
from tests.notify_helpers import Request, receiver
from tests.service_inprocess import HeldClock, minute_boundary_before, service_in_process

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
FLUSH_S = 2.0  # [store] flush_interval_s: the schedule is judged at each flush
TICK_S = 0.2  # --speed 5 (a flush may come a tick late: the loop adds up its ticks in floating point)


def _reports(requests: list[Request]) -> list[Request]:
    return [r for r in requests if r.body["event"] == "report"]


def _last_run(workspace: Workspace) -> float:
    with workspace.read() as store:
        return float(store.scalar("SELECT value FROM service_state WHERE key = ?", [LAST_RUN_KEY]))


def test_one_minute_schedule_writes_reports_and_notifies(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    boundary_ts_s = minute_boundary_before(time.time(), 45.0)  # held time ends at +20 s
    held = HeldClock(wall_start_ts_s=boundary_ts_s - 20.0)  # the service starts 20 s before a minute boundary
    db = tmp_path / "ws.duckdb"
    with Store(db) as store:  # the service last wrote a report an hour ago: the schedule was missed since
        store.conn.execute(
            "INSERT INTO service_state VALUES (?, ?, ?)", [LAST_RUN_KEY, repr(held.wall() - 3600), 0.0]
        )
    with receiver() as hook:
        config = {
            "report": {
                "enabled": True,
                "cron": "* * * * *",
                "out_dir": str(out),
                "keep_last": 1,
                "formats": "html,md",
                "since": "1h",
            },
            "notify": {"retry_max_s": 2, "webhooks": [{"url": f"{hook.url}/hook", "kind": "json"}]},
            "store": {"flush_interval_s": FLUSH_S},
        }
        with service_in_process(db, SCENARIO, config, held, speed=5) as service:
            held.run_until(15.0)  # the missed run at the first flush; the boundary is 5 s away
            first = hook.wait_for(lambda rs: len(_reports(rs)) >= 1, timeout_s=30)
            first_run_ts_s = _last_run(service.workspace)
            held.run_until(30.0)  # past the boundary (at 20 s)
            hook.wait_for(lambda rs: len(_reports(rs)) >= 2, timeout_s=30)
            second_run_ts_s = _last_run(service.workspace)
            held.run_until(40.0)  # 20 s on: nothing more is due before the next boundary (at 80 s)
            time.sleep(3)  # a duplicate, if one were coming, would arrive within a retry interval
            got = _reports(hook.got(None))
    assert len(_reports(first)) == 1
    assert len(got) == 2, [
        r.body for r in got
    ]  # the missed run once, then the next minute: no catch-up flood
    assert (
        held.wall_start_ts_s < first_run_ts_s <= held.wall_start_ts_s + FLUSH_S + 2 * TICK_S
    )  # at the 1st flush
    assert (
        boundary_ts_s <= second_run_ts_s <= boundary_ts_s + FLUSH_S + 2 * TICK_S
    )  # on time: the flush after it
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
    assert [r["status"] for r in rows] == ["delivered", "delivered"]
    assert _last_run(Workspace(db)) == second_run_ts_s  # the final flush at stop wrote none either
