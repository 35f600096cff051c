"""No empty panel: every query of the Grafana dashboards (deploy/grafana/dashboards) returns data from a real
Prometheus scraping a real `aiops run --sim` (with a fault, so incidents and the chart's alerts exist; the
chart's rules are loaded, as the PrometheusRule would). Each `$variable` is resolved as Grafana would: its
`label_values(...)` query asked of the same Prometheus, the first real value taken (chained variables see the
values chosen before them). One service and one Prometheus for the module."""

from __future__ import annotations

import json
import re
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.k8s_helpers import GRAFANA, prometheus_scraping
from tests.service_helpers import get_json, require_binary, running_service, wait_for

DASHBOARDS = sorted((GRAFANA / "dashboards").glob("*.json"))
SCENARIO = """\
name: k8s-dashboards
seed: 11
duration_s: 7200
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 4, nics_per_node: 1}
jobs:
  - {name: llm, nodes: all, step_compute_s: 1.0, allreduce_mb: 64}
faults:
  - {kind: thermal_throttle, target: node1/gpu2, start_s: 60, severity: 0.9}
"""
# Grafana's built-in interval variables, as they would be with a 1 s scrape interval and a 1 h dashboard.
BUILTINS = {"__rate_interval": "1m", "__interval": "15s", "__range": "1h"}
LABEL_VALUES = re.compile(r"^label_values\((?P<selector>.+),\s*(?P<label>\w+)\)$")
VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)")


def panels(dashboard: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # collapsed rows hold theirs


def substitute(text: str, values: dict[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        assert name in values, f"${name} is neither a variable of the dashboard nor a Grafana built-in"
        return values[name]

    return VARIABLE.sub(one, text)


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    require_binary("prometheus")  # fail (or skip) before starting anything
    tmp_path = tmp_path_factory.mktemp("k8s-dashboards")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(SCENARIO)
    with (
        running_service(tmp_path, tmp_path / "twin.duckdb", "--sim", str(scenario), "--speed", "30") as (
            _,
            port,
        ),
        prometheus_scraping(tmp_path, port, "aiops-node") as prom,
    ):
        # The incident open and its alert firing: then every panel has what it shows.
        wait_for(
            lambda: query(prom, 'ALERTS{alertname="AiopsIncidentOpen", alertstate="firing"}', instant=True),
            150,
            "the incident's alert to fire",
            interval_s=1.0,
        )
        time.sleep(3)  # rate() and increase() need two scrapes of every counter in their window
        yield prom


def query(prom: int, promql: str, instant: bool) -> list[dict[str, Any]]:
    now = time.time()
    if instant:
        params = {"query": promql, "time": f"{now:.3f}"}
        path = "query"
    else:
        params = {"query": promql, "start": f"{now - 120:.3f}", "end": f"{now:.3f}", "step": "2"}
        path = "query_range"
    body = get_json(f"http://127.0.0.1:{prom}/api/v1/{path}?" + urllib.parse.urlencode(params))
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def resolve_variables(prom: int, dashboard: dict[str, Any]) -> dict[str, str]:
    values = dict(BUILTINS)
    for variable in dashboard["templating"]["list"]:
        name, kind = variable["name"], variable["type"]
        if kind == "datasource":
            assert variable["query"] == "prometheus"
            values[name] = "prometheus"
        elif kind == "constant":
            values[name] = variable["query"]
        else:
            assert kind == "query", f"{name}: variable type {kind} is not resolved by this test"
            found = LABEL_VALUES.match(substitute(variable["query"]["query"], values))
            assert found, f"{name}: {variable['query']['query']!r} is not label_values(selector, label)"
            series = get_json(
                f"http://127.0.0.1:{prom}/api/v1/series?"
                + urllib.parse.urlencode({"match[]": found["selector"], "start": f"{time.time() - 300:.0f}"})
            )["data"]
            options = sorted({s[found["label"]] for s in series if found["label"] in s})
            assert options, (
                f"variable ${name} has no value: {found['selector']} has no {found['label']} label"
            )
            values[name] = options[0]
    return values


def test_dashboards_are_provisioned_and_well_formed() -> None:
    provider = yaml.safe_load((GRAFANA / "provisioning" / "dashboards.yaml").read_text())
    assert provider["apiVersion"] == 1 and provider["providers"][0]["type"] == "file"
    assert [p.name for p in DASHBOARDS] == ["aiops-fleet.json", "aiops-node.json"]
    uids = set()
    for path in DASHBOARDS:
        dashboard = json.loads(path.read_text())
        assert dashboard["uid"] not in uids and dashboard["title"] and dashboard["schemaVersion"] >= 36
        uids.add(dashboard["uid"])
        ids = [p["id"] for p in panels(dashboard)]
        assert len(ids) == len(set(ids)), f"{path.name}: panel ids repeat"
        for panel in panels(dashboard):
            assert panel["title"] and panel["targets"], f"{path.name}: a panel without title or query"
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, panel["title"]
            grid = panel["gridPos"]
            assert grid["x"] + grid["w"] <= 24, f"{path.name}: {panel['title']} is wider than the grid"


@pytest.mark.parametrize("path", DASHBOARDS, ids=lambda p: p.stem)
def test_every_panel_query_returns_data(prom: int, path: Path) -> None:
    dashboard = json.loads(path.read_text())
    values = resolve_variables(prom, dashboard)
    empty, ran = [], 0
    for panel in panels(dashboard):
        for target in panel["targets"]:
            promql = substitute(target["expr"], values)
            ran += 1
            if not query(prom, promql, instant=bool(target.get("instant"))):
                empty.append(f"{panel['title']} [{target['refId']}]: {promql}")
    assert ran >= 10
    assert empty == [], "empty panels:\n" + "\n".join(empty)
