"""Notifications through the service itself: `aiops run --sim` with a JSON webhook whose receiver does not
exist for the first 10 s; once it listens it gets the incident's opened, diagnosed and resolved events, each
exactly once and in that order, and the queue in the workspace says delivered."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from aiops.store import Store
from tests.notify_helpers import receiver
from tests.service_helpers import free_port, get_json, running_service, wait_for

SCENARIO = """\
name: notify-service
seed: 11
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 4, nics_per_node: 1}
jobs:
  - {name: llm, nodes: all, step_compute_s: 1.0, allreduce_mb: 64}
faults:
  - {kind: thermal_throttle, target: node0/gpu1, start_s: 20, duration_s: 60, severity: 0.9}
"""


def test_a_webhook_down_for_10_s_gets_opened_diagnosed_resolved_once_each(tmp_path: Path) -> None:
    port = free_port()
    (tmp_path / "aiops.toml").write_text(
        "[detection]\nquiet_s = 30\n\n"
        f'[notify]\nretry_max_s = 2\n\n[[notify.webhooks]]\nurl = "http://127.0.0.1:{port}/hook"\nkind = "json"\n'
    )
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    db = tmp_path / "ws.duckdb"
    started = time.monotonic()
    with running_service(tmp_path, db, "--sim", str(scenario), "--speed", "10") as (_, api_port):
        # Nothing listens on the port until the incident is open and its first delivery has had a retry interval
        # to fail (under load the incident may open after the 10 s), and never before 10 s.
        wait_for(
            lambda: get_json(f"http://127.0.0.1:{api_port}/api/incidents")["incidents"],
            120,
            "an incident to open",
        )
        opened_s = time.monotonic()
        time.sleep(max(0.0, 10.0 - (opened_s - started), 3.0))
        with receiver(port=port) as hook:
            got = hook.wait_for(lambda rs: any(r.body["event"] == "resolved" for r in rs), timeout_s=90)
            time.sleep(3)  # a duplicate, if one were coming, would arrive within a retry interval
            got = hook.got(None)
    assert got, "the receiver got nothing"
    assert all(r.status == 200 and r.path == "/hook" for r in got)
    assert got[0].at_s - started >= 10.0
    ours = next(r.body["incident"]["id"] for r in got if "node0/gpu1" in r.body["incident"]["components"])
    events = [r.body["event"] for r in got if r.body["incident"]["id"] == ours]
    assert events == ["opened", "diagnosed", "resolved"], [r.body for r in got]
    keys = Counter(r.body["dedup_key"] for r in got)
    assert max(keys.values()) == 1, keys
    diagnosed = next(
        r.body for r in got if r.body["event"] == "diagnosed" and r.body["incident"]["id"] == ours
    )
    assert diagnosed["top_hypothesis"]["root_cause"] == "thermal_throttle"
    assert diagnosed["top_hypothesis"]["component"] == "node0/gpu1"
    assert diagnosed["incident"]["link"].endswith("/api/incidents/" + diagnosed["incident"]["id"])
    with Store(db, read_only=True) as store:
        rows = store.query("SELECT kind, status, attempts FROM notifications ORDER BY id")
    assert [r["status"] for r in rows] == ["delivered"] * len(rows)
    assert (
        rows[0]["kind"] == "opened" and rows[0]["attempts"] > 1
    )  # it was queued while the receiver was down
