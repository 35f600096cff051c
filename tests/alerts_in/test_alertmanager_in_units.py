"""Alertmanager in, piece by piece: the v4 body's validation (hostile labels, sizes, versions), labels to
components, the route's token and limits (on a real loopback socket), and the investigation over a simulated
store (diagnosis, link to the live incident, de-duplication by fingerprint, resolution)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from http.client import HTTPConnection
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.registry import CollectorRegistry

from aiops.cli.run import alert_token_of
from aiops.config import load_config_file, parse_config
from aiops.errors import AlertInboxFull, AlertPayloadError, ConfigError
from aiops.integrations.event import IncidentEvent
from aiops.pipeline import analyze_store
from aiops.runtime.analysis import simulate_into
from aiops.scenarios import load_scenario
from aiops.service.alert_investigate import AlertInvestigator, alert_id_of, focus
from aiops.service.alerts_in import (
    MAX_BODY_BYTES,
    AlertInbox,
    WebhookAlert,
    component_of,
    parse_webhook,
)
from aiops.service.api import AlertRoute, Api
from aiops.service.server import WebServer
from aiops.service.web import ServiceRoutes, service_app
from aiops.store import Store, Workspace
from tests.notify_helpers import hypothesis
from tests.service_helpers import free_port

TOKEN = "s3cret-token-for-tests"
HOSTILE = '\x1b[2J<!channel> "\u202e'


def alert(
    status: str = "firing", fingerprint: str = "2e9c85895f984351", starts_ts_s: float = 1.7e9, **labels: str
) -> dict[str, Any]:
    return {
        "status": status,
        "labels": {"alertname": "GpuHot", **labels},
        "annotations": {"summary": HOSTILE},
        "startsAt": datetime.fromtimestamp(starts_ts_s, UTC).isoformat(),
        "endsAt": "0001-01-01T00:00:00Z" if status == "firing" else datetime.now(UTC).isoformat(),
        "generatorURL": "http://prometheus/graph",
        "fingerprint": fingerprint,
    }


def payload(*alerts: dict[str, Any], **top: Any) -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": "{}:{}",
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "aiops",
        "groupLabels": {},
        "commonLabels": {},
        "commonAnnotations": {},
        "externalURL": "http://am",
        "alerts": list(alerts),
        **top,
    }


# -- the body ---------------------------------------------------------------------------------------------------
def test_a_v4_body_validates_and_its_times_are_read() -> None:
    parsed = parse_webhook(json.dumps(payload(alert(Hostname="node1", gpu="2"))).encode())
    only = parsed.alerts[0]
    assert only.status == "firing" and only.labels["gpu"] == "2" and only.starts_ts_s == 1.7e9
    assert only.ends_ts_s is None  # Alertmanager's zero time: no end


@pytest.mark.parametrize(
    ("body", "where"),
    [
        (payload(alert(), version="3"), "version"),
        (payload(alert(), status="pending"), "status"),
        (payload(alert(status="pending")), "alerts.0.status"),
        (payload(alert(fingerprint="../../etc")), "alerts.0.fingerprint"),
        (payload({**alert(), "labels": {HOSTILE: "x"}}), "alerts.0.labels"),
        (payload({**alert(), "labels": {"name\n": "x"}}), "alerts.0.labels"),
        (payload(alert(fingerprint="ab\n")), "alerts.0.fingerprint"),
        (payload({**alert(), "labels": {"a": "x" * 5000}}), "alerts.0.labels"),
        (payload({**alert(), "startsAt": "2024-01-01T00:00:00"}), "alerts.0.startsAt"),
        (payload({k: v for k, v in alert().items() if k != "fingerprint"}), "alerts.0.fingerprint"),
        (payload(*[alert()] * 1001), "alerts"),
        ([1, 2], "body"),
    ],
)
def test_a_bad_body_is_refused_with_a_short_ascii_reason_naming_the_field(body: Any, where: str) -> None:
    with pytest.raises(AlertPayloadError) as caught:
        parse_webhook(json.dumps(body).encode())
    reason = caught.value.reason
    assert reason.startswith(where), reason
    assert reason.isascii() and reason.isprintable() and len(reason) <= 200
    assert "\x1b" not in reason and "channel" not in reason and "etc" not in reason


def test_not_json_and_an_oversized_body_are_refused() -> None:
    with pytest.raises(AlertPayloadError, match="body"):
        parse_webhook(b"\xff{not json")
    with pytest.raises(AlertPayloadError, match="larger than"):
        parse_webhook(b" " * (MAX_BODY_BYTES + 1))


# -- labels -> component ------------------------------------------------------------------------------------
def test_labels_name_the_component() -> None:
    hosts = {"gpu-a-17": "node17"}
    assert component_of({"Hostname": "node1", "gpu": "2"}, {}) == "node1/gpu2"
    assert component_of({"instance": "gpu-a-17:9400", "gpu": "5"}, hosts) == "node17/gpu5"
    assert component_of({"instance": "gpu-a-17:9100"}, hosts) == "node17"
    assert component_of({"component": "node3/nic1", "Hostname": "node1"}, {}) == "node3/nic1"
    assert component_of({"component": HOSTILE, "Hostname": "node1"}, {}) == "node1"  # not a contract name
    # an unlisted host is named after itself (issue 25), a valid host name only
    assert component_of({"Hostname": "unknown-host", "gpu": "1"}, hosts) == "unknown-host/gpu1"
    assert component_of({"Hostname": "node1", "gpu": "-1"}, {}) == "node1"
    assert component_of({"component": "node3\n", "Hostname": "node1", "gpu": "2\n"}, {}) == "node1"
    assert component_of({"Hostname": "node1\n"}, {}) is None
    known = {"node1", "node1/gpu0"}
    assert component_of({"Hostname": "node1", "gpu": "7"}, {}, known) == "node1"  # no such GPU
    assert component_of({"Hostname": "node9"}, {}, known) is None


def test_the_inbox_is_bounded() -> None:
    inbox = AlertInbox(limit=2)
    one = WebhookAlert.model_validate(alert())
    inbox.put([one, one], 1.0)
    with pytest.raises(AlertInboxFull):
        inbox.put([one], 2.0)
    assert len(inbox.drain()) == 2 and inbox.drain() == [] and inbox.accepted == 2


def test_the_analysts_hypotheses_about_the_alerts_component_come_first() -> None:
    ranked = [
        hypothesis(component="node0/gpu1"),
        hypothesis(component="node1/gpu2"),
        hypothesis(component="node1"),
    ]
    assert [h.component for h in focus(ranked, "node1/gpu2")] == ["node1/gpu2", "node1", "node0/gpu1"]
    assert focus(ranked, None) == ranked


# -- the route ------------------------------------------------------------------------------------------------
def served(tmp_path: Path, alerts: AlertRoute | None) -> WebServer:
    routes = ServiceRoutes(
        CollectorRegistry(),
        Api(Workspace(tmp_path / "ws.duckdb")),
        lambda: (True, "ok"),
        lambda: (True, "ok"),
        alerts=alerts,
    )
    return WebServer(service_app(routes.routes()), f"127.0.0.1:{free_port()}")


@pytest.fixture
def endpoint(tmp_path: Path) -> Iterator[tuple[WebServer, AlertInbox]]:
    inbox = AlertInbox(limit=3)
    http = served(tmp_path, AlertRoute(TOKEN, inbox))
    http.start()
    try:
        yield http, inbox
    finally:
        http.close()


def post(
    http: WebServer, body: bytes, headers: dict[str, str], path: str = "/api/alertmanager"
) -> tuple[int, Any]:
    conn = http_conn(http)
    conn.request("POST", path, body=body, headers=headers)
    reply = conn.getresponse()
    data = reply.read()
    conn.close()
    return reply.status, json.loads(data)


def http_conn(http: WebServer) -> HTTPConnection:
    return HTTPConnection(http.host, http.port, timeout=10)


def test_the_route_needs_the_token_and_a_valid_body(endpoint: tuple[WebServer, AlertInbox]) -> None:
    http, inbox = endpoint
    body = json.dumps(payload(alert(Hostname="node1", gpu="2"))).encode()
    bearer = {"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"}
    assert post(http, body, {})[0] == 401
    assert post(http, body, {"Authorization": f"Bearer {TOKEN}x"})[0] == 401
    assert post(http, body, {"Authorization": TOKEN})[0] == 401
    assert inbox.drain() == []
    status, answer = post(http, b'{"version": "4"}', bearer)
    assert status == 400 and answer["error"].startswith("status"), answer
    status, answer = post(http, body, bearer)
    assert (status, answer) == (200, {"accepted": 1})
    assert [r.alert.labels["gpu"] for r in inbox.drain()] == ["2"]
    four = json.dumps(payload(*[alert()] * 4)).encode()
    assert post(http, four, bearer)[0] == 503  # more than the inbox holds: Alertmanager retries
    assert post(http, body, bearer, path="/api/other")[0] == 404


def test_an_oversized_or_unsized_body_is_refused_unread(endpoint: tuple[WebServer, AlertInbox]) -> None:
    http, _ = endpoint
    conn = http_conn(http)
    conn.putrequest("POST", "/api/alertmanager")
    conn.putheader("Authorization", f"Bearer {TOKEN}")
    conn.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
    conn.endheaders()
    reply = conn.getresponse()
    assert reply.status == 413 and b"larger than" in reply.read()
    conn.close()
    conn = http_conn(http)
    conn.putrequest("POST", "/api/alertmanager")
    conn.putheader("Authorization", f"Bearer {TOKEN}")
    conn.endheaders()
    assert conn.getresponse().status == 411
    conn.close()


def test_the_route_is_off_without_a_token(tmp_path: Path) -> None:
    http = served(tmp_path, None)
    http.start()
    try:
        body = json.dumps(payload(alert())).encode()
        assert post(http, body, {"Authorization": "Bearer "})[0] == 404
    finally:
        http.close()


# -- the token file -----------------------------------------------------------------------------------------
def test_the_token_file_must_exist_and_hold_a_token(tmp_path: Path) -> None:
    assert alert_token_of(parse_config({}, "c.toml")) == ""
    missing = parse_config({"alertmanager_in": {"token_file": str(tmp_path / "nope")}}, "c.toml")
    with pytest.raises(ConfigError, match=r"alertmanager_in\.token_file"):
        alert_token_of(missing)
    (tmp_path / "empty").write_text("\n")
    with pytest.raises(ConfigError, match="no token"):
        alert_token_of(parse_config({"alertmanager_in": {"token_file": str(tmp_path / "empty")}}, "c.toml"))
    (tmp_path / "t").write_text(TOKEN + "\n")
    assert (
        alert_token_of(parse_config({"alertmanager_in": {"token_file": str(tmp_path / "t")}}, "c.toml"))
        == TOKEN
    )
    (tmp_path / "bad.toml").write_text('[alertmanager_in]\ntoken = "x"\n')
    with pytest.raises(ConfigError) as caught:
        load_config_file(tmp_path / "bad.toml")
    assert "token_file" in str(caught.value.allowed)


# -- the investigation ------------------------------------------------------------------------------------------
SCENARIO = """\
name: alert-units
seed: 5
duration_s: 400
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 4, nics_per_node: 1}
jobs:
  - {name: llm, nodes: all, step_compute_s: 1.0, allreduce_mb: 64}
faults:
  - {kind: thermal_throttle, target: node1/gpu2, start_s: 90, severity: 0.9}
"""


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    where = tmp_path_factory.mktemp("alerts")
    (where / "s.yaml").write_text(SCENARIO)
    with Store(where / "ws.duckdb") as store:
        simulate_into(store, load_scenario(str(where / "s.yaml")))
        analyze_store(store)  # the incidents live detection would have
    return where / "ws.duckdb"


def test_a_firing_alert_is_investigated_once_and_a_resolved_one_closes_it(simulated: Path) -> None:
    sent: list[IncidentEvent] = []
    inbox = AlertInbox()
    # no time budget here (a loaded machine must not shed the repeat): the budget has its own test below
    investigator = AlertInvestigator(inbox, lambda store, event: sent.append(event), "node0", budget_s=600.0)
    with Store(simulated) as store:
        start_ts_s = float(store.scalar("SELECT min(ts_s) FROM gpu_samples"))
        end_ts_s = float(store.scalar("SELECT max(ts_s) FROM gpu_samples"))
        firing = WebhookAlert.model_validate(alert(starts_ts_s=start_ts_s + 150, Hostname="node1", gpu="2"))
        inbox.put([firing, firing], start_ts_s + 160)
        done = investigator.run(store, end_ts_s, lambda wall_ts_s: wall_ts_s)
        assert done == [f"investigated {alert_id_of(firing)}", f"repeat {alert_id_of(firing)}"]
        assert [e.kind for e in sent] == ["diagnosed"]
        top = sent[0].top
        assert top is not None and (top.root_cause, top.component) == ("thermal_throttle", "node1/gpu2")
        assert top.evidence and sent[0].title.startswith("Alertmanager GpuHot: ")
        assert sent[0].incident_id == alert_id_of(firing) and sent[0].components == ("node1/gpu2",)
        row = store.query("SELECT * FROM alert_investigations")[0]
        assert row["incident_id"] == store.scalar("SELECT min(incident_id) FROM incidents")  # linked
        assert json.loads(row["labels"])["gpu"] == "2" and row["status"] == "firing"
        resolved = WebhookAlert.model_validate(
            alert("resolved", starts_ts_s=start_ts_s + 150, Hostname="node1")
        )
        other = WebhookAlert.model_validate(alert("resolved", fingerprint="ab", starts_ts_s=start_ts_s))
        inbox.put([resolved, resolved, other], start_ts_s + 300)
        done = investigator.run(store, end_ts_s, lambda wall_ts_s: wall_ts_s)
        assert [d.split()[0] for d in done] == ["resolved", "repeat", "unknown"]
        assert [e.kind for e in sent] == ["diagnosed", "resolved"]
        assert store.scalar("SELECT status FROM alert_investigations") == "resolved"
        assert (
            store.scalar("SELECT count(*) FROM incidents WHERE incident_id LIKE 'am-%'") == 0
        )  # no duplicate


def test_investigations_per_run_are_capped_and_what_waits_past_the_queue_is_shed(simulated: Path) -> None:
    """Each run empties the inbox (the route never answers 503 for a slow loop), investigates at most
    `max_per_run`, and sheds the oldest firing alerts past `max_waiting`, counted (issue 23, M4)."""
    sent: list[IncidentEvent] = []
    inbox = AlertInbox(limit=3)
    investigator = AlertInvestigator(
        inbox, lambda store, event: sent.append(event), "node0", max_per_run=1, max_waiting=3
    )
    with Store(simulated) as store:
        start_ts_s = float(store.scalar("SELECT min(ts_s) FROM gpu_samples"))
        end_ts_s = float(store.scalar("SELECT max(ts_s) FROM gpu_samples"))
        alerts = [
            WebhookAlert.model_validate(
                alert(fingerprint=f"{n:x}0", starts_ts_s=start_ts_s + 150 + n, Hostname="node1")
            )
            for n in range(3)
        ]
        inbox.put(alerts, end_ts_s)
        assert len(investigator.run(store, end_ts_s, lambda wall_ts_s: wall_ts_s)) == 1
        assert len(investigator.waiting) == 2 and investigator.shed == 0
        inbox.put(alerts, end_ts_s)  # Alertmanager's repeat: 2 wait in the investigator, 3 in the inbox
        done = investigator.run(store, end_ts_s, lambda wall_ts_s: wall_ts_s)
        assert investigator.shed == 2  # 5 firing past a queue of 3: the two oldest are shed
        assert [d.split()[0] for d in done] == ["repeat", "investigated"] and len(investigator.waiting) == 1
        inbox.put(alerts[:2], end_ts_s)  # the inbox was emptied: it takes more
        while investigator.run(store, end_ts_s, lambda wall_ts_s: wall_ts_s):
            pass
    assert len(sent) == 3 and investigator.investigated == 3  # the repeats changed nothing
    assert {e.components for e in sent} == {("node1",)}
