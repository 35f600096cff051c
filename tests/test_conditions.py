"""Issue 35 item 4, the pieces under tests/test_fleet_blind.py (which runs them as real processes):

- the condition book: a condition opens one incident (no hypothesis), one warning line and one notification;
  held, it stays one incident, silently; cleared, it resolves with one line and one notification; neither raised
  nor cleared, it stays as it is; a restarted book carries it on without notifying again, and live detection
  neither resumes it nor reuses its number;
- a node agent whose NVML goes away (the twin's NVML shut down under a running service): /readyz 503 naming the
  collector and NVML's answer, a `collector_blind` incident notified through the webhook, no GPU taken for lost
  off the bus; NVML back: ready again, resolved;
- paging (one page per problem): a condition pages at once (it needs no diagnosis: never held) and covers
  nothing (a lost agent explains no fault), but a maintenance window on its node still stops it;
- the console: the banner on every page, hostile reasons escaped, the coverage page; the chat: an answer that
  starts with how old the data is and names the lost agent, from incidents stored after the session began.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest

from aiops.models import Hypothesis, Incident
from aiops.service.conditions import Condition, ConditionBook, ConditionReport
from aiops.service.live import LiveDetection
from aiops.service.paging import Subject, decide
from aiops.store import Store, Workspace
from aiops.store.conditions import NODE_AGENT_LOST, SOURCE_BLIND, stated
from aiops.store.coverage import coverage
from aiops.store.maintenance import Membership, Window
from tests.console_helpers import add_users, client, make_demo, sign_in
from tests.notify_helpers import receiver
from tests.service_inprocess import HeldClock, service_in_process

HOSTILE = "<script>alert(1)</script> & <b>bold</b>"
BLIND = Condition(
    SOURCE_BLIND, "fleet", 100.0, "fleet blind: cannot read its time-series store", "critical", "x"
)


def lost(node: str, reason: str = "up == 0") -> Condition:
    return Condition(NODE_AGENT_LOST, node, 90.0, f"node agent lost on {node}", "warning", reason, {"gpu": 2})


class Told:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str | None]] = []

    def __call__(self, store: Store, kind: str, incident: Incident, top: Hypothesis | None) -> None:
        self.events.append((kind, incident.incident_id, top.root_cause if top else None))


def test_the_condition_book_opens_holds_and_resolves_once_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    told = Told()
    with Store(tmp_path / "ws.duckdb") as store, caplog.at_level(logging.INFO, logger="aiops.service"):
        for ts_s in (80.0, 90.0):  # some telemetry: a restart's live detection resumes what is open
            store.conn.execute(
                "INSERT INTO gpu_samples (ts_s, gpu, node) VALUES (?, 'node3/gpu0', 'node3')", [ts_s]
            )
        live = LiveDetection()
        live.start(store)
        book = ConditionBook(live.allocate_id, told)
        book.start(store)
        book.apply(store, ConditionReport([BLIND, lost("node3")]), 110.0)
        book.apply(store, ConditionReport([BLIND, lost("node3", "up == 0, still")]), 120.0)
        book.apply(store, ConditionReport([lost("node3")], {(SOURCE_BLIND, "fleet")}), 130.0)
        book.apply(store, ConditionReport(), 140.0)  # neither raised nor cleared: node3 stays lost
        assert told.events == [
            ("opened", "INC-0001", None),
            ("opened", "INC-0002", None),
            ("resolved", "INC-0001", None),
        ]
        rows = {s.incident_id: s for s in stated(store, open_only=False)}
        assert rows["INC-0001"].resolved_ts_s == 130.0 and rows["INC-0002"].resolved_ts_s is None
        assert rows["INC-0002"].reason == "up == 0" and rows["INC-0002"].since_ts_s == 90.0
        assert store.scalar("SELECT count(*) FROM hypotheses") == 0  # a condition, never a cause
        # a restart: the open one carries on (not told again); live detection neither resumes nor renumbers it
        again = LiveDetection()
        again.start(store)
        assert again.tracker.open_incidents() == [] and again.allocate_id() == "INC-0003"
        reborn = ConditionBook(again.allocate_id, told)
        reborn.start(store)
        reborn.apply(store, ConditionReport([lost("node3")]), 150.0)
        reborn.apply(store, ConditionReport(cleared={(NODE_AGENT_LOST, "node3")}), 160.0)
    assert told.events[3:] == [("resolved", "INC-0002", None)]
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert [r.getMessage() for r in warnings] == [BLIND.title, "node agent lost on node3"]
    recovered = [r.getMessage() for r in caplog.records if r.getMessage().endswith("recovered")]
    assert recovered == [f"{BLIND.title}: recovered", "node agent lost on node3: recovered"]


def test_a_condition_pages_at_once_covers_nothing_and_keeps_to_maintenance() -> None:
    def subject(incident_id: str, component: str, root_cause: str = "", condition: str = "") -> Subject:
        return Subject(
            "fleet", incident_id, (component,), root_cause, component, "warning", 1000.0, condition=condition
        )

    lost_node3 = subject("INC-fleet-0001", "node3", condition="node_agent_lost")
    slow_gpu = subject("INC-fleet-0002", "node3/gpu1")  # undiagnosed, on the lost node: not explained by it
    lost_node5 = subject("INC-fleet-0003", "node5", condition="node_agent_lost")
    window = Window("M-1", "maintenance", "node", "node5", 0, 2e9, "CHG-1", "ana", 0)
    got = decide([lost_node3, slow_gpu, lost_node5], [window], Membership(), 1001.0, 300.0)
    assert got[lost_node3.key].pages and got[lost_node3.key].reason == "pages"
    assert got[slow_gpu.key].reason == "held" and not got[slow_gpu.key].covered_by
    assert not got[lost_node5.key].pages and got[lost_node5.key].reason == "maintenance"


SCENARIO = """\
name: nvml-gone
seed: 3
duration_s: 3600
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 2, nics_per_node: 1}
"""


def test_a_node_whose_nvml_goes_away_is_blind_until_it_returns(tmp_path: Path) -> None:
    held = HeldClock(time.time())
    with receiver() as hook:
        config = {"notify": {"webhooks": [{"url": f"{hook.url}/hook", "kind": "json"}]}}
        with service_in_process(tmp_path / "ws.duckdb", SCENARIO, config, held) as service:
            held.run_until(6.0)
            assert service._ready() == (True, "ready")
            assert service.sources is not None
            nvml = next(s.collector for s in service.sources.sources if s.name == "nvml-node0").nvml  # type: ignore[union-attr]
            nvml.nvmlShutdown()  # the driver gone: every call answers UNINITIALIZED
            held.run_until_true(lambda: not service._ready()[0], 30.0, "not ready")
            why = service._ready()[1]
            assert "nvml-node0" in why and "UNINITIALIZED" in why, why
            opened = hook.wait_for(lambda got: any(r.body["event"] == "opened" for r in got), 30)
            body = opened[0].body
            assert (
                body["incident"]["condition"] == "collector_blind"
                and body["incident"]["severity"] == "critical"
            )
            held.run_until(held.monotonic() + 10.0)  # ten more seconds blind: no GPU lost off the bus
            with service.workspace.read() as store:
                titles = [str(r["title"]) for r in store.query("SELECT title FROM incidents")]
            assert titles == [body["incident"]["title"]], titles
            nvml.nvmlInit()
            held.run_until_true(lambda: service._ready()[0], 30.0, "ready again")
            hook.wait_for(lambda got: any(r.body["event"] == "resolved" for r in got), 30)
    assert [r.body["event"] for r in hook.got(None)] == ["opened", "resolved"]


def _stored(db: Path, *conditions: Condition) -> None:
    with Workspace(db).write() as store:
        live = LiveDetection()
        live.start(store)
        book = ConditionBook(live.allocate_id)
        book.start(store)
        book.apply(store, ConditionReport(list(conditions)), 1_767_225_700.0)


def test_the_console_says_it_is_blind_on_every_page(tmp_path: Path) -> None:
    db = make_demo(tmp_path)
    add_users(db)
    _stored(
        db,
        Condition(SOURCE_BLIND, "fleet", 1_767_225_650.0, "fleet blind", "critical", HOSTILE),
        lost("node3"),
    )
    c = client(db)
    sign_in(c, "victor")
    for path in ("/", "/collectors", "/coverage", "/chat", "/reports", "/audit", "/topology"):
        page = c.get(path).text
        assert 'id="blind-banner"' in page and "node agent lost on node3" in page, path
        assert HOSTILE not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page, path
    page = c.get("/coverage").text
    assert 'id="node-node3"' in page and "lost" in page and "Blind periods" in page
    with Workspace(db).read() as store:
        seen: dict[str, Any] = coverage(store)
    by_node = {n["node"]: n for n in seen["nodes"]}
    assert by_node["node3"]["state"] == "lost" and by_node["node3"]["lost"]["reason"] == "up == 0"
    assert seen["totals"]["nodes_lost"] == 1 and seen["totals"]["nodes"] == len(by_node)
    assert [c["kind"] for c in seen["conditions"]] == [SOURCE_BLIND, NODE_AGENT_LOST]


def test_a_chat_answer_says_how_old_its_data_is_and_who_is_lost(tmp_path: Path) -> None:
    from aiops.agent.session import AgentSession

    db = make_demo(tmp_path)
    with AgentSession(Workspace(db)) as session:
        before = session.ask("is node3 ok")
        assert "lost" not in before.answer
        _stored(db, lost("node3"))  # after the session began: the next question reads it
        after = session.ask("is node3 ok")
    assert after.answer.startswith("Node agents lost: node3 (last seen"), after.answer[:300]
    assert "node agent lost on node3" in after.answer
