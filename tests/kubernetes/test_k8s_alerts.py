"""The chart's alert rules fire: a real Prometheus (127.0.0.1, a free port) loads the PrometheusRule's groups as
rendered by Helm and scrapes a real `aiops run --sim` as the PodMonitor would (job `aiops-node`, honor_labels).
The twin's fault starts 25 wall seconds in: before it, with every rule evaluated on scraped data, no alert is
pending or firing; after it, AiopsIncidentOpen fires with the incident's cause, component and severity.
One service and one Prometheus for the module."""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s_helpers import NO_FLEET, prometheus_config, render, rule_groups
from tests.prometheus_process import prometheus_running
from tests.service_helpers import (
    get,
    get_json,
    require_binary,
    running_service,
    wait_for,
)

# Simulated seconds per wall second: 20, not 60 (an agent's CPU grows with the simulated seconds it steps, collects,
# stores and detects on: about 0.8 + 0.33 x speed CPU-s a wall minute, docs/notes/weak_tests.md); every wait below
# is in wall seconds, and the fault stays 25 wall s after the twin starts
SPEED = 20.0
FAULT_START_S = 25 * SPEED  # simulated: 25 s of wall time after the twin starts (slack for a loaded machine)
SCENARIO = f"""\
name: k8s-alerts
seed: 7
duration_s: 7200
cluster: {{racks: 1, nodes_per_rack: 2, gpus_per_node: 4, nics_per_node: 1}}
jobs:
  - {{name: llm, nodes: all, step_compute_s: 1.0, allreduce_mb: 64}}
faults:
  - {{kind: thermal_throttle, target: node1/gpu2, start_s: {FAULT_START_S:g}, severity: 0.9}}
"""


@dataclass
class Stack:
    prom: int
    agent: int  # the agent's port
    epoch_ts_s: float  # the twin's simulated second 0
    service_log: Path

    def twin_s(self) -> float:
        """The twin's clock now, in simulated seconds: its newest training step, read from the agent itself."""
        status, body = get(f"http://127.0.0.1:{self.agent}/metrics")
        assert status == 200
        steps = [
            float(line.rsplit(" ", 1)[1])
            for line in body.decode().splitlines()
            if line.startswith("aiops_job_last_step_timestamp_seconds{")
        ]
        assert steps, "the agent exports no aiops_job_last_step_timestamp_seconds"
        return max(steps) - self.epoch_ts_s


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    require_binary("prometheus")  # fail (or skip) before starting anything
    tmp_path = tmp_path_factory.mktemp("k8s-alerts")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    job = yaml.safe_load((Path(__file__).parents[2] / "deploy/helm/aiops/values.yaml").read_text())[
        "monitoring"
    ]["nodeJob"]
    # Prometheus starts beside the service, its target in a watched file written once the service listens
    # (Prometheus hands discovered targets to its scrapers at most every 5 s, counted from its start)
    targets = tmp_path / "targets.json"
    targets.write_text("[]")
    config = prometheus_config(tmp_path, 0, job, targets_file=targets)
    epoch_ts_s = float(int(time.time()))
    args = ("--sim", str(scenario), "--speed", f"{SPEED:g}", "--epoch-ts-s", repr(epoch_ts_s))
    with (
        prometheus_running(config, tmp_path) as prom,
        running_service(tmp_path, tmp_path / "twin.duckdb", *args) as (_proc, port),
    ):
        targets.write_text(json.dumps([{"targets": [f"127.0.0.1:{port}"]}]))
        yield Stack(prom, port, epoch_ts_s, tmp_path / "service.log")


def api(stack: Stack, path: str, **params: str) -> Any:
    body = get_json(f"http://127.0.0.1:{stack.prom}/api/v1/{path}?" + urllib.parse.urlencode(params))
    assert body["status"] == "success", body
    return body["data"]


def alerts(stack: Stack) -> list[dict[str, Any]]:
    return list(api(stack, "alerts")["alerts"])


def unix_s(rfc3339: str) -> float:
    """Prometheus' RFC 3339 times (nanoseconds, `Z` or an offset) as Unix seconds."""
    found = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?(Z|[+-]\d\d:\d\d)", rfc3339)
    assert found, rfc3339
    whole = datetime.fromisoformat(found[1] + ("+00:00" if found[3] == "Z" else found[3]))
    return whole.timestamp() + float(found[2] or 0)


def evaluated_on_data(stack: Stack) -> bool:
    """Every rule group has been evaluated after Prometheus held the agent's incident and ingest series."""
    if not api(stack, "query", query="aiops_ingested_rows_total")["result"]:
        return False
    first = min(
        float(s["values"][0][0]) for s in api(stack, "query", query="aiops_flushes_total[1m]")["result"]
    )
    return all(unix_s(g["lastEvaluation"]) > first + 2 for g in api(stack, "rules")["groups"])


def test_rules_load_into_prometheus(stack: Stack) -> None:
    groups = api(stack, "rules")["groups"]
    loaded = {r["name"] for g in groups for r in g["rules"]}
    rendered = {r["alert"] for g in rule_groups(render(NO_FLEET))["groups"] for r in g["rules"]}
    assert loaded == rendered
    assert all(r["health"] in ("ok", "unknown") for g in groups for r in g["rules"]), groups


def test_a_healthy_twin_fires_nothing_then_the_fault_fires_the_incident_alert(stack: Stack) -> None:
    wait_for(lambda: evaluated_on_data(stack), 15, "the rules evaluated on scraped data", interval_s=0.5)
    before = alerts(stack)
    twin_s = stack.twin_s()  # read after the alerts: they were taken before this simulated second
    assert twin_s < FAULT_START_S, f"too slow to see the twin before its fault (twin at {twin_s:.0f} s)"
    assert before == [], before  # no alert pending or firing while the twin is healthy
    assert api(stack, "query", query="aiops_incident_open")["result"] == []

    def firing() -> list[dict[str, Any]]:
        return [
            a
            for a in alerts(stack)
            if a["labels"]["alertname"] == "AiopsIncidentOpen" and a["state"] == "firing"
        ]

    fired = wait_for(firing, 150, "AiopsIncidentOpen to fire", interval_s=1.0)
    assert stack.twin_s() >= FAULT_START_S  # not before the fault
    labels = fired[0]["labels"]
    assert labels["root_cause"] == "thermal_throttle" and labels["component"] == "node1/gpu2", fired
    assert labels["severity"] in ("warning", "critical") and labels["incident_id"].startswith("INC-"), labels
    assert labels["job"] == "aiops-node"
    summary = fired[0]["annotations"]["summary"]
    assert summary == f"thermal_throttle on node1/gpu2 ({labels['incident_id']})", summary
    # the agent itself stays healthy: nothing else fires, and nothing else is pending but the ingest lag, which is
    # measured on the twin's clock: at 20x, a flush that a loaded runner delays 15 s is 300 twin seconds late
    others = [
        a["labels"]["alertname"]
        for a in alerts(stack)
        if a["labels"]["alertname"] != "AiopsIncidentOpen"
        and (a["state"] == "firing" or a["labels"]["alertname"] != "AiopsIngestLag")
    ]
    assert others == [], others
