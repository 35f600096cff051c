"""Issue 23, M4: ~3,000 distinct alerts made 200 investigations per flush (~30 s each flush): /healthz answered
503 and the queue took ~7 min to drain. A real `aiops run` is sent 3,000 distinct firing alerts through its
Alertmanager webhook as Alertmanager sends them: one request per aggregation group (30 groups of 100), several
groups at once, each retried on 503: each flush investigates for at most `[alertmanager_in] budget_s`, at most
`max_waiting` alerts queue past it and the oldest beyond are shed, counted in /metrics
(`aiops_alerts_shed_total`). /healthz is stressed meanwhile as a node's probers ask it (the kubelet's liveness
probe, a load balancer, a blackbox exporter): PROBERS clients at once, 40 questions a second, each answer within the
liveness probe's own `timeoutSeconds` (deploy/daemonset.yaml): never a 503, never a timeout."""

from __future__ import annotations

import http.client
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path

import yaml

from tests.service_helpers import TINY_SCENARIO, get, running_service, wait_for

TOKEN = "flood-token-for-tests"
ALERTS = 3000
BATCH = 100  # one aggregation group's alerts: one webhook request
SENDERS = 6  # groups Alertmanager notifies at once
PROBERS = 2  # clients asking /healthz at once
PAUSE_S = 0.05  # between one prober's answer and its next question (40 questions a second in all)


def liveness_timeout_s() -> float:
    """The kubelet's deadline for /healthz: the node DaemonSet's livenessProbe timeoutSeconds."""
    manifest = Path(__file__).resolve().parents[2] / "deploy" / "daemonset.yaml"
    for doc in yaml.safe_load_all(manifest.read_text()):
        if doc and doc.get("kind") == "DaemonSet":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                probe = container.get("livenessProbe")
                if probe and probe["httpGet"]["path"] == "/healthz":
                    return float(probe["timeoutSeconds"])
    raise AssertionError("deploy/daemonset.yaml has no /healthz liveness probe")


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
        {
            "version": "4",
            "groupKey": f'{{}}:{{group="{first // BATCH}"}}',
            "status": "firing",
            "receiver": "aiops",
            "alerts": alerts,
        }
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
    deadline_s = liveness_timeout_s()
    health: list[tuple[int, float]] = []  # (status, seconds the answer took)
    stop = threading.Event()
    with running_service(tmp_path, db, "--sim", str(scenario), "--speed", "10") as (_, port):

        def probe() -> None:
            while not stop.is_set():
                started = time.monotonic()
                try:
                    status = get(f"http://127.0.0.1:{port}/healthz", deadline_s)[0]
                except OSError:  # no answer within the kubelet's deadline: the probe failed
                    status = 0
                health.append((status, time.monotonic() - started))
                stop.wait(PAUSE_S)

        probers = [threading.Thread(target=probe, daemon=True) for _ in range(PROBERS)]
        for prober in probers:
            prober.start()
        try:

            def send(first: int) -> None:  # Alertmanager retries a 503 (a full inbox)
                body = _body(first)
                wait_for(lambda: _post(port, body) == 200, 120, "the inbox to take a group")

            with ThreadPoolExecutor(SENDERS) as senders:
                list(senders.map(send, range(0, ALERTS, BATCH)))

            def drained() -> tuple[float, float] | None:
                """(shed, investigated) once every alert is taken in and none waits; the waiting gauge counts
                the loop's queue, not the inbox: the last group may still be in the inbox when it reads 0."""
                counts = [
                    _metric(port, name)
                    for name in (
                        "aiops_alerts_waiting",
                        "aiops_alerts_received_total",
                        "aiops_alerts_shed_total",
                        "aiops_alert_investigations_total",
                    )
                ]
                waiting, received, shed, investigated = counts
                if waiting == 0 and received == ALERTS and shed + investigated >= ALERTS:
                    return shed, investigated
                return None

            shed, investigated = wait_for(drained, 240, "the alert queue to drain")
        finally:
            stop.set()
            for prober in probers:
                prober.join(timeout=10)
    assert shed > 0 and shed + investigated == ALERTS, (shed, investigated)
    assert len(health) > 20 * PROBERS, len(health)  # the probers kept asking throughout
    failed = [(status, round(took_s, 2)) for status, took_s in health if status != 200]
    assert not failed, (
        f"{len(failed)} of {len(health)} probes failed (0: no answer in {deadline_s:g} s): {failed[:10]}"
    )
