"""`GET /api/proposals` bounded as the incident list is, and both lists answered while the service's flush holds
the workspace, on a real loopback listener (aiops/service/proposal_list.py, kept_answers.py, api.py): after a
site power cap a shard's plan step files thousands of proposals and its flush holds the workspace for minutes
(docs/BENCHMARKS.md, round eleven: `aiops fleet-view` got no answer from any shard). The list holds at most
`limit` proposals, the open ones first, with `total` and `cut`; a bad `limit` or `status` is a 400 naming it;
while the flush holds the workspace a question is answered from its last read, or cut from a broader kept read,
or refused with a 503 that says since when, never held until the flush ends; a running service's flush reads the
default lists again so that a question nobody asked before has something to be answered from
(tests/fleet/test_fleet_view_busy.py: `aiops fleet-view` against such shards)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.registry import CollectorRegistry

from aiops.detect import save_incidents
from aiops.models import Diagnosis, Hypothesis, Incident, Symptom
from aiops.pipeline import save_hypotheses
from aiops.service.api import WARM_EVERY_S, Api
from aiops.service.kept_answers import BUSY_WAIT_S, RETRY_AFTER_S, Question
from aiops.service.owner import FileOwner, OwnedWorkspace
from aiops.service.proposal_list import MAX_LIMIT, STATUSES
from aiops.service.server import WebServer
from aiops.service.web import ServiceRoutes, service_app
from aiops.store import Workspace
from guardrails.actions import Action, action_hash, canonical_json
from guardrails.records import GuardrailRecords
from tests.service_helpers import TINY_SCENARIO, free_port
from tests.service_inprocess import HeldClock, service_in_process

PLAN_GPUS = 3_000  # one plan step's targets on a shard after a site power cap: pending, one a GPU
EXECUTED, DENIED = 10, 5
EVERY = PLAN_GPUS + 1 + EXECUTED + DENIED  # and one approved, waiting to run
LIST_BYTES = (
    128 * 1024
)  # the default answer (200 proposals); it was every proposal (628 KB a shard at 40,960)
BOUND_S = BUSY_WAIT_S + 1.5  # a question asked while the flush holds the workspace is answered within this
OLD_FIELDS = {
    "proposal_id",
    "kind",
    "target",
    "parameters",
    "status",
    "physical",
    "approvals_needed",
    "origin",
    "incident_id",
    "step_id",
    "expires_ts_s",
    "message",
}


def _action(proposal_id: str, target: str, created_ts_s: float) -> Action:
    return Action(
        proposal_id=proposal_id,
        kind="set_power_limit",
        target=target,
        parameters={"limit_w": 560.0, "why": "site cap"},
        reason="the site's DCIM cap",
        proposed_by="analyst",
        created_ts_s=created_ts_s,
    )


def _row(action: Action, status: str, shard: str) -> list[Any]:
    incident = f"INC-fleet-{shard}-0001"
    return [
        action.proposal_id,
        action.created_ts_s,
        action.kind,
        action.target,
        action.proposed_by,
        canonical_json(action.model_dump(mode="json")),
        action_hash(action),
        True,
        1,
        status,
        "ok",
        action.created_ts_s,
        action.created_ts_s + 3600,
        "dcim",
        incident,
        "PLAN-1.1",
    ]


def _incident(
    shard: str, number: int, cause: str, component: str, opened: float, resolved: bool
) -> Diagnosis:
    incident = Incident(
        incident_id=f"INC-fleet-{shard}-{number:04d}",
        opened_ts_s=opened,
        last_ts_s=opened + 30,
        title=cause,
        severity="warning",
        components=[component],
        symptoms=[Symptom(kind="power_limit_drop", component=component, ts_s=opened)],
        resolved_ts_s=opened + 60 if resolved else None,
    )
    top = Hypothesis(root_cause=cause, component=component, confidence=0.9, summary=cause)
    return Diagnosis(incident=incident, hypotheses=[top])


def _workspace(path: Path, shard: str, *, cap_opened_ts_s: float = 1000.0) -> Path:
    """A shard after a site power cap: its cap incident open (and five resolved ones), one plan step's
    `PLAN_GPUS` proposals pending, one approved, `EXECUTED` older ones run and `DENIED` newer ones refused."""
    diagnoses = [
        _incident(shard, 1, "facility_power_cap", "fleet", cap_opened_ts_s, resolved=False),
        *(
            _incident(shard, 90 + k, "thermal_throttle", f"gpu-{k:04d}/gpu1", 10.0 * k, True)
            for k in range(5)
        ),
    ]
    plan = [
        _row(
            _action(f"P-{shard}-{k:05d}", f"gpu-{k // 8:04d}/gpu{k % 8}", 1000.0 + k / 1000), "pending", shard
        )
        for k in range(PLAN_GPUS)
    ]
    executed = [
        _row(_action(f"P-{shard}-x{k}", "gpu-0000/gpu0", 100.0 + k), "executed", shard) for k in range(10)
    ]
    denied = [
        _row(_action(f"P-{shard}-d{k}", "gpu-0001/gpu0", 5000.0 + k), "denied", shard) for k in range(5)
    ]
    workspace = Workspace(path)
    with workspace.write() as store:
        save_incidents(store, [d.incident for d in diagnoses])
        save_hypotheses(store, diagnoses)
        rows = [*plan, *executed, *denied]
        store.conn.execute(  # one statement: 3,000 rows one by one take seconds of the suite
            "INSERT INTO proposals (proposal_id, created_ts_s, kind, target, proposed_by, action, action_hash, "
            "physical, approvals_needed, status, message, updated_ts_s, expires_ts_s, origin, incident_id, step_id) "
            "SELECT " + ", ".join(["unnest(?)"] * len(rows[0])),
            [list(column) for column in zip(*rows, strict=True)],
        )
        GuardrailRecords(store).save_proposal(  # one through the records' own path: approved, not yet run
            _action(f"P-{shard}-a0", "gpu-0002/gpu0", 150.0),
            status="approved",
            message="ok",
            physical=True,
            approvals_needed=1,
            origin="cli",
        )
    workspace.close()
    return path


@contextmanager
def _served(api: Api) -> Iterator[str]:
    routes = ServiceRoutes(CollectorRegistry(), api, lambda: (True, "ok"), lambda: (True, "ok"))
    server = WebServer(service_app(routes.routes()), f"127.0.0.1:{free_port()}")
    server.start()
    try:
        yield f"http://{server.address}"
    finally:
        server.close()


@contextmanager
def _flushing(owner: FileOwner) -> Iterator[float]:
    """The service's flush: the owner's store held by another thread for the block (longer than any list
    waits); gives when the hold began."""
    holding, done = threading.Event(), threading.Event()

    def flush() -> None:
        with owner.store():
            holding.set()
            done.wait(60)

    thread = threading.Thread(target=flush)
    started = time.time()
    thread.start()
    try:
        assert holding.wait(10)
        yield started
    finally:
        done.set()
        thread.join()


@contextmanager
def _owned(path: Path) -> Iterator[tuple[FileOwner, Api]]:
    owner = FileOwner(str(path))
    try:
        yield owner, Api(OwnedWorkspace(owner))
    finally:
        owner.close()


def _get(url: str) -> tuple[httpx.Response, float]:
    started = time.monotonic()
    reply = httpx.get(url, timeout=30)
    return reply, time.monotonic() - started


def test_the_list_is_bounded_keeps_the_open_ones_first_and_says_the_true_count(tmp_path: Path) -> None:
    path = _workspace(tmp_path / "a.duckdb", "a")
    workspace = Workspace(path)
    with _served(Api(workspace)) as url:
        reply = httpx.get(f"{url}/api/proposals", timeout=30)
        most = httpx.get(f"{url}/api/proposals?limit={MAX_LIMIT}", timeout=30).json()
        executed = httpx.get(f"{url}/api/proposals?status=executed", timeout=30).json()
        denied = httpx.get(f"{url}/api/proposals?status=denied&limit=2", timeout=30).json()
        approved = httpx.get(f"{url}/api/proposals?status=approved", timeout=30).json()
    assert reply.status_code == 200 and len(reply.content) < LIST_BYTES, len(reply.content)
    answer = reply.json()
    assert (answer["total"], answer["limit"], answer["cut"], answer["stale"]) == (EVERY, 200, True, False)
    listed = answer["proposals"]
    # the open ones first, newest first: the plan step's newest 200 (the approved one, older, is past them)
    assert [p["proposal_id"] for p in listed] == [f"P-a-{k:05d}" for k in range(PLAN_GPUS - 200, PLAN_GPUS)]
    assert {p["status"] for p in listed} == {"pending"}  # shown oldest first, as before
    assert (len(most["proposals"]), most["total"], most["cut"]) == (MAX_LIMIT, EVERY, True)
    assert (len(executed["proposals"]), executed["total"], executed["cut"]) == (EXECUTED, EXECUTED, False)
    assert [p["proposal_id"] for p in denied["proposals"]] == ["P-a-d3", "P-a-d4"]  # the newest of five
    assert (denied["total"], denied["cut"]) == (DENIED, True)
    # each proposal's fields as the list always gave them (what the console, fleet-view and tests read)
    shown = approved["proposals"][0]
    with workspace.read() as store:
        record = GuardrailRecords(store).proposal("P-a-a0")
    assert record is not None and set(shown) == OLD_FIELDS | {"created_ts_s"}
    assert shown == {
        "proposal_id": record.proposal_id,
        "created_ts_s": 150.0,
        "kind": record.action.kind,
        "target": record.action.target,
        "parameters": record.action.parameters,
        "status": record.status,
        "physical": record.physical,
        "approvals_needed": record.approvals_needed,
        "origin": record.origin,
        "incident_id": record.incident_id,
        "step_id": record.step_id,
        "expires_ts_s": record.expires_ts_s,
        "message": record.message,
    }


def test_bad_limits_and_statuses_are_refused_naming_the_parameter(tmp_path: Path) -> None:
    path = _workspace(tmp_path / "a.duckdb", "a")
    with _served(Api(Workspace(path))) as url:
        limits = [
            httpx.get(f"{url}/api/proposals?{q}", timeout=30)
            for q in ("limit=0", f"limit={MAX_LIMIT + 1}", "limit=²", "limit=-1", "limit=1e3", "limit=abc")
        ]
        statuses = [
            httpx.get(f"{url}/api/proposals?status={s}", timeout=30)
            for s in ("open", "PENDING", "all", "x" * 99)
        ]
    assert [r.status_code for r in limits] == [400] * 6
    assert all(r.json()["error"] == f"limit: a whole number from 1 to {MAX_LIMIT}" for r in limits)
    assert [r.status_code for r in statuses] == [400] * 4
    said = statuses[0].json()["error"]
    assert said.startswith("status: one of ") and all(s in said for s in STATUSES)


def test_both_lists_answer_from_their_last_read_while_the_flush_holds_the_workspace(tmp_path: Path) -> None:
    path = _workspace(tmp_path / "a.duckdb", "a")
    with _owned(path) as (owner, api), _served(api) as url:
        proposals = httpx.get(f"{url}/api/proposals?limit=50", timeout=30).json()
        incidents = httpx.get(f"{url}/api/incidents?limit=3", timeout=30).json()
        with _flushing(owner):
            (during_p, waited_p), (during_i, waited_i) = (
                _get(f"{url}/api/proposals?limit=50"),
                _get(f"{url}/api/incidents?limit=3"),
            )
        after = httpx.get(f"{url}/api/proposals?limit=50", timeout=30).json()
    assert waited_p < BOUND_S and waited_i < BOUND_S, (waited_p, waited_i)
    for during, before in ((during_p.json(), proposals), (during_i.json(), incidents)):
        assert during["stale"] is True and during["as_of_ts_s"] == before["as_of_ts_s"]
        assert {k: v for k, v in during.items() if k != "stale"} == {
            k: v for k, v in before.items() if k != "stale"
        }
    assert (
        after["stale"] is False and after["as_of_ts_s"] > proposals["as_of_ts_s"]
    )  # the flush done: read again


def test_a_first_question_while_busy_is_cut_from_a_broader_read_or_refused_at_once(tmp_path: Path) -> None:
    path = _workspace(tmp_path / "a.duckdb", "a")
    with _owned(path) as (owner, api), _served(api) as url:
        fresh_ten = httpx.get(f"{url}/api/proposals?limit=10", timeout=30).json()
        fresh_open = httpx.get(f"{url}/api/incidents?status=open&limit=1", timeout=30).json()
        api._kept_proposals._answers.clear()  # as a shard that was never asked these: only the default read
        api._kept_incidents._answers.clear()
        httpx.get(f"{url}/api/proposals", timeout=30).raise_for_status()
        httpx.get(f"{url}/api/incidents", timeout=30).raise_for_status()
        with _flushing(owner) as hold_began_ts_s:
            (ten, waited_ten) = _get(f"{url}/api/proposals?limit=10")
            (opened, waited_open) = _get(f"{url}/api/incidents?status=open&limit=1")
            (executed, waited_busy) = _get(f"{url}/api/proposals?status=executed")
            (pending, _) = _get(f"{url}/api/proposals?status=pending&limit=5")
    assert max(waited_ten, waited_open, waited_busy) < BOUND_S, (waited_ten, waited_open, waited_busy)
    # the ten newest open ones are among the default read's 200: the same ten a fresh read gave
    cut = ten.json()
    assert (
        ten.status_code == 200
        and cut["stale"] is True
        and cut["answered_from"] == {"limit": 200, "status": ""}
    )
    assert cut["proposals"] == fresh_ten["proposals"] and (cut["total"], cut["cut"]) == (EVERY, True)
    # every incident is in the default read (six, not cut): the open ones, counted, the newest one listed
    one = opened.json()
    assert opened.status_code == 200 and one["stale"] is True
    assert one["incidents"] == fresh_open["incidents"] and (one["total"], one["cut"]) == (1, False)
    assert "node_incidents" not in one
    # 200 of 3,001 open ones hold no executed proposal, nor the count of the pending: a clear 503, not a wait
    for refused in (executed, pending):
        assert refused.status_code == 503 and refused.headers["Retry-After"] == str(RETRY_AFTER_S)
        body = refused.json()
        assert body["busy"] is True and "busy" in body["error"] and body["retry_after_s"] == RETRY_AFTER_S
        assert abs(body["busy_since_ts_s"] - hold_began_ts_s) < 1.0


def test_the_flush_reads_the_default_lists_again_within_its_own_hold(tmp_path: Path) -> None:
    path = _workspace(tmp_path / "a.duckdb", "a")
    with _owned(path) as (owner, api), _served(api) as url:
        with owner.store() as store:  # the flush's hold: the warm-up counts no hold of its own
            holds = owner.holds
            api.warm(store)
            assert owner.holds == holds
        kept = api._kept_proposals.as_of_ts_s(Question(200))
        with owner.store() as store:
            api.warm(store)  # within WARM_EVERY_S of the last: not read again
        assert api._kept_proposals.as_of_ts_s(Question(200)) == kept and WARM_EVERY_S > 1
        with _flushing(owner):  # never asked before: answered from the flush's read
            proposals, waited_p = _get(f"{url}/api/proposals")
            incidents, waited_i = _get(f"{url}/api/incidents")
    assert proposals.status_code == 200 and incidents.status_code == 200
    assert proposals.json()["stale"] is True and proposals.json()["as_of_ts_s"] == kept
    assert incidents.json()["stale"] is True and incidents.json()["total"] == 6
    assert max(waited_p, waited_i) < BOUND_S


def test_a_running_service_answers_a_first_question_in_a_long_flush_from_its_flushs_read(
    tmp_path: Path,
) -> None:
    """`aiops run` (in process, on a held clock): its flush reads the default lists again, so questions nobody
    asked before, asked while a later hold keeps the workspace, are answered (stale) instead of refused."""
    held = HeldClock(time.time())
    config = {"http": {"listen": "127.0.0.1:0"}}
    with service_in_process(tmp_path / "agent.duckdb", TINY_SCENARIO, config, held) as service:
        held.run_until_true(lambda: service.flushes >= 1, 120, "a flush")
        assert service.http is not None
        url = f"http://127.0.0.1:{service.http.port}"
        with _flushing(
            service.owner
        ):  # the loop waits on the held clock: this stands for its next, long flush
            (proposals, waited_p), (incidents, waited_i) = (
                _get(f"{url}/api/proposals"),
                _get(f"{url}/api/incidents"),
            )
    assert (proposals.status_code, incidents.status_code) == (200, 200), (proposals.text, incidents.text)
    assert proposals.json()["stale"] is True and incidents.json()["stale"] is True
    assert max(waited_p, waited_i) < BOUND_S
