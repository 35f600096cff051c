"""Issue 23, M4: ~3,000 distinct alerts made 200 investigations per flush (~30 s each flush): /healthz answered
503 and the queue took ~7 min to drain. A real `aiops run` is sent 3,000 distinct firing alerts through its
Alertmanager webhook (as Alertmanager does: batches of 1,000, retried on 503): each flush investigates for at
most `[alertmanager_in] budget_s`, at most `max_waiting` alerts queue past it and the oldest beyond are shed,
counted in /metrics (`aiops_alerts_shed_total`); /healthz never fails meanwhile."""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from tests.service_helpers import TINY_SCENARIO, get, running_service, wait_for

TOKEN = "flood-token-for-tests"
ALERTS = 3000
BATCH = 1000


def _body(first: int) -> bytes:
    starts = datetime.fromtimestamp(time.time() - 60, UTC).isoformat()
    alerts = [
        {
            "status": "firing",
            "labels": {"alertname": "GpuHot", "instance": f"node{i % 2}", "gpu": str(i % 4), "n": str(i)},
            "annotations": {"summary": "hot"},
            "startsAt": starts,
            "endsAt": "0001-01-01T00:00:00Z",
            "fingerprint": f"{i:016x}",
        }
        for i in range(first, first + BATCH)
    ]
    return json.dumps(
        {"version": "4", "groupKey": "{}:{}", "status": "firing", "receiver": "aiops", "alerts": alerts}
    ).encode()


def _post(port: int, body: bytes) -> int:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        conn.request(
            "POST",
            "/api/alertmanager",
            body=body,
            headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"},
        )
        reply = conn.getresponse()
        reply.read()
        return reply.status
    finally:
        conn.close()


def _metric(port: int, name: str) -> float:
    status, text = get(f"http://127.0.0.1:{port}/metrics", 10.0)
    assert status == 200
    found = re.search(rf"^{name}(?:{{[^}}]*}})? ([0-9.e+]+)$", text.decode(), re.MULTILINE)
    return float(found.group(1)) if found else -1.0


def test_three_thousand_alerts_never_fail_healthz_and_the_shed_ones_are_counted(tmp_path: Path) -> None:
    db, scenario = tmp_path / "svc.duckdb", tmp_path / "tiny.yaml"
    scenario.write_text(TINY_SCENARIO)
    token_file = tmp_path / "am.token"
    token_file.write_text(TOKEN + "\n")
    (tmp_path / "aiops.toml").write_text(
        f'[alertmanager_in]\ntoken_file = "{token_file}"\nbudget_s = 0.5\nmax_waiting = 25\n'
    )
    health: list[int] = []
    stop = threading.Event()
    with running_service(tmp_path, db, "--sim", str(scenario), "--speed", "10") as (_, port):

        def probe() -> None:
            while not stop.is_set():
                try:
                    health.append(get(f"http://127.0.0.1:{port}/healthz", 5.0)[0])
                except OSError:
                    health.append(0)
                stop.wait(0.2)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        try:
            for first in range(0, ALERTS, BATCH):  # Alertmanager retries a 503 (a full inbox)
                body = _body(first)
                wait_for(lambda body=body: _post(port, body) == 200, 120, "the inbox to take a batch")
            wait_for(
                lambda: (
                    _metric(port, "aiops_alerts_waiting") == 0
                    and _metric(port, "aiops_alerts_received_total") == ALERTS
                ),
                240,
                "the alert queue to drain",
            )
            shed = _metric(port, "aiops_alerts_shed_total")
            investigated = _metric(port, "aiops_alert_investigations_total")
        finally:
            stop.set()
            prober.join(timeout=10)
    assert shed > 0 and shed + investigated == ALERTS, (shed, investigated)
    assert health and all(status == 200 for status in health), sorted(set(health))
