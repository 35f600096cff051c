"""The console's fleet-safety pages on the demo workspace (its twin behind it): an approver's "Roll back" on an
executed power cap files the recorded rollback as a new proposal, which another approver's approval runs (the
twin's limit back to the default); the breaker page shows the drained node, the limits and what waits; the
components page ranks the GPU that failed, and a component name from telemetry reaches the page escaped."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest

from aiops.runtime.world import attach, desk
from aiops.sim.twin import Twin
from aiops.store import Store, Workspace
from guardrails.actions import Action
from tests.console_helpers import client, fresh_demo, make_demo, sign_in

HOSTILE = 'node7/gpu<img src=x onerror="alert(1)">'


@pytest.fixture(scope="module")
def demo_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("console-safety"))


@pytest.fixture
def demo(demo_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fresh_demo(demo_source, tmp_path, monkeypatch)


def file(db: Path, pid: str, kind: str, target: str, **parameters: object) -> None:
    with Workspace(db).write() as store:
        action = Action(
            proposal_id=pid,
            kind=kind,
            target=target,
            parameters=parameters,
            reason="console test",
            proposed_by="analyst",
            created_ts_s=time.time() - 1.0,
        )
        filed = desk(store, attach(store)).propose(action, origin="test", incident_id="INC-0001")
        assert filed.status == "pending", filed.message


def limit_w(db: Path, gpu: int) -> float:
    with Store(str(db), read_only=True) as store:
        twin = Twin.load(store)
        assert twin is not None
        nvml = twin.world.nvml(3)
        nvml.nvmlInit()
        return float(nvml.nvmlDeviceGetPowerManagementLimit(nvml.nvmlDeviceGetHandleByIndex(gpu))) / 1000


def test_roll_back_in_the_console_files_the_restore_and_an_approval_runs_it(demo: Path) -> None:
    file(demo, "P-cap", "set_power_limit", "node3/gpu5", power_limit_w=600)
    c = client(demo)
    csrf = sign_in(c, "alice")
    assert c.post("/proposals/P-cap/approve", data={"csrf_token": csrf}).status_code == 200
    assert limit_w(demo, 5) == 600.0
    page = c.get("/incidents/INC-0001").text
    assert 'action="/proposals/P-cap/rollback"' in page
    done = c.post("/proposals/P-cap/rollback", data={"csrf_token": csrf})
    assert "P-cap: rollback filed as P-cap-rb1: approve it to run it" in done.text
    section = done.text[done.text.index('id="proposal-P-cap-rb1"') :]
    assert "reset_power_limit on node3/gpu5" in section and "Approve as alice" in section

    viewer = client(demo)
    viewer_csrf = sign_in(viewer, "victor")
    assert viewer.post("/proposals/P-cap/rollback", data={"csrf_token": viewer_csrf}).status_code == 403
    assert c.post("/proposals/P-cap/rollback", data={}).status_code == 403  # no CSRF token

    bob = client(demo)
    bob_csrf = sign_in(bob, "bob")
    ran = bob.post("/proposals/P-cap-rb1/approve", data={"csrf_token": bob_csrf})
    assert "executed" in ran.text, ran.text[-2000:]
    assert limit_w(demo, 5) == 700.0


def test_the_breaker_and_components_pages(demo: Path) -> None:
    file(demo, "P-drain", "drain_node", "node2")
    with Workspace(demo).write() as store:  # a hostile component name from telemetry, with its incident
        store.conn.execute(
            "INSERT INTO incidents (incident_id, opened_ts_s, last_ts_s, title, severity, components, symptoms) "
            "SELECT 'INC-9999', opened_ts_s, last_ts_s, 'x', 'warning', ['x'], '[]' FROM incidents LIMIT 1"
        )
        store.conn.execute(
            "INSERT INTO hypotheses VALUES ('INC-9999', 1, 'gpu_ecc_error', ?, 0.9, 's', '[]')", [HOSTILE]
        )
    c = client(demo)
    csrf = sign_in(c, "alice")
    page = c.get("/breaker").text
    assert re.search(r"0 of 8 nodes out of service; limit 4", page), page
    c.post("/proposals/P-drain/approve", data={"csrf_token": csrf})
    page = c.get("/breaker").text
    assert "1 of 8 nodes out of service; limit 4" in page and "node2: drain_node P-drain" in page
    assert "<td>rack0</td><td>4</td><td>1</td><td>4</td>" in page

    ranking = c.get("/components").text
    assert 'href="/components/node3/gpu5"' in ranking or 'href="/components/node3%2Fgpu5"' in ranking
    assert "<img" not in ranking and "&lt;img src=x" in ranking
    one = c.get("/components/node3/gpu5").text
    assert "lemon score 1.0: 1 fault(s)" in one and "thermal_throttle on node3/gpu5 (INC-0001)" in one
