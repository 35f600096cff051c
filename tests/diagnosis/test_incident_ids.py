"""Issue 35 item 1 (identity): live incident ids name the tier that opened them (`INC-<host>-0001`,
`INC-fleet-0001`), so two agents' incidents never share an id; a workspace from before (every agent numbered from
INC-0001) has its ids qualified at the service's first start in every table naming an incident, recorded once in
the audit log, and numbering carries on after the newest; ids in text (chat, the analyst) are recognised in both
shapes."""

from __future__ import annotations

import json
from pathlib import Path

from aiops.agent.analyst import INCIDENT_ID
from aiops.cli.chat import INCIDENT
from aiops.detect import save_incidents
from aiops.detect.incidents import IncidentTracker, incident_prefix
from aiops.models import Diagnosis, Hypothesis, Incident, Symptom
from aiops.pipeline import save_hypotheses
from aiops.service.live import LiveDetection
from aiops.store import Workspace
from guardrails import Guardrails
from guardrails.audit import AuditLog, verify
from tests.guardrails_helpers import NOW_TS_S, action


def hot(component: str, ts_s: float) -> Symptom:
    return Symptom(kind="xid", component=component, ts_s=ts_s, detail={"xid": 79})


def test_each_tier_numbers_its_own_ids_and_an_analysis_keeps_the_plain_shape() -> None:
    node3 = IncidentTracker(id_prefix=incident_prefix("node3"))
    node5 = IncidentTracker(id_prefix=incident_prefix("gpu-a100-017"))
    fleet = IncidentTracker(id_prefix=incident_prefix("fleet"))
    analysis = IncidentTracker()
    opened = [
        t.feed([hot("node3/gpu1", 100.0)], 110.0)[0].incident.incident_id
        for t in (node3, node5, fleet, analysis)
    ]
    assert opened == ["INC-node3-0001", "INC-gpu-a100-017-0001", "INC-fleet-0001", "INC-0001"]


def incident(incident_id: str, resolved_ts_s: float | None = None) -> Incident:
    return Incident(
        incident_id=incident_id,
        opened_ts_s=NOW_TS_S - 600,
        last_ts_s=NOW_TS_S - 300,
        title="xid on node3/gpu1",
        severity="critical",
        components=["node3/gpu1"],
        symptoms=[hot("node3/gpu1", NOW_TS_S - 600)],
        resolved_ts_s=resolved_ts_s,
    )


def test_a_workspace_from_before_has_its_ids_qualified_once_everywhere(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "node3.duckdb")
    old_open, old_closed = incident("INC-0001"), incident("INC-0002", resolved_ts_s=NOW_TS_S - 100)
    with workspace.write() as store:
        save_incidents(store, [old_open, old_closed])
        top = Hypothesis(root_cause="gpu_fell_off_bus", component="node3/gpu1", confidence=0.9, summary="s")
        save_hypotheses(store, [Diagnosis(incident=old_open, hypotheses=[top])])
        filed = Guardrails(store, clock=lambda: NOW_TS_S).propose(
            action(proposal_id="P-legacy"), origin="service", incident_id="INC-0001"
        )
        store.conn.execute(
            "INSERT INTO notifications VALUES (1, ?, 'wh-1', 'json', 'opened', 'INC-0001', 'opened', ?, 1, ?, "
            "'delivered', NULL, ?)",
            [NOW_TS_S, json.dumps({"incident": {"id": "INC-0001"}}), NOW_TS_S, NOW_TS_S],
        )
        store.conn.execute(  # the fleet's copy of another agent's id: that agent's to rename, not ours
            "INSERT INTO node_incidents VALUES ('node5', 'INC-0001', 'node5/gpu0', '', 'warning', ?, NULL, ?)",
            [NOW_TS_S, NOW_TS_S],
        )
        audit_rows = len(AuditLog(store).rows())

        live = LiveDetection(id_prefix=incident_prefix("node3"))
        live.start(store)

        ids = {t: {r[0] for r in store.conn.execute(f"SELECT incident_id FROM {t}").fetchall()} for t in (
            "incidents", "hypotheses", "notifications", "node_incidents")}  # fmt: skip
        assert ids["incidents"] == {"INC-node3-0001", "INC-node3-0002"}
        assert ids["hypotheses"] == ids["notifications"] == {"INC-node3-0001"}
        assert ids["node_incidents"] == {"INC-0001"}
        assert store.scalar(
            "SELECT incident_id FROM proposals WHERE proposal_id = ?", [filed.proposal_id]
        ) == ("INC-node3-0001")
        records = AuditLog(store).rows(event="incident_ids")
        assert len(records) == 1 and len(AuditLog(store).rows()) == audit_rows + 1
        assert records[0].data()["renamed"] == {"INC-0001": "INC-node3-0001", "INC-0002": "INC-node3-0002"}
        assert verify(store).ok  # the chain was appended to, never rewritten
        # the open one carries on under its new id; the next one is numbered after the newest
        assert [g.number for g in live.tracker.open] == [1]
        assert live.tracker.next_number == 3
        opened = live.tracker.feed([hot("node3/gpu6", NOW_TS_S)], NOW_TS_S + 10)
        assert [t.incident.incident_id for t in opened if t.kind == "opened"] == ["INC-node3-0003"]

        LiveDetection(id_prefix=incident_prefix("node3")).start(store)  # a restart: nothing left to rename
        assert len(AuditLog(store).rows(event="incident_ids")) == 1


def test_ids_in_text_are_recognised_in_both_shapes() -> None:
    text = "why did INC-gpu-a100-017-0042 open, and INC-0007, and inc-fleet-0003?"
    assert [m.group(0) for m in INCIDENT_ID.finditer(text)] == [
        "INC-gpu-a100-017-0042",
        "INC-0007",
        "inc-fleet-0003",
    ]
    assert all(INCIDENT.match(i) for i in ("INC-node3-0001", "INC-fleet-0007", "INC-0001"))
    assert not INCIDENT.match("INC-node3-") and not INCIDENT.match("P-1234abcd")
