"""Issue 35 item 2, the chart's side of one page per problem, run by `promtool test rules` on the rendered
PrometheusRule (the live run with real agents, fleet, Prometheus and Alertmanager is tests/test_pages_live.py):
the fleet's incident pages at once; a node agent's incident the fleet covers (the fleet exports
`aiops_incident_pages == 0` for it) never fires; one the fleet does not cover fires after `nodeIncidentFor`, not
before; an incident held, covered or under maintenance on its own tier does not fire; an undiagnosed incident
nobody covers fires AiopsIncidentUndiagnosed. The inhibition rules the chart ships load into the real
Alertmanager's `amtool check-config`, and into a real Alertmanager where the fleet's `node_agent_lost` alert
mutes the chart's `AiopsAgentDown` of the same target and of no other (one killed agent, one page)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from aiops.integrations.event import incident_event
from aiops.integrations.payloads import alertmanager_alerts
from aiops.store.conditions import NODE_AGENT_LOST, condition_incident
from tests.k8s_helpers import one, render, rule_groups
from tests.notify.test_notify_alertmanager import alertmanager_binary, wait_ready
from tests.notify_helpers import no_proxies
from tests.service_helpers import free_port, require_binary

FLEET, NODE = 'job="aiops-fleet",instance="f:9484"', 'job="aiops-node"'


def open_series(
    labels: str, incident_id: str, root_cause: str, component: str, values: str
) -> dict[str, str]:
    return {
        "series": f'aiops_incident_open{{{labels},incident_id="{incident_id}",severity="critical",'
        f'root_cause="{root_cause}",component="{component}"}}',
        "values": values,
    }


def pages_series(labels: str, incident_id: str, value: int, reason: str, values: str = "") -> dict[str, str]:
    return {
        "series": f'aiops_incident_pages{{{labels},node="x",incident_id="{incident_id}",reason="{reason}",'
        'covered_by="",window_id=""}',
        "values": values or f"{value}x60",
    }


LIST = "aiops actions list --config /etc/aiops/config.toml --status pending"
PENDING = {  # where the alert says the incident's pending actions are listed (the fleet's, or that node's own)
    "aiops-fleet": f"kubectl -n aiops exec deploy/aiops-fleet -c fleet -- {LIST}",
    "aiops-node": f"kubectl -n aiops-node exec POD -- {LIST} (POD: the agent's pod on that node, kubectl -n "
    "aiops-node get pods -o wide -l app.kubernetes.io/instance=aiops,app.kubernetes.io/component=node)",
}


def fired(labels: str, incident_id: str, root_cause: str, component: str) -> dict[str, Any]:
    job, instance = (part.split("=")[1].strip('"') for part in labels.split(","))
    return {
        "exp_labels": {
            "tier": "fleet" if job == "aiops-fleet" else "node",
            "job": job,
            "instance": instance,
            "incident_id": incident_id,
            "severity": "critical",
            "root_cause": root_cause,
            "component": component,
        },
        "exp_annotations": {
            "summary": f"{root_cause} on {component} ({incident_id})",
            "description": f"{job} on {instance} opened {incident_id} (critical); its top hypothesis is "
            f"{root_cause} on {component}. Pending actions: {PENDING[job]}.",
        },
    }


N3, N5, N6 = f'{NODE},instance="n3:9484"', f'{NODE},instance="n5:9484"', f'{NODE},instance="n6:9484"'
TESTS: dict[str, Any] = {
    "evaluation_interval": "30s",
    "tests": [
        {
            "interval": "30s",
            "input_series": [
                # the fleet's incident, paging; its other one held (no diagnosis yet)
                open_series(FLEET, "INC-fleet-0001", "thermal_throttle", "node3/gpu1", "1x60"),
                pages_series(FLEET, "INC-fleet-0001", 1, "pages"),
                open_series(FLEET, "INC-fleet-0002", "", "job:bert", "1x60"),
                pages_series(FLEET, "INC-fleet-0002", 0, "held"),
                # node3's own incident about the same GPU: the fleet covers it from its second step on
                open_series(N3, "INC-node3-0001", "thermal_throttle", "node3/gpu1", "1x60"),
                pages_series(FLEET, "INC-node3-0001", 0, "covered", "_ 0x59"),
                # node5's incident the fleet does not cover: its own word, after nodeIncidentFor
                open_series(N5, "INC-node5-0001", "nic_link_flap", "node5/nic0", "1x60"),
                pages_series(N5, "INC-node5-0001", 1, "pages"),
                # node6's undiagnosed incident: held on its node, then paging on its own (nothing covers it)
                open_series(N6, "INC-node6-0001", "", "node6/gpu0", "1x60"),
                pages_series(N6, "INC-node6-0001", 0, "held", "0x10 1x50"),
            ],
            "alert_rule_test": [
                {
                    "eval_time": "30s",
                    "alertname": "AiopsIncidentOpen",
                    "exp_alerts": [fired(FLEET, "INC-fleet-0001", "thermal_throttle", "node3/gpu1")],
                },
                {
                    "eval_time": "150s",  # node5's is still pending: for 3m
                    "alertname": "AiopsIncidentOpen",
                    "exp_alerts": [fired(FLEET, "INC-fleet-0001", "thermal_throttle", "node3/gpu1")],
                },
                {
                    "eval_time": "5m",
                    "alertname": "AiopsIncidentOpen",
                    "exp_alerts": [
                        fired(FLEET, "INC-fleet-0001", "thermal_throttle", "node3/gpu1"),
                        fired(N5, "INC-node5-0001", "nic_link_flap", "node5/nic0"),
                    ],
                },
                {
                    "eval_time": "22m",
                    "alertname": "AiopsIncidentUndiagnosed",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "job": "aiops-node",
                                "instance": "n6:9484",
                                "incident_id": "INC-node6-0001",
                                "severity": "warning",  # an empty root_cause label is no label
                                "component": "node6/gpu0",
                            },
                            "exp_annotations": {
                                "summary": "INC-node6-0001 on n6:9484 has no diagnosed cause"
                            },
                        }
                    ],
                },
            ],
        }
    ],
}


def test_the_rules_page_what_the_tiers_say_pages(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rule_groups(render())))
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], **TESTS}))
    done = subprocess.run(
        [promtool, "test", "rules", "tests.yml"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_inhibition_rules_load_into_alertmanager(tmp_path: Path) -> None:
    amtool = require_binary("amtool")
    fragment = yaml.safe_load(
        one(render(), "ConfigMap", "aiops-alertmanager-inhibit")["data"]["inhibit_rules.yaml"]
    )
    config = {"route": {"receiver": "hook"}, "receivers": [{"name": "hook"}], **fragment}
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [amtool, "check-config", str(tmp_path / "alertmanager.yml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "4 inhibit rules" in done.stdout, done.stdout + done.stderr
    assert render({"monitoring": {"alertmanagerInhibitions": {"enabled": False}}}) != render()


def _post(url: str, body: Any) -> None:
    request = urllib.request.Request(
        url, json.dumps(body).encode(), {"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def _alerts(base_url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(base_url + "/api/v2/alerts", timeout=5) as response:
        found: list[dict[str, Any]] = json.load(response)
    return found


def test_one_killed_agent_pages_once_in_a_real_alertmanager(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    binary = alertmanager_binary()
    no_proxies(monkeypatch)
    fragment = yaml.safe_load(
        one(render(), "ConfigMap", "aiops-alertmanager-inhibit")["data"]["inhibit_rules.yaml"]
    )
    config = {"route": {"receiver": "hook", "group_wait": "1h"}, "receivers": [{"name": "hook"}], **fragment}
    (tmp_path / "alertmanager.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log_path = tmp_path / "alertmanager.log"
    with log_path.open("wb") as log:
        am = subprocess.Popen(
            [
                binary,
                f"--config.file={tmp_path / 'alertmanager.yml'}",
                f"--storage.path={tmp_path / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--cluster.listen-address=",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base_url = f"http://127.0.0.1:{port}"
        try:
            wait_ready(base_url, am, log_path)
            now_s = time.time()
            lost = condition_incident(
                "INC-fleet-0001",
                NODE_AGENT_LOST,
                "node3",
                since_ts_s=now_s - 60,
                opened_ts_s=now_s - 30,
                title="node agent lost on node3",
                severity="warning",
                detail={"reason": "up == 0", "instance": "10.0.0.3:9484", "up": 0.0, "gpu": 8},
            )
            event = incident_event("opened", lost, node="fleet", link="http://fleet.example/api/incidents/x")
            # the fleet's alertmanager sink's alert for the lost agent, as the product builds it
            _post(base_url + "/api/v2/alerts", alertmanager_alerts(event))
            # the chart's AiopsAgentDown for that agent and for another one (labels as tests/kubernetes/test_k8s_chart.py
            # sees promtool give them: agent_instance a copy of instance)
            down = [
                {
                    "labels": {
                        "alertname": "AiopsAgentDown",
                        "severity": "critical",
                        "job": "aiops-node",
                        "instance": instance,
                        "agent_instance": instance,
                    },
                    "annotations": {"summary": f"aiops-node on {instance} cannot be scraped"},
                }
                for instance in ("10.0.0.3:9484", "10.0.0.4:9484")
            ]
            _post(base_url + "/api/v2/alerts", down)
            deadline = time.monotonic() + 20
            states: dict[str, str] = {}
            while time.monotonic() < deadline:
                states = {
                    f"{a['labels']['alertname']}@{a['labels'].get('agent_instance', '')}": a["status"][
                        "state"
                    ]
                    for a in _alerts(base_url)
                }
                if len(states) == 3 and "unprocessed" not in states.values():
                    break
                time.sleep(0.2)
            assert states == {
                "AiopsIncident@10.0.0.3:9484": "active",  # the one page for the killed agent
                "AiopsAgentDown@10.0.0.3:9484": "suppressed",  # inhibited by it
                "AiopsAgentDown@10.0.0.4:9484": "active",  # another agent's: nobody stands for it
            }, states
        finally:
            am.terminate()
            try:
                am.wait(timeout=10)
            except subprocess.TimeoutExpired:
                am.kill()
                am.wait(timeout=10)


def test_a_lost_agents_incident_is_exported_with_its_target_as_agent_instance() -> None:
    """The chart's `AiopsIncidentOpen` carries the exported series' labels: for the fleet's `node_agent_lost`
    incident that includes `agent_instance`, so that rule's alert inhibits `AiopsAgentDown` as the sink's does."""
    from prometheus_client import CollectorRegistry, generate_latest

    from aiops.service.metrics import MetricsCache

    lost = condition_incident(
        "INC-fleet-0002",
        NODE_AGENT_LOST,
        "node3",
        since_ts_s=100.0,
        opened_ts_s=130.0,
        title="node agent lost on node3",
        severity="warning",
        detail={"reason": "up == 0", "instance": "10.0.0.3:9484", "up": 0.0},
    )
    rows = [
        {
            "incident_id": "INC-fleet-0001",
            "severity": "critical",
            "root_cause": "thermal_throttle",
            "component": "node1/gpu2",
            "symptoms": '[{"kind": "gpu_hot", "component": "node1/gpu2", "ts_s": 1.0}]',
        },
        {
            "incident_id": lost.incident_id,
            "severity": "warning",
            "root_cause": None,
            "component": "node3",
            "symptoms": json.dumps([s.model_dump() for s in lost.symptoms]),
        },
    ]
    cache = MetricsCache("fleet")
    cache.set_incidents(rows)
    registry = CollectorRegistry()
    registry.register(cache)
    exposed = [
        line
        for line in generate_latest(registry).decode().splitlines()
        if line.startswith("aiops_incident_open{")
    ]
    assert any(
        'incident_id="INC-fleet-0002"' in line and 'agent_instance="10.0.0.3:9484"' in line
        for line in exposed
    ), exposed
    assert any('incident_id="INC-fleet-0001"' in line and 'agent_instance=""' in line for line in exposed), (
        exposed
    )
