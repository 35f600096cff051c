"""`GET /api/incidents` stays small and quick when one incident holds thousands of components (a site-wide DCIM cap:
docs/BENCHMARKS.md, 40,960 GPUs at once), on a real loopback listener: the list answer is bounded in bytes, in
components (the true count beside them) and in incidents (open first, `cut` said); one incident's detail pages its
components; a shard's peer check still defers to the shard that paged the cap, `aiops fleet-view` still shows the
cap once; and while the service's flush keeps the workspace, the list answers from its last read instead of
waiting (aiops/service/incident_list.py, api.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from prometheus_client.registry import CollectorRegistry

from aiops.detect import save_incidents
from aiops.fleet.peer_pages import PeerPages
from aiops.fleet.view import ask_shard, merge, render_html
from aiops.models import Diagnosis, Evidence, Hypothesis, Incident, Symptom
from aiops.pipeline import save_hypotheses
from aiops.service.api import BUSY_WAIT_S, Api
from aiops.service.incident_list import COMPONENTS_LISTED, MAX_DETAIL_COMPONENTS, MAX_LIMIT
from aiops.service.owner import FileOwner, OwnedWorkspace
from aiops.service.paging import Decision, Subject
from aiops.service.server import WebServer
from aiops.service.web import ServiceRoutes, service_app
from aiops.store import Workspace
from tests.service_helpers import free_port

GPUS = 5_000
CAP_GPUS = [f"gpu-h100-{k // 8:04d}/gpu{k % 8}" for k in range(GPUS)]
HOT_GPU = "gpu-<script>x</script>/gpu3"  # telemetry labels are hostile: the view's page escapes them
LIST_BYTES = 16 * 1024  # the whole list answer, six incidents and the cap's among them


def _cap(shard: str, opened_ts_s: float = 1000.0) -> Diagnosis:
    hostile = '<script>alert(1)</script>"/../../api/dispatch'  # a label as telemetry may carry it
    symptoms = [
        Symptom(
            kind="power_limit_drop", component=c, ts_s=opened_ts_s, detail={"limit_w": 560.0, "job": hostile}
        )
        for c in CAP_GPUS
    ]
    incident = Incident(
        incident_id=f"INC-fleet-{shard}-0001",
        opened_ts_s=opened_ts_s,
        last_ts_s=opened_ts_s + 60,
        title=f"power cap {hostile}",
        severity="warning",
        components=["fleet", *CAP_GPUS],
        symptoms=symptoms,
    )
    evidence = [Evidence(claim="limits fell", sql="SELECT 1", rows=[{"gpu": c} for c in CAP_GPUS[:12]])]
    hypothesis = Hypothesis(
        root_cause="facility_power_cap",
        component="fleet",
        confidence=0.9,
        summary="DCIM cap",
        evidence=evidence,
    )
    return Diagnosis(incident=incident, hypotheses=[hypothesis])


def _small(incident_id: str, opened_ts_s: float, resolved: bool) -> Diagnosis:
    incident = Incident(
        incident_id=incident_id,
        opened_ts_s=opened_ts_s,
        last_ts_s=opened_ts_s + 30,
        title="hot GPU",
        severity="warning",
        components=[HOT_GPU],
        symptoms=[Symptom(kind="gpu_throttle", component=HOT_GPU, ts_s=opened_ts_s)],
        resolved_ts_s=opened_ts_s + 60 if resolved else None,
    )
    top = Hypothesis(root_cause="thermal_throttle", component=HOT_GPU, confidence=0.8, summary="hot")
    return Diagnosis(incident=incident, hypotheses=[top])


def _workspace(path: Path, shard: str, *, paged: bool) -> Workspace:
    """A shard's workspace: the cap (paged or not), its hot GPU's incident open, four resolved ones."""
    diagnoses = [
        _small(f"INC-fleet-{shard}-0090", 10.0, resolved=True),
        _small(f"INC-fleet-{shard}-0091", 20.0, resolved=True),
        _small(f"INC-fleet-{shard}-0092", 30.0, resolved=True),
        _cap(shard),
        _small(f"INC-fleet-{shard}-0002", 990.0, resolved=False),
        _small(f"INC-fleet-{shard}-0093", 2000.0, resolved=True),  # newer than the open ones, resolved
    ]
    workspace = Workspace(path)
    with workspace.write() as store:
        save_incidents(store, [d.incident for d in diagnoses])
        save_hypotheses(store, diagnoses)
        store.conn.execute(
            "INSERT INTO incident_pages (node, incident_id, first_seen_ts_s, pages, reason, decided_ts_s, paged_ts_s) "
            "VALUES ('fleet', ?, 1000, ?, ?, 1001, ?)",
            [f"INC-fleet-{shard}-0001", paged, "pages" if paged else "held", 1001.0 if paged else None],
        )
    workspace.close()
    return workspace


@contextmanager
def _served(workspace: Workspace) -> Iterator[str]:
    routes = ServiceRoutes(CollectorRegistry(), Api(workspace), lambda: (True, "ok"), lambda: (True, "ok"))
    server = WebServer(service_app(routes.routes()), f"127.0.0.1:{free_port()}")
    server.start()
    try:
        yield f"http://{server.address}"
    finally:
        server.close()


def test_the_list_is_bounded_in_bytes_and_components_and_says_the_true_count(tmp_path: Path) -> None:
    with _served(_workspace(tmp_path / "a.duckdb", "a", paged=True)) as url:
        reply = httpx.get(f"{url}/api/incidents", timeout=30)
    assert reply.status_code == 200 and len(reply.content) < LIST_BYTES, len(reply.content)
    answer = reply.json()
    assert (answer["total"], answer["cut"], answer["stale"]) == (6, False, False)
    cap = next(i for i in answer["incidents"] if i["incident_id"] == "INC-fleet-a-0001")
    assert cap["component_count"] == GPUS + 1 and cap["components_cut"] is True
    assert cap["components"] == ["fleet", *CAP_GPUS][:COMPONENTS_LISTED]  # the first ones, as stored
    assert cap["top_hypothesis"]["root_cause"] == "facility_power_cap" and cap["paging"]["pages"] is True
    assert "symptoms" not in cap and "hypotheses" not in cap  # those are the detail's
    hot = next(i for i in answer["incidents"] if i["incident_id"] == "INC-fleet-a-0002")
    assert (hot["components"], hot["component_count"], hot["components_cut"]) == ([HOT_GPU], 1, False)
    assert [i["opened_ts_s"] for i in answer["incidents"]] == sorted(
        i["opened_ts_s"] for i in answer["incidents"]
    )


def test_the_list_keeps_the_open_ones_first_says_when_it_was_cut_and_refuses_bad_limits(
    tmp_path: Path,
) -> None:
    with _served(_workspace(tmp_path / "a.duckdb", "a", paged=True)) as url:
        cut = httpx.get(f"{url}/api/incidents?limit=2", timeout=30).json()
        three = httpx.get(f"{url}/api/incidents?limit=3", timeout=30).json()
        opened = httpx.get(f"{url}/api/incidents?status=open", timeout=30).json()
        refused = [
            httpx.get(f"{url}/api/incidents?{q}", timeout=30).status_code
            for q in ("limit=0", f"limit={MAX_LIMIT + 1}", "limit=²", "limit=-1", "limit=1e3", "status=all")
        ]
    # the open ones first (a resolved one opened after them waits), then the newest resolved: oldest first
    assert [i["incident_id"] for i in cut["incidents"]] == ["INC-fleet-a-0002", "INC-fleet-a-0001"]
    assert [i["incident_id"] for i in three["incidents"]] == [
        "INC-fleet-a-0002",
        "INC-fleet-a-0001",
        "INC-fleet-a-0093",
    ]
    assert (cut["total"], cut["limit"], cut["cut"]) == (6, 2, True)
    assert {i["incident_id"] for i in opened["incidents"]} == {"INC-fleet-a-0001", "INC-fleet-a-0002"}
    assert (opened["total"], opened["cut"]) == (2, False)
    assert refused == [400] * 6


def test_the_detail_pages_a_huge_incidents_components_with_their_symptoms(tmp_path: Path) -> None:
    with _served(_workspace(tmp_path / "a.duckdb", "a", paged=True)) as url:
        first = httpx.get(f"{url}/api/incidents/INC-fleet-a-0001", timeout=30).json()
        last = httpx.get(
            f"{url}/api/incidents/INC-fleet-a-0001?components_offset=4990&components_limit=50", timeout=30
        ).json()
        small = httpx.get(f"{url}/api/incidents/INC-fleet-a-0002", timeout=30).json()
        refused = httpx.get(
            f"{url}/api/incidents/INC-fleet-a-0001?components_limit={MAX_DETAIL_COMPONENTS + 1}", timeout=30
        )
        missing = httpx.get(f"{url}/api/incidents/INC-none", timeout=30)
    assert (first["component_count"], len(first["components"]), first["components_cut"]) == (
        GPUS + 1,
        1000,
        True,
    )
    assert first["symptom_count"] == GPUS and {s["component"] for s in first["symptoms"]} <= set(
        first["components"]
    )
    assert first["hypotheses"][0]["evidence"][0]["claim"] == "limits fell"
    assert len(last["components"]) == GPUS + 1 - 4990 and last["components_offset"] == 4990
    assert {s["component"] for s in last["symptoms"]} == set(last["components"]) - {"fleet"}
    assert (small["components"], small["components_cut"], len(small["symptoms"])) == ([HOT_GPU], False, 1)
    assert refused.status_code == 400 and missing.status_code == 404


def test_a_peer_check_still_defers_to_the_shard_that_paged_the_cap(tmp_path: Path) -> None:
    with _served(_workspace(tmp_path / "a.duckdb", "a", paged=True)) as url:
        peers = PeerPages("b", {"a": url, "b": "http://127.0.0.1:9"}, None, interval_s=15.0)
        peers.ask_all()
    assert peers.errors == {}
    cap = Subject("fleet", "INC-fleet-b-0001", (), "facility_power_cap", "fleet", "warning", 0.0)
    workspace = Workspace(tmp_path / "b.duckdb")
    with workspace.write() as store:
        decided = peers.apply(store, [cap], {cap.key: Decision(True, "pages")}, time.time())
    assert decided[cap.key] == Decision(False, "elsewhere", covered_by="INC-fleet-a-0001")


def test_fleet_view_still_shows_the_cap_once_and_escapes_its_labels(tmp_path: Path) -> None:
    with (
        _served(_workspace(tmp_path / "a.duckdb", "a", paged=True)) as url_a,
        _served(_workspace(tmp_path / "b.duckdb", "b", paged=False)) as url_b,
    ):
        answers = [ask_shard("a", url_a, None, 30.0), ask_shard("b", url_b, None, 30.0)]
    view = merge(answers)
    caps = [
        i for i in view["incidents"] if (i["top_hypothesis"] or {}).get("root_cause") == "facility_power_cap"
    ]
    assert len(caps) == 1 and [s["shard"] for s in caps[0]["seen_by"]] == ["a", "b"]
    assert caps[0]["component_count"] == GPUS + 1 and len(caps[0]["components"]) == COMPONENTS_LISTED
    assert len(json.dumps(view)) < 2 * LIST_BYTES
    page = render_html(view)
    assert "<script>" not in page and "gpu-&lt;script&gt;x&lt;/script&gt;/gpu3" in page
    assert page.count(f"<td>{GPUS + 1}</td>") == 1  # the cap once, with its component count


def test_the_list_answers_from_its_last_read_while_the_flush_keeps_the_workspace(tmp_path: Path) -> None:
    _workspace(tmp_path / "a.duckdb", "a", paged=True)
    owner = FileOwner(str(tmp_path / "a.duckdb"))
    api = Api(OwnedWorkspace(owner))
    before = api.incidents(50)
    flushing, done = threading.Event(), threading.Event()

    def flush() -> None:  # the service's flush: the owner's store held for longer than any peer waits
        with owner.store():
            flushing.set()
            done.wait(30)

    thread = threading.Thread(target=flush)
    thread.start()
    try:
        flushing.wait(10)
        started = time.monotonic()
        during = api.incidents(50)
        waited_s = time.monotonic() - started
    finally:
        done.set()
        thread.join()
    assert waited_s < BUSY_WAIT_S + 1.0, waited_s
    assert during["stale"] is True and during["incidents"] == before["incidents"]
    assert api.incidents(50)["stale"] is False  # the flush done: read again
    with owner.store():
        pass
    owner.close()


def test_node_agents_incidents_join_the_cap_by_its_whole_component_list_and_stay_bounded(
    tmp_path: Path,
) -> None:
    workspace = _workspace(tmp_path / "a.duckdb", "a", paged=True)
    on_cap = CAP_GPUS[::8]  # one node incident a host, most of them far past the cap's listed components
    with workspace.write() as store:
        store.conn.executemany(
            "INSERT INTO node_incidents VALUES (?, 'INC-0001', ?, 'facility_power_cap', 'warning', 1000, 0.9, 1001)",
            [[gpu.split("/")[0], gpu] for gpu in [*on_cap, "gpu-elsewhere-0001/gpu0"]],
        )
    workspace.close()
    with _served(workspace) as url:
        reply = httpx.get(f"{url}/api/incidents", timeout=30)
    answer = reply.json()
    cap = next(i for i in answer["incidents"] if i["incident_id"] == "INC-fleet-a-0001")
    assert cap["node_incident_count"] == len(on_cap) and len(cap["node_incidents"]) == COMPONENTS_LISTED
    assert [n["component"] for n in answer["node_incidents"]] == ["gpu-elsewhere-0001/gpu0"]
    assert answer["node_incidents_total"] == 1 and len(reply.content) < 2 * LIST_BYTES, len(reply.content)
