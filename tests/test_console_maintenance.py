"""Issue 35 item 3 in the console and the API: an approver adds a maintenance window on the demo's hot node from
the console, the incidents page says a window is active, the demo's proposal on that node can no longer be
approved (the guardrails' `maintenance` rule), the approver ends it; a viewer can see windows but not set
them; a window without a reason comes back as a note; every change is audited under the signed-in principal.
The service's `/api/maintenance` adds and ends one with its token, and refuses bad bodies with a 400 naming the
field."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from aiops.service.api import Api
from aiops.service.web import ServiceRoutes
from aiops.store import Workspace
from guardrails.audit import AuditLog
from tests.console_helpers import client, demo_proposal, fresh_demo, make_demo, sign_in


def window_ids(page: str) -> list[str]:
    return re.findall(r"<td>(M-[0-9a-f]{8})</td>", page)


def test_an_approver_sets_and_ends_a_window_and_a_viewer_only_sees_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = fresh_demo(make_demo(tmp_path / "src"), tmp_path, monkeypatch)
    c = client(db, execute=False)
    csrf = sign_in(c, "alice")
    refused = c.post(
        "/maintenance/add", data={"csrf_token": csrf, "scope": "node", "target": "node3", "hours": "2"}
    )
    assert refused.status_code == 200 and "refused: say why" in refused.text
    added = c.post(
        "/maintenance/add",
        data={"csrf_token": csrf, "scope": "node", "target": "node3", "hours": "2", "reason": "CHG-42 fan"},
    )
    assert "added maintenance M-" in added.text and "on node node3" in added.text
    (window_id,) = window_ids(added.text)
    banner = c.get("/").text
    assert 'id="maintenance-banner"' in banner and "maintenance on node node3" in banner

    proposal = demo_proposal(db)  # the demo plan's set_power_limit on node3/gpu5, whose GPU is hot
    approved = c.post(f"/proposals/{proposal}/approve", data={"csrf_token": csrf})
    with Workspace(db).read() as store:
        status = store.scalar("SELECT status FROM proposals WHERE proposal_id = ?", [proposal])
    assert (
        status != "approved" and f"node3/gpu5 is under maintenance {window_id} on node node3" in approved.text
    ), (
        status,
        approved.text[-800:],
    )

    viewer = client(db)
    viewer_csrf = sign_in(viewer, "victor")
    seen = viewer.get("/maintenance").text
    assert window_id in seen and "End now" not in seen and "Add a window" not in seen
    assert viewer.post(f"/maintenance/{window_id}/end", data={"csrf_token": viewer_csrf}).status_code == 403
    assert c.post(f"/maintenance/{window_id}/end", data={"csrf_token": "forged"}).status_code == 403

    ended = c.post(f"/maintenance/{window_id}/end", data={"csrf_token": csrf})
    assert f"ended maintenance {window_id}" in ended.text
    assert 'id="maintenance-banner"' not in c.get("/").text
    with Workspace(db).read() as store:
        records = [r for r in AuditLog(store).rows(event="maintenance")]
    assert [(r.actor, r.data()["action"]) for r in records] == [("alice", "added"), ("alice", "ended")]


def test_the_api_adds_and_ends_a_window_with_its_token(tmp_path: Path) -> None:
    from prometheus_client.registry import CollectorRegistry
    from starlette.applications import Starlette
    from starlette.testclient import TestClient

    workspace = Workspace(tmp_path / "ws.duckdb")
    with workspace.write() as store:
        store.conn.execute("SELECT 1")
    routes = ServiceRoutes(CollectorRegistry(), Api(workspace), lambda: (True, ""), lambda: (True, ""), "t0k")
    api = TestClient(Starlette(routes=routes.routes()))
    auth = {"Authorization": "Bearer t0k"}
    body = {"scope": "rack", "target": "rack1", "duration_s": 3600, "reason": "CDU swap", "by": "dcim"}
    assert api.post("/api/maintenance", json=body).status_code == 401
    created = api.post("/api/maintenance", json=body, headers=auth)
    assert created.status_code == 201, created.text
    window = created.json()
    assert (
        window["scope"] == "rack" and window["created_by"] == "api:dcim" and window["ends_ts_s"] > time.time()
    )
    bad = api.post("/api/maintenance", json={**body, "duration_s": -5}, headers=auth)
    assert bad.status_code == 400 and "duration_s" in bad.json()["error"]
    unknown = api.post("/api/maintenance", json={**body, "scope": "planet"}, headers=auth)
    assert unknown.status_code == 400 and "scope 'planet'" in unknown.json()["error"]
    listed = api.get("/api/maintenance", headers=auth).json()["windows"]
    assert [w["window_id"] for w in listed] == [window["window_id"]] and listed[0]["active"]
    end = f"/api/maintenance/{window['window_id']}/end"
    assert api.post(end, content=json.dumps({"by": "dcim"}), headers=auth).status_code == 200
    assert api.post(end, content=b"{}", headers=auth).status_code == 409  # over already
    assert api.post("/api/maintenance/M-00000000/end", content=b"{}", headers=auth).status_code == 404
    assert api.get("/api/maintenance", headers=auth).json()["windows"] == []
