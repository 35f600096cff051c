"""Issue 13 item 5, the must-show: the real Prometheus (Debian `prometheus`) scrapes `aiops run --sim`'s
`/metrics/dcgm` with a rule that fires on the injected fault (`DCGM_FI_DEV_GPU_TEMP > 85` for 2 s); it alerts
the real Alertmanager (Debian `prometheus-alertmanager`, group_wait 1 s), whose webhook posts to the service's
`POST /api/alertmanager` with the bearer token from `http_config.authorization.credentials_file`; the
diagnosis the service sends to a loopback receiver (its JSON notify sink) names the faulted GPU, and when the
fault ends the resolved alert closes the investigation. Every server is stopped by PID; every wait bounded."""

from __future__ import annotations

import json
import secrets
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from aiops.store import Store
from tests.notify.test_notify_alertmanager import alertmanager_binary
from tests.notify_helpers import Request, no_proxies, receiver
from tests.promsource_helpers import stop
from tests.service_helpers import free_port, get, require_binary, running_service, wait_for

FAULTED_GPU = "node1/gpu2"
SCENARIO = """\
name: alert-in
seed: 5
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 4, nics_per_node: 1}
jobs:
  - {name: llm, nodes: all, step_compute_s: 1.0, allreduce_mb: 64}
faults:
  - {kind: thermal_throttle, target: node1/gpu2, start_s: 30, duration_s: 140, severity: 0.9}
"""
RULES = """\
groups:
  - name: gpu
    interval: 1s
    rules:
      - alert: GpuHot
        expr: DCGM_FI_DEV_GPU_TEMP > 85
        for: 2s
        labels: {severity: critical}
        annotations: {summary: 'GPU {{ $labels.gpu }} of {{ $labels.Hostname }} above 85 C'}
"""
PROMETHEUS = """\
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
rule_files: [{rules}]
alerting:
  alertmanagers:
    - static_configs: [{{targets: ['127.0.0.1:{am_port}']}}]
scrape_configs:
  - {{job_name: dcgm, metrics_path: /metrics/dcgm, honor_labels: true, file_sd_configs: [{{files: ['{targets}']}}]}}
"""
ALERTMANAGER = """\
route:
  receiver: aiops
  group_by: [alertname, Hostname, gpu]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
receivers:
  - name: aiops
    webhook_configs:
      - url: http://127.0.0.1:{aiops_port}/api/alertmanager
        send_resolved: true
        http_config:
          authorization: {{type: Bearer, credentials_file: {token_file}}}
"""


@contextmanager
def server(cmd: list[str], log: Path, ready_url: str) -> Iterator[subprocess.Popen[bytes]]:
    """A real server started from `cmd`, ready when `ready_url` answers 200; stopped by its PID after."""
    out = log.open("ab")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_for(lambda: proc.poll() is not None or get(ready_url, 2.0)[0] == 200, 60, f"{cmd[0]} ready")
        assert proc.poll() is None, log.read_text()[-2000:]
        yield proc
    finally:
        stop(proc)
        out.close()


def _events(got: list[Request], event: str) -> list[dict[str, Any]]:
    return [
        r.body
        for r in got
        if isinstance(r.body, dict)
        and r.body.get("event") == event
        and str(r.body["incident"]["id"]).startswith("am-")
    ]


def test_a_prometheus_alert_through_alertmanager_is_diagnosed_and_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prometheus, alertmanager = require_binary("prometheus"), alertmanager_binary()
    no_proxies(monkeypatch)
    token_file = tmp_path / "alertmanager.token"
    token_file.write_text(secrets.token_urlsafe(24) + "\n")
    token_file.chmod(0o600)
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    db = tmp_path / "ws.duckdb"
    with receiver() as hook:
        (tmp_path / "aiops.toml").write_text(
            "[detection]\nquiet_s = 30\n\n[notify]\nretry_max_s = 2\n\n"
            f'[[notify.webhooks]]\nurl = "{hook.url}/hook"\nkind = "json"\n\n'
            f'[alertmanager_in]\ntoken_file = "{token_file}"\n'
        )
        # Prometheus starts with the service (its scrape target in a watched file, written once the service
        # listens: Prometheus sends discovered targets to its scrapers at most every 5 s, counted from its start)
        am_port, prom_port = free_port(), free_port()
        am_config, rules, prom_config = (tmp_path / n for n in ("am.yml", "rules.yml", "prom.yml"))
        targets = tmp_path / "targets.json"
        targets.write_text("[]")
        rules.write_text(RULES)
        prom_config.write_text(PROMETHEUS.format(rules=rules, am_port=am_port, targets=targets))
        prom_cmd = [
            prometheus,
            f"--config.file={prom_config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
        ]
        with (
            server(prom_cmd, tmp_path / "prometheus.log", f"http://127.0.0.1:{prom_port}/-/ready"),
            running_service(tmp_path, db, "--sim", str(scenario), "--speed", "10") as (_, port),
        ):
            targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"]}]))
            am_config.write_text(ALERTMANAGER.format(aiops_port=port, token_file=token_file))
            am_cmd = [
                alertmanager,
                f"--config.file={am_config}",
                f"--storage.path={tmp_path / 'am'}",
                f"--web.listen-address=127.0.0.1:{am_port}",
                "--cluster.listen-address=",
            ]
            with server(am_cmd, tmp_path / "alertmanager.log", f"http://127.0.0.1:{am_port}/-/ready"):
                hook.wait_for(lambda got: bool(_events(got, "diagnosed")), timeout_s=150)
                hook.wait_for(lambda got: bool(_events(got, "resolved")), timeout_s=150)
    diagnosed = _events(hook.got(None), "diagnosed")
    resolved = _events(hook.got(None), "resolved")
    assert len(diagnosed) == 1 and len(resolved) == 1, [r.body for r in hook.got(None)]
    top = diagnosed[0]["top_hypothesis"]
    assert top["root_cause"] == "thermal_throttle" and top["component"] == FAULTED_GPU, top
    assert top["evidence"], top  # the evidence titles travel with the diagnosis
    assert diagnosed[0]["incident"]["components"] == [FAULTED_GPU]
    assert resolved[0]["incident"]["id"] == diagnosed[0]["incident"]["id"]
    with Store(db, read_only=True) as store:
        rows = store.query("SELECT * FROM alert_investigations")
        incidents = {str(r["incident_id"]) for r in store.query("SELECT incident_id FROM incidents")}
    assert [(r["status"], r["component"], r["alertname"]) for r in rows] == [
        ("resolved", FAULTED_GPU, "GpuHot")
    ]
    assert rows[0]["incident_id"] in incidents  # linked to the live incident, not a duplicate of it
    log = (tmp_path / "service.log").read_text()
    assert token_file.read_text().strip() not in log
