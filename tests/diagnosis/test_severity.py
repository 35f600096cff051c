"""Issue 35 item 2, severity from impact: eight GPUs of one node at 91 °C are critical (they were `warning`), a
job slowed by 31 % is critical and by 3 % no more than the fault itself, a GPU lost is critical and an
application XID is not (it is info: the program's fault, issue 35 item 5), one warm GPU that throttles nothing
while no job slows is info and a throttling one warning, a stalled job is critical, ambient drift alone is info; the thresholds and each sink's
names for the severities come from `[notify.severity]`; an open incident's severity never drops after a
restart."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiops.config import parse_config
from aiops.config_notify import SeverityConfig
from aiops.detect.incidents import IncidentTracker
from aiops.detect.severity import impact
from aiops.errors import ConfigError
from aiops.integrations.notifier import Notifier, incident_event
from aiops.models import Symptom
from aiops.store import Workspace
from tests.notify_helpers import incident

DEFAULT = SeverityConfig()


def s(kind: str, component: str, ts_s: float = 100.0, **detail: object) -> Symptom:
    return Symptom(kind=kind, component=component, ts_s=ts_s, detail=dict(detail))


HOT_NODE = [s("gpu_hot", f"node3/gpu{g}", temp_c=91.0) for g in range(8)]


def slowed(pct: float) -> Symptom:
    return s("step_regression", "job:llm", step_time_s=1.0 + pct / 100.0, baseline_s=1.0)


def test_severity_follows_the_impact() -> None:
    eight = impact(HOT_NODE, DEFAULT)
    assert eight.severity == "critical" and eight.gpus == 8 and "8 GPUs affected" in eight.summary
    one_hot = [HOT_NODE[0]]
    assert impact(one_hot, DEFAULT).severity == "info"  # warm, not throttling, no job slowed: no impact
    assert "no impact" in impact(one_hot, DEFAULT).summary
    assert impact([*one_hot, slowed(3)], DEFAULT).severity == "info"
    assert impact([*one_hot, s("gpu_throttle", "node3/gpu0")], DEFAULT).severity == "warning"
    assert impact([*one_hot, slowed(6)], DEFAULT).severity == "warning"
    big = impact([*one_hot, slowed(31)], DEFAULT)
    assert big.severity == "critical" and big.summary == "job:llm slowed 31 %; 1 GPU affected"
    assert impact([slowed(3)], DEFAULT).severity == "info"  # a slowdown alone, below the warning line
    assert impact([slowed(6)], DEFAULT).severity == "warning"
    assert impact([s("xid", "node3/gpu1", xid=79)], DEFAULT).severity == "critical"
    assert "hardware lost: node3/gpu1" in impact([s("gpu_lost", "node3/gpu1")], DEFAULT).summary
    assert impact([s("xid", "node3/gpu1", xid=13)], DEFAULT).severity == "info"  # the program's fault
    killed = impact([s("xid", f"node3/gpu{g}", xid=45) for g in range(8)], DEFAULT)  # a job killed: cleanup
    assert killed.severity == "info" and killed.gpus == 0 and "application" in killed.summary
    assert impact([s("job_stalled", "job:llm")], DEFAULT).severity == "critical"
    assert impact([s("fleet_inlet_drift", "fleet")], DEFAULT).severity == "info"
    # a NIC's drops alone slow nothing (the fleet saw one window of them beside another fault and paged it)
    assert impact([s("nic_drops", "node2/nic0")], DEFAULT).severity == "info"
    assert impact([s("nic_drops", "node2/nic0"), slowed(6)], DEFAULT).severity == "warning"
    assert impact([s("carrier_flap", "node2/nic0")], DEFAULT).severity == "warning"  # the link lost: a fault


def test_the_thresholds_are_configurable_and_checked() -> None:
    lenient = SeverityConfig(critical_gpus=16, job_stalled="warning", critical_slowdown_pct=50)
    assert impact(HOT_NODE, lenient).severity == "info"  # hot, none throttling, fewer than critical_gpus
    assert impact([s("job_stalled", "job:llm")], lenient).severity == "warning"
    assert impact([slowed(31)], lenient).severity == "warning"
    with pytest.raises(ConfigError) as caught:
        parse_config(
            {"notify": {"severity": {"warning_slowdown_pct": 30, "critical_slowdown_pct": 20}}}, "a.toml"
        )
    assert "a.toml" in str(caught.value) and "notify.severity" in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        parse_config({"notify": {"severity": {"pagerduty": {"critical": "sev1"}}}}, "a.toml")
    assert "notify.severity.pagerduty" in str(caught.value) and "critical" in str(caught.value)
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config({"notify": {"severity": {"critical_gpu": 4}}}, "a.toml")


def test_the_tracker_gives_incidents_their_impact_and_never_lowers_a_resumed_one() -> None:
    tracker = IncidentTracker()
    (opened,) = [t for t in tracker.feed(HOT_NODE, 110.0) if t.kind == "opened"]
    assert opened.incident.severity == "critical" and opened.incident.impact == "8 GPUs affected"
    resumed = IncidentTracker()
    resumed.resume(opened.incident.model_copy(update={"symptoms": opened.incident.symptoms[:1]}))
    assert resumed.open_incidents()[0].severity == "critical"  # one GPU's symptom left: still critical


def test_each_sink_kind_names_the_severity_as_configured(tmp_path: Path) -> None:
    key = tmp_path / "pd.key"
    key.write_text("R0ut1ngK3yR0ut1ngK3yR0ut1ngK3y12\n")
    config = parse_config(
        {
            "notify": {
                "webhooks": [
                    {"kind": "pagerduty", "routing_key_file": str(key)},
                    {"kind": "alertmanager", "url": "http://127.0.0.1:9/api/v2/alerts"},
                    {"kind": "json", "url": "http://127.0.0.1:9/hook"},
                ],
                "severity": {
                    "pagerduty": {"critical": "critical", "warning": "error", "info": "info"},
                    "alertmanager": {"critical": "page", "warning": "ticket", "info": "info"},
                },
            }
        },
        "t.toml",
    ).notify
    notifier = Notifier(config)
    warning = incident().model_copy(update={"severity": "warning", "impact": "job:llm slowed 7 %"})
    with Workspace(tmp_path / "ws.duckdb").write() as store:
        assert notifier.enqueue(store, incident_event("opened", warning, node="node3", link="")) == 3
        bodies = {
            r["sink_kind"]: json.loads(r["payload"]) for r in store.query("SELECT * FROM notifications")
        }
    assert bodies["pagerduty"]["payload"]["severity"] == "error"
    assert bodies["pagerduty"]["payload"]["custom_details"]["impact"] == "job:llm slowed 7 %"
    assert bodies["alertmanager"][0]["labels"]["severity"] == "ticket"
    assert bodies["json"]["incident"]["severity"] == "warning"  # the generic body keeps ours
