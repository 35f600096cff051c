"""Issue 35 item 2, the chart's side of one page per problem, run by `promtool test rules` on the rendered
PrometheusRule (the live run with real agents, fleet, Prometheus and Alertmanager is tests/test_pages_live.py):
the fleet's incident pages at once; a node agent's incident the fleet covers (the fleet exports
`aiops_incident_pages == 0` for it) never fires; one the fleet does not cover fires after `nodeIncidentFor`, not
before; an incident held, covered or under maintenance on its own tier does not fire; an undiagnosed incident
nobody covers fires AiopsIncidentUndiagnosed. The inhibition rules the chart ships load into the real
Alertmanager's `amtool check-config`."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.k8s_helpers import one, render, rule_groups
from tests.service_helpers import require_binary

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
    assert done.returncode == 0 and "3 inhibit rules" in done.stdout, done.stdout + done.stderr
    assert render({"monitoring": {"alertmanagerInhibitions": {"enabled": False}}}) != render()
