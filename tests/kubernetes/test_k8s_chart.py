"""The Helm chart (deploy/helm/aiops) renders, with Helm's own engine, objects that the Kubernetes API and the
prometheus-operator would accept, configs `aiops run` and `aiops fleet` accept, and rules Prometheus accepts.

- Kubernetes objects: `kubernetes-validate --strict` (the real CLI, the API's OpenAPI schemas, unknown fields
  refused) for 1.31 and the newest version it knows.
- PodMonitor, ServiceMonitor, PrometheusRule: the operator's CRD schemas (tests/k8s_helpers.py says where from),
  strict; kubernetes-validate has no schema for them (it warns and passes), so it cannot.
- The rules: `promtool check rules` on the PrometheusRule's groups; their firing is tests/kubernetes/test_k8s_alerts.py.
Nothing here applies the chart to a cluster (docs/KUBERNETES.md, "What was validated").
"""

from __future__ import annotations

import subprocess
import tomllib
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from aiops.config import parse_config, parse_listen
from tests.k8s_helpers import (
    CHART,
    CRD_KINDS,
    K8S_VERSIONS,
    NAMESPACE,
    assert_valid_strict,
    crd_errors,
    helm,
    kubernetes_validate,
    one,
    render,
    rule_groups,
)
from tests.service_helpers import require_binary
from tests.test_deploy import K8S as DOCS_MANIFESTS

ROOT = Path(__file__).resolve().parents[2]
OVERRIDES: dict[
    str, Any
] = {  # every optional branch on (the integrations: tests/kubernetes/test_k8s_integrations.py)
    "namespace": {"create": True},
    "image": {"digest": "sha256:" + "ab" * 32},
    "imagePullSecrets": ["regcred"],
    "http": {"existingSecret": "mine"},
    "node": {
        "hosts": {"gpu-a.dc1": {"name": "node7", "rack": "rack1"}, "gpu-b.dc1": {"rack": "b07"}},
        "rackLabel": "topology.kubernetes.io/zone",
        "rowLabel": "example.com/row",
        "priorityClassName": "system-node-critical",
        "maxUnavailable": "10%",
        "extraConfig": "[report]\nenabled = true",
    },
    "fleet": {
        "prometheusTokenSecret": "prom-token",
        "nodeUrl": "https://{host}.dc1.example:9484",
        "priorityClassName": "aiops-fleet",
        "podDisruptionBudget": {"maxUnavailable": 0},
        "storage": {"storageClassName": "fast"},
        "extraConfig": "[notify]\ntimeout_s = 5.0",
    },
    "ingress": {
        "enabled": True,
        "className": "nginx",
        "host": "aiops.example.com",
        "annotations": {"cert-manager.io/cluster-issuer": "letsencrypt"},
        "tls": {"secretName": "aiops-tls"},
    },
    "networkPolicy": {
        "from": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
    },
    "monitoring": {"labels": {"release": "kps"}},
}


@pytest.fixture(scope="module", params=["defaults", "overrides"])
def objects(request: pytest.FixtureRequest) -> list[dict[str, Any]]:
    return render(OVERRIDES if request.param == "overrides" else None)


def test_helm_lints_the_chart() -> None:
    report = helm().lint(str(CHART), namespace=NAMESPACE)  # as `helm lint` (its namespace: default)
    assert report["errors"] == [], report
    assert not [m for m in report["messages"] if m["severity"] > 1], report  # 1: info (no icon)


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_kubernetes_objects_pass_kubernetes_validate_strict(
    objects: list[dict[str, Any]], version: str, tmp_path: Path
) -> None:
    assert_valid_strict(objects, version, tmp_path)


def test_kubernetes_validate_refuses_an_unknown_field(tmp_path: Path) -> None:
    """The check above can fail: a typo in the DaemonSet's pod spec is refused."""
    daemonset = one(render(), "DaemonSet")
    daemonset["spec"]["template"]["spec"]["hostNetwrok"] = True
    manifest = tmp_path / "bad.yaml"
    manifest.write_text(yaml.safe_dump(daemonset))
    done = kubernetes_validate(manifest, K8S_VERSIONS[0])
    assert done.returncode != 0 and "hostNetwrok" in done.stdout + done.stderr


def test_operator_objects_fit_the_operators_crd_schemas(objects: list[dict[str, Any]]) -> None:
    found = {o["kind"] for o in objects if o["apiVersion"] == "monitoring.coreos.com/v1"}
    assert found == CRD_KINDS
    errors = [e for o in objects if o["kind"] in CRD_KINDS for e in crd_errors(o)]
    assert errors == []


@pytest.mark.parametrize(
    ("kind", "path", "value"),
    [
        ("PodMonitor", ("spec", "podMetricsEndpoints", 0, "intervl"), "15s"),  # unknown field
        ("ServiceMonitor", ("spec", "endpoints", 0, "interval"), "soon"),  # not a duration
        ("PrometheusRule", ("spec", "groups", 0, "rules", 0, "for"), "1 minute"),
    ],
)
def test_the_crd_check_can_fail(kind: str, path: tuple[Any, ...], value: str) -> None:
    obj = one(render(), kind)
    node = obj
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    assert crd_errors(obj), f"{kind} with {path} = {value!r} passed"


def test_promtool_checks_the_rules(objects: list[dict[str, Any]], tmp_path: Path) -> None:
    promtool = require_binary("promtool")
    rules = tmp_path / "rules.yml"
    rules.write_text(yaml.safe_dump(rule_groups(objects)))
    done = subprocess.run(
        [promtool, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    alerts = [r["alert"] for g in rule_groups(objects)["groups"] for r in g["rules"]]
    assert f"SUCCESS: {len(alerts)} rules found" in done.stdout, done.stdout


def test_every_alert_says_what_and_how_bad() -> None:
    for group in rule_groups(render())["groups"]:
        for rule in group["rules"]:
            assert rule["annotations"]["summary"], rule["alert"]
            severity = rule.get("labels", {}).get("severity")
            # AiopsIncident* carry the incident's own severity label (aiops_incident_open{severity=...})
            assert severity in ("warning", "critical") or "aiops_incident_open" in rule["expr"], rule["alert"]


def configmap_config(objects: list[dict[str, Any]], name: str) -> Any:
    data = one(objects, "ConfigMap", name)["data"]["config.toml"]
    return parse_config(tomllib.loads(data), f"ConfigMap {name}")


def container(objects: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return dict(one(objects, kind)["spec"]["template"]["spec"]["containers"][0])


def test_the_node_agents_match_the_documented_daemonset(objects: list[dict[str, Any]]) -> None:
    """The chart's DaemonSet is deploy/daemonset.yaml with names and values templated: same command,
    mounts, capabilities, probes and pod settings (tests/test_deploy.py checks those against the config)."""
    chart_ds, docs_ds = one(objects, "DaemonSet"), DOCS_MANIFESTS["DaemonSet"]
    chart_pod, docs_pod = chart_ds["spec"]["template"]["spec"], docs_ds["spec"]["template"]["spec"]
    for key in (
        "hostNetwork",
        "dnsPolicy",
        "runtimeClassName",
        "nodeSelector",
        "tolerations",
        "automountServiceAccountToken",
    ):
        assert chart_pod[key] == docs_pod[key], key
    chart_c, docs_c = chart_pod["containers"][0], docs_pod["containers"][0]
    for key in (
        "command",
        "args",
        "env",
        "securityContext",
        "volumeMounts",
        "startupProbe",
        "livenessProbe",
        "resources",
    ):
        assert chart_c[key] == docs_c[key], key
    strip = {"config", "http-token"}  # named after the release in the chart
    assert [v for v in chart_pod["volumes"] if v["name"] not in strip] == [
        v for v in docs_pod["volumes"] if v["name"] not in strip
    ]
    chart_update, docs_update = chart_ds["spec"]["updateStrategy"], docs_ds["spec"]["updateStrategy"]
    assert chart_update["type"] == docs_update["type"] and chart_update["rollingUpdate"]["maxSurge"] == 0
    assert chart_update["rollingUpdate"]["maxUnavailable"] in (
        docs_update["rollingUpdate"]["maxUnavailable"],
        OVERRIDES["node"]["maxUnavailable"],
    )


def test_the_rendered_configs_are_valid_and_agree(objects: list[dict[str, Any]]) -> None:
    node, fleet = configmap_config(objects, "aiops-node"), configmap_config(objects, "aiops-fleet")
    agent, analyst = container(objects, "DaemonSet"), container(objects, "Deployment")
    assert agent["command"][:2] == ["aiops", "run"] and analyst["command"][:2] == ["aiops", "fleet"]
    port = agent["ports"][0]["containerPort"]
    assert parse_listen(node.http.listen)[1] == parse_listen(fleet.http.listen)[1] == port
    assert analyst["ports"][0]["containerPort"] == port
    # The fleet reaches a node agent by the node's name ([fleet] node_url), a renamed host by its Kubernetes
    # node name, with the agents' own token: one Secret the operator made, mounted in both pods.
    assert urlsplit(fleet.fleet.node_url.replace("{host}", "h")).port == port
    renamed = {h: v.name for h, v in node.node.hosts.items() if v.name != h.split(".")[0]}
    assert fleet.fleet.nodes == {name: f"http://{h}:{port}" for h, name in renamed.items()}
    assert fleet.fleet.node_token_file == fleet.http.token_file == node.http.token_file
    assert not [o for o in objects if o["kind"] == "Secret"], "the chart makes no token (nor any Secret)"
    names = set()
    for c, kind in ((agent, "DaemonSet"), (analyst, "Deployment")):
        mount = next(
            m for m in c["volumeMounts"] if m["mountPath"] == str(PurePosixPath(node.http.token_file).parent)
        )
        volume = next(
            v for v in one(objects, kind)["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"]
        )
        assert volume["secret"]["optional"] is False and mount["readOnly"] is True, kind
        names.add(volume["secret"]["secretName"])
    assert len(names) == 1 and names <= {"aiops-http-token", "mine"}
    store = next(
        m for m in analyst["volumeMounts"] if m["mountPath"] == str(PurePosixPath(fleet.store.path).parent)
    )
    assert store["name"] == "store" and "pdf" in fleet.report.formats


def test_scrape_objects_select_the_pods_and_set_the_jobs_the_rules_use(objects: list[dict[str, Any]]) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["monitoring"]
    pod_monitor, service_monitor = one(objects, "PodMonitor"), one(objects, "ServiceMonitor")
    ds_labels = one(objects, "DaemonSet")["spec"]["template"]["metadata"]["labels"]
    assert pod_monitor["spec"]["selector"]["matchLabels"].items() <= ds_labels.items()
    svc = one(objects, "Service")
    assert service_monitor["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    fleet_labels = one(objects, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= fleet_labels.items()
    jobs = {
        e["relabelings"][0]["replacement"]
        for e in pod_monitor["spec"]["podMetricsEndpoints"] + service_monitor["spec"]["endpoints"]
    }
    assert jobs == {values["nodeJob"], values["fleetJob"]}
    exprs = " ".join(r["expr"] for g in rule_groups(objects)["groups"] for r in g["rules"])
    assert all(job in exprs for job in jobs)
    for endpoint in pod_monitor["spec"]["podMetricsEndpoints"] + service_monitor["spec"]["endpoints"]:
        assert (
            endpoint["honorLabels"] is True and endpoint["port"] == "http"
        )  # docs/FLEET.md: node/gpu labels


NODE = 'job="aiops-node"'
UNIT_TESTS: dict[
    str, Any
] = {  # promtool's rule unit tests: synthetic series, one per alert of the agent itself
    "evaluation_interval": "1m",
    "tests": [
        {
            "interval": "1m",
            "input_series": [
                {"series": f'up{{{NODE},instance="n0:9484"}}', "values": "0x20"},
                {"series": f'up{{{NODE},instance="n1:9484"}}', "values": "1x20"},
                {
                    "series": f'aiops_ingested_rows_total{{{NODE},instance="n1:9484",table="gpu"}}',
                    "values": "7x20",
                },
                {
                    "series": f'aiops_collector_errors_total{{{NODE},instance="n1:9484",collector="nvml"}}',
                    "values": "0+1x20",
                },
                {"series": f'aiops_alerts_shed_total{{{NODE},instance="n1:9484"}}', "values": "0 0 0 4 4 4"},
                {"series": f'aiops_loop_errors_total{{{NODE},instance="n1:9484"}}', "values": "0+1x20"},
                {"series": f'scrape_samples_scraped{{{NODE},instance="n2:9484"}}', "values": "0x20"},
                {
                    "series": f'aiops_notifications_queued_total{{{NODE},instance="n1:9484"}}',
                    "values": "0+10x30",
                },
                {
                    "series": f'aiops_notifications_delivered_total{{{NODE},instance="n1:9484"}}',
                    "values": "0x30",
                },
            ],
            "alert_rule_test": [
                {"eval_time": "3m", "alertname": "AiopsAgentDown", "exp_alerts": []},  # not yet: for 5m
                {
                    "eval_time": "10m",
                    "alertname": "AiopsAgentDown",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "severity": "critical",
                                "job": "aiops-node",
                                "instance": "n0:9484",
                                "agent_instance": "n0:9484",  # what the fleet's node_agent_lost inhibits it on
                            },
                            "exp_annotations": {"summary": "aiops-node on n0:9484 cannot be scraped"},
                        }
                    ],
                },
                {"eval_time": "10m", "alertname": "AiopsAgentsAbsent", "exp_alerts": []},
                {
                    "eval_time": "10m",
                    "alertname": "AiopsScrapeEmpty",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "warning", "job": "aiops-node", "instance": "n2:9484"},
                            "exp_annotations": {"summary": "n2:9484 answers /metrics with no sample"},
                        }
                    ],
                },
                {
                    "eval_time": "15m",
                    "alertname": "AiopsLoopErrors",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "warning", "job": "aiops-node", "instance": "n1:9484"},
                            "exp_annotations": {"summary": "a flush step on n1:9484 keeps failing"},
                        }
                    ],
                },
                {
                    "eval_time": "12m",
                    "alertname": "AiopsSamplesStale",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "severity": "critical",
                                "job": "aiops-node",
                                "instance": "n1:9484",
                            },
                            "exp_annotations": {"summary": "n1:9484 stored no sample for 5m"},
                        }
                    ],
                },
                {
                    "eval_time": "15m",
                    "alertname": "AiopsCollectorErrors",
                    "exp_alerts": [
                        {
                            "exp_labels": {
                                "severity": "warning",
                                "job": "aiops-node",
                                "instance": "n1:9484",
                                "collector": "nvml",
                            },
                            "exp_annotations": {
                                "summary": "collector nvml on n1:9484 keeps failing",
                                "description": "Which error (an exception class, or unavailable) in "
                                "Prometheus: sum by (collector, error) (increase(aiops_collector_error_rows_total"
                                "{instance=\"n1:9484\"}[1h])). Each error's text is on that agent's console page "
                                "/collectors ([console] enabled in node.extraConfig).",
                            },
                        }
                    ],
                },
                {
                    "eval_time": "5m",
                    "alertname": "AiopsAlertQueueShedding",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "warning", "job": "aiops-node", "instance": "n1:9484"},
                            "exp_annotations": {
                                "summary": "n1:9484 dropped firing alerts uninvestigated in the last 15 min"
                            },
                        }
                    ],
                },
                {
                    "eval_time": "20m",
                    "alertname": "AiopsNotificationBacklog",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "warning", "job": "aiops-node", "instance": "n1:9484"},
                            "exp_annotations": {
                                "summary": "200 notifications of n1:9484 wait for their receiver"
                            },
                        }
                    ],
                },
            ],
        },
        {  # no node agent scraped at all
            "interval": "1m",
            "input_series": [{"series": 'up{job="aiops-fleet",instance="f:9484"}', "values": "1x10"}],
            "alert_rule_test": [
                {
                    "eval_time": "6m",
                    "alertname": "AiopsAgentsAbsent",
                    "exp_alerts": [
                        {
                            "exp_labels": {"severity": "critical", "job": "aiops-node"},
                            "exp_annotations": {"summary": "Prometheus scrapes no aiops node agent"},
                        }
                    ],
                }
            ],
        },
    ],
}


def test_promtool_unit_tests_fire_the_agent_alerts(tmp_path: Path) -> None:
    """The alerts on the agent itself, each fired by `promtool test rules` on synthetic series (the incident
    alert fires on a real Prometheus in tests/kubernetes/test_k8s_alerts.py)."""
    promtool = require_binary("promtool")
    (tmp_path / "rules.yml").write_text(yaml.safe_dump(rule_groups(render())))
    (tmp_path / "tests.yml").write_text(yaml.safe_dump({"rule_files": ["rules.yml"], **UNIT_TESTS}))
    done = subprocess.run(
        [promtool, "test", "rules", "tests.yml"], capture_output=True, text=True, timeout=60, cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tested = {t["alertname"] for group in UNIT_TESTS["tests"] for t in group["alert_rule_test"]}
    agent = {
        r["alert"] for g in rule_groups(render())["groups"] for r in g["rules"] if g["name"] == "aiops-agent"
    }
    assert agent - tested == set(), "an agent alert without a unit test"
