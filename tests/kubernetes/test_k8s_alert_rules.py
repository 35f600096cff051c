"""Every alert rule the chart ships (deploy/helm/aiops, its PrometheusRule rendered by Helm's own engine) fires on
the series that should fire it, and only then: Prometheus's own rule engine (`promtool test rules`, the real
binary beside the tests' Prometheus) evaluates the rendered rules on series written here, one group per alert.
Each group holds the failing target and healthy ones of the same families; each alert is checked not firing
before its `for` has passed, firing (with its exact labels and annotations) after, and never for the healthy
series. The families the rules read must be ones the agents export (named in the exporter's code and in
docs/METRICS.md): a renamed exporter metric leaves a rule that can never fire. One promtool run (about a second).
The live test (tests/kubernetes/test_k8s_alerts.py) sees AiopsIncidentOpen fire on a real agent's scrape."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.k8s_helpers import render, rule_groups
from tests.service_helpers import require_binary

ROOT = Path(__file__).resolve().parents[2]
NODE, FLEET = "aiops-node", "aiops-fleet"  # values.yaml's monitoring.nodeJob and fleetJob
A, B, C = "node-a:9400", "node-b:9400", "node-c:9400"  # A is the target in trouble; B and C are healthy


def series(name: str, values: str, **labels: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return {"series": f"{name}{{{inner}}}", "values": values}


@dataclass
class Case:
    """One alert: its input series, when it must be quiet, and when it fires with which labels and summary."""

    alert: str
    input_series: list[dict[str, str]]
    quiet_at: list[str]  # eval times (promtool durations) where no alert of this name may fire
    fires_at: str
    fired: list[tuple[dict[str, str], str]]  # (labels, summary) of each alert firing at fires_at
    descriptions: dict[str, str] = field(default_factory=dict)  # incident_id or instance -> description


def incident(job: str, instance: str, incident_id: str, root_cause: str) -> dict[str, str]:
    """An `aiops_incident_open` series' labels as Prometheus holds them (an empty label is no label)."""
    labels = {
        "job": job,
        "instance": instance,
        "incident_id": incident_id,
        "severity": "critical",
        "root_cause": root_cause,
        "component": "node1/gpu2" if root_cause else "",
        "agent_instance": "",
    }
    return {k: v for k, v in labels.items() if v}


def pages(
    job: str, instance: str, incident_id: str, value: int, reason: str, covered_by: str = ""
) -> dict[str, str]:
    labels = {"job": job, "instance": instance, "node": "node1", "incident_id": incident_id, "reason": reason}
    labels |= {"covered_by": covered_by, "window_id": ""}
    return series("aiops_incident_pages", f"{value}x40", **labels)


F_PAGES = incident(FLEET, "fleet:9400", "INC-F1", "thermal_throttle")
F_HELD = incident(FLEET, "fleet:9400", "INC-F2", "thermal_throttle")
N_ALONE = incident(NODE, A, "INC-N1", "ecc_errors")
N_COVERED = incident(NODE, B, "INC-N2", "thermal_throttle")
U_ALONE = incident(NODE, A, "INC-U1", "")
U_COVERED = incident(NODE, B, "INC-U2", "")


def open_series(labels: dict[str, str], values: str = "1x40") -> dict[str, str]:
    return series("aiops_incident_open", values, **labels)


CASES: list[Case] = [
    # a fleet incident pages at once; one held (pages 0) does not
    Case(
        "AiopsIncidentOpen",
        [
            open_series(F_PAGES),
            open_series(F_HELD),
            pages(FLEET, "fleet:9400", "INC-F1", 1, "pages"),
            pages(FLEET, "fleet:9400", "INC-F2", 0, "held"),
        ],
        [],
        "0m",
        [(F_PAGES | {"tier": "fleet"}, "thermal_throttle on node1/gpu2 (INC-F1)")],
    ),
    # a node agent's incident waits nodeIncidentFor (3m) for the fleet to cover it; one the fleet covers never pages
    Case(
        "AiopsIncidentOpen",
        [
            open_series(N_ALONE),
            open_series(N_COVERED),
            pages(FLEET, "fleet:9400", "INC-N2", 0, "covered", "INC-F1"),
        ],
        ["2m"],
        "4m",
        [(N_ALONE | {"tier": "node"}, "ecc_errors on node1/gpu2 (INC-N1)")],
    ),
    # an incident with no hypothesis for undiagnosedFor (15m); one covered by another never does
    Case(
        "AiopsIncidentUndiagnosed",
        [
            open_series(U_ALONE),
            open_series(U_COVERED),
            pages(FLEET, "fleet:9400", "INC-U2", 0, "covered", "INC-F1"),
        ],
        ["14m"],
        "16m",
        [(U_ALONE | {"severity": "warning"}, f"INC-U1 on {A} has no diagnosed cause")],
    ),
    Case(
        "AiopsBreakerHolding",
        [
            series("aiops_breaker_waiting_proposals", "2x40", job=FLEET, instance="fleet:9400"),
            series("aiops_breaker_waiting_proposals", "0x40", job=NODE, instance=B),
        ],
        ["0m"],
        "2m",
        [
            (
                {"job": FLEET, "instance": "fleet:9400", "severity": "warning"},
                "2 remediation step(s) wait on the circuit breaker on fleet:9400",
            )
        ],
    ),
    # a collector failing every minute; another that failed once long ago (its counter flat)
    Case(
        "AiopsCollectorErrors",
        [
            series("aiops_collector_errors_total", "0+1x40", job=NODE, instance=A, collector="nvml"),
            series("aiops_collector_errors_total", "3x40", job=NODE, instance=B, collector="nvml"),
        ],
        ["9m"],
        "12m",
        [
            (
                {"job": NODE, "instance": A, "collector": "nvml", "severity": "warning"},
                f"collector nvml on {A} keeps failing",
            )
        ],
    ),
    # A stores nothing from minute 10; B keeps storing; C started at minute 20 and has stored nothing yet (a
    # window that just started says nothing: it is not judged before its counter is 5 min old)
    Case(
        "AiopsSamplesStale",
        [
            series("aiops_ingested_rows_total", "0+100x10 1000x30", job=NODE, instance=A),
            series("aiops_ingested_rows_total", "0+100x40", job=NODE, instance=B),
            series("aiops_ingested_rows_total", "_x20 0x20", job=NODE, instance=C),
        ],
        ["18m"],
        "28m",
        [({"job": NODE, "instance": A, "severity": "critical"}, f"{A} stored no sample for 5m")],
    ),
    # A's samples arrive 10 min late; B's 30 s; C was late for two minutes only
    Case(
        "AiopsIngestLag",
        [
            series("aiops_ingest_lag_seconds", "600x40", job=NODE, instance=A),
            series("aiops_ingest_lag_seconds", "30x40", job=NODE, instance=B),
            series("aiops_ingest_lag_seconds", "30 600 600 30x37", job=NODE, instance=C),
        ],
        ["4m"],
        "6m",
        [({"job": NODE, "instance": A, "severity": "warning"}, f"samples reach {A}'s store 10m 0s late")],
    ),
    Case(
        "AiopsAgentDown",
        [series("up", "0x40", job=NODE, instance=A), series("up", "1x40", job=NODE, instance=B)],
        ["4m"],
        "6m",
        [
            (
                {"job": NODE, "instance": A, "agent_instance": A, "severity": "critical"},
                f"{NODE} on {A} cannot be scraped",
            )
        ],
    ),
    # only the fleet is scraped: no node agent at all
    Case(
        "AiopsAgentsAbsent",
        [series("up", "1x40", job=FLEET, instance="fleet:9400")],
        ["4m"],
        "6m",
        [({"job": NODE, "severity": "critical"}, "Prometheus scrapes no aiops node agent")],
    ),
    # ... and with one node agent scraped (even one that is down), it stays quiet
    Case(
        "AiopsAgentsAbsent",
        [series("up", "0x40", job=NODE, instance=A), series("up", "1x40", job=FLEET, instance="fleet:9400")],
        ["4m", "30m"],
        "",
        [],
    ),
    Case(
        "AiopsScrapeEmpty",
        [
            series("scrape_samples_scraped", "0x40", job=NODE, instance=A),
            series("scrape_samples_scraped", "900x40", job=NODE, instance=B),
        ],
        ["4m"],
        "6m",
        [({"job": NODE, "instance": A, "severity": "warning"}, f"{A} answers /metrics with no sample")],
    ),
    Case(
        "AiopsLoopErrors",
        [
            series("aiops_loop_errors_total", "0+1x40", job=NODE, instance=A),
            series("aiops_loop_errors_total", "7x40", job=NODE, instance=B),
        ],
        ["9m"],
        "12m",
        [({"job": NODE, "instance": A, "severity": "warning"}, f"a flush step on {A} keeps failing")],
    ),
    # A shed alerts at minute 3; the alert holds for the 15 min window, then clears
    Case(
        "AiopsAlertQueueShedding",
        [
            series("aiops_alerts_shed_total", "0 0 0 5x37", job=NODE, instance=A),
            series("aiops_alerts_shed_total", "2x40", job=NODE, instance=B),
        ],
        ["2m", "19m"],
        "4m",
        [
            (
                {"job": NODE, "instance": A, "severity": "warning"},
                f"{A} dropped firing alerts uninvestigated in the last 15 min",
            )
        ],
    ),
    # A's receiver takes nothing; B's takes everything
    Case(
        "AiopsNotificationBacklog",
        [
            series("aiops_notifications_queued_total", "0+10x40", job=FLEET, instance="fleet:9400"),
            series("aiops_notifications_delivered_total", "0x40", job=FLEET, instance="fleet:9400"),
            series("aiops_notifications_queued_total", "0+10x40", job=NODE, instance=B),
            series("aiops_notifications_delivered_total", "0+10x40", job=NODE, instance=B),
        ],
        ["16m"],
        "20m",
        [
            (
                {"job": FLEET, "instance": "fleet:9400", "severity": "warning"},
                "200 notifications of fleet:9400 wait for their receiver",
            )
        ],
    ),
]


def _rules() -> list[dict[str, Any]]:
    return [r for g in rule_groups(render())["groups"] for r in g["rules"]]


def _fill(template: str, labels: dict[str, str]) -> str:
    """A description template whose only actions are `{{ $labels.NAME }}`, filled as Prometheus would."""
    filled = re.sub(r"\{\{ \$labels\.(\w+) \}\}", lambda m: labels.get(m[1], ""), template)
    assert "{{" not in filled, f"write this description out in the case: {template}"
    return filled


def _annotations(alert: str, labels: dict[str, str], summary: str) -> dict[str, str]:
    rule = next(
        r
        for r in _rules()
        if r["alert"] == alert and r.get("labels", {}).get("tier") in (None, labels.get("tier"))
    )
    out = {"summary": summary}
    if "description" in rule["annotations"]:
        out["description"] = _fill(rule["annotations"]["description"], labels)
    return out


def _unit_tests(rules_file: str) -> dict[str, Any]:
    tests = []
    for case in CASES:
        checks: list[dict[str, Any]] = [
            {"eval_time": t, "alertname": case.alert, "exp_alerts": []} for t in case.quiet_at
        ]
        if case.fires_at:
            fired = [
                {"exp_labels": labels, "exp_annotations": _annotations(case.alert, labels, summary)}
                for labels, summary in case.fired
            ]
            checks.append({"eval_time": case.fires_at, "alertname": case.alert, "exp_alerts": fired})
        tests.append({"interval": "1m", "input_series": case.input_series, "alert_rule_test": checks})
    return {"rule_files": [rules_file], "evaluation_interval": "1m", "tests": tests}


def test_every_alert_the_chart_ships_has_a_case_that_fires_it() -> None:
    shipped = [(r["alert"], r.get("labels", {}).get("tier")) for r in _rules()]
    fired = {(c.alert, labels.get("tier")) for c in CASES for labels, _ in c.fired}
    assert set(shipped) == fired, set(shipped) ^ fired
    assert len(shipped) == 13  # AiopsIncidentOpen twice (the fleet's, the node's) and 11 others


def test_every_alert_fires_on_its_series_and_not_on_healthy_ones(tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_groups(render())))
    (tmp_path / "tests.yaml").write_text(yaml.safe_dump(_unit_tests("rules.yaml"), sort_keys=False))
    result = subprocess.run(
        [promtool, "test", "rules", "tests.yaml"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_the_rules_read_only_families_the_agents_export() -> None:
    """A family renamed in the exporter and not in the rules leaves an alert that can never fire."""
    source = "\n".join(p.read_text() for p in (ROOT / "aiops").rglob("*.py"))
    documented = set(re.findall(r"`(aiops_\w+)`", (ROOT / "docs" / "METRICS.md").read_text()))
    read = {name for r in _rules() for name in re.findall(r"\b(aiops_\w+)\b", r["expr"])}
    assert len(read) >= 9, read
    for name in sorted(read):
        bare = name.removeprefix("aiops_")  # prometheus_client names a counter without its `_total`
        named = {f'"{bare}"', f'"{bare.removesuffix("_total")}"'}
        assert any(n in source for n in named), f"{name}: no exporter in aiops/ names it"
        assert name in documented, f"{name}: not in docs/METRICS.md"
