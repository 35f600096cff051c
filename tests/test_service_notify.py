"""Notifications through the service itself: the service of `aiops run --sim`, driven in-process on a clock the
test holds (tests/service_inprocess.py), with a JSON webhook whose receiver does not exist until the incident's
first notification has failed twice; once it listens it gets the incident's opened, diagnosed and resolved
events, each exactly once and in that order, and the queue in the workspace says delivered."""

from __future__ import annotations

import time
from collections import Counter
from pathlib import Path

from aiops.store import Store
from tests.notify_helpers import receiver
from tests.service_helpers import free_port, wait_for
from tests.service_inprocess import HeldClock, service_in_process

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


def test_a_webhook_down_gets_opened_diagnosed_resolved_once_each(tmp_path: Path) -> None:
    port = free_port()
    config = {
        "detection": {"quiet_s": 30},
        # undiagnosed_hold_s 0: the incident pages as it opens, so the sink gets opened, diagnosed and resolved
        "notify": {
            "retry_max_s": 2,
            "undiagnosed_hold_s": 0,
            "webhooks": [{"url": f"http://127.0.0.1:{port}/hook", "kind": "json"}],
        },
        "http": {"listen": "127.0.0.1:0"},  # the events link to the service's API
    }
    db = tmp_path / "ws.duckdb"
    held = HeldClock(time.time())
    with service_in_process(db, SCENARIO, config, held, speed=10) as service:

        def failed_attempts() -> int:
            with service.workspace.read() as store:
                return int(store.scalar("SELECT coalesce(max(attempts), 0) FROM notifications") or 0)

        for service_s in range(1, 31):  # the fault begins at 20 simulated s: 2 s of service time at 10x
            held.run_until(float(service_s))
            with service.workspace.read() as store:
                if store.scalar("SELECT count(*) FROM notifications"):
                    break
        # Nothing listens on the port until the incident's first notification has failed and failed again
        # (the delivery thread retries on wall time while the loop waits).
        wait_for(lambda: failed_attempts() >= 2, 60, "two failed deliveries", interval_s=0.1)
        opened_s = time.monotonic()
        with receiver(port=port) as hook:
            held.run_until(40.0)  # past the fault's end (80 simulated s) and the 30 s quiet period
            got = hook.wait_for(lambda rs: any(r.body["event"] == "resolved" for r in rs), timeout_s=90)
            time.sleep(3)  # a duplicate, if one were coming, would arrive within a retry interval
            got = hook.got(None)
    assert got, "the receiver got nothing"
    assert all(r.status == 200 and r.path == "/hook" for r in got)
    assert got[0].at_s >= opened_s
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
        rows[0]["kind"] == "opened" and rows[0]["attempts"] > 2
    )  # it was queued while the receiver was down
