"""Effects verified (issue 34 item 2): each check of aiops/detect/effects.py over hand-built telemetry (worked,
failed, unknown), the runner (aiops/runtime/outcomes.py: judged once the window passed, once, recorded in
`action_outcomes` and as an `outcome` audit event on the proposal; a plan step's own window first), and an
incident's recurrence linked to the earlier one (aiops/detect/recurrence.py)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from aiops.detect.effects import CHECKS, Judged, judge
from aiops.detect.recurrence import link_recurrence, recurrence_of
from aiops.models import Incident, Symptom
from aiops.nvml_bits import HW_SLOWDOWN, SW_POWER_CAP, SW_THERMAL_SLOWDOWN
from aiops.runtime.outcomes import spec_for, verify_due
from aiops.store import Store
from guardrails.actions import Action
from guardrails.audit import AuditLog
from guardrails.intended import Intended
from guardrails.policy import ExecutionRecord
from guardrails.records import GuardrailRecords

T0 = 1_767_225_600.0
ACT_S = 100.0  # the action runs here; its window is 180 s: settled part 240..280 s
GPUS = ["n0/gpu0", "n0/gpu1"]


def _gpus(store: Store, temp_after: float, reasons_after: int, limit_after: float = 700.0) -> None:
    cols: dict[str, list[Any]] = {k: [] for k in ("ts_s", "gpu", "node", "temp_c", "slowdown_temp_c")}
    cols |= {"clocks_event_reasons": [], "power_limit_w": [], "power_limit_max_w": []}
    for t in range(0, 300, 2):
        after = t > ACT_S + 60
        for gpu in GPUS:
            for key, value in (
                ("ts_s", T0 + t),
                ("gpu", gpu),
                ("node", "n0"),
                ("temp_c", temp_after if after else 91.0),
                ("slowdown_temp_c", 87.0),
                ("clocks_event_reasons", reasons_after if after else SW_THERMAL_SLOWDOWN),
                ("power_limit_w", limit_after if after else 700.0),
                ("power_limit_max_w", 700.0),
            ):
                cols[key].append(value)
    store.ingest("gpu_samples", cols)


def _judged(kind: str = "set_power_limit", **extra: Any) -> Judged:
    return Judged(
        **{
            "kind": kind,
            "target": "n0",
            "gpus": GPUS,
            "nics": ["n0/nic0"],
            "nodes": ["n0"],
            "jobs": [],
            "set_ts_s": T0 + ACT_S,
            "within_s": 180.0,
            **extra,
        }
    )


@pytest.mark.parametrize(
    ("temp_after", "reasons_after", "verdict"),
    [(70.0, 0, "worked"), (91.0, SW_THERMAL_SLOWDOWN, "failed"), (88.0, 0, "failed")],
)
def test_temp_below_slowdown(temp_after: float, reasons_after: int, verdict: str) -> None:
    with Store(":memory:") as store:
        _gpus(store, temp_after, reasons_after)
        assert judge(store, "temp_below_slowdown", _judged()).verdict == verdict
        assert judge(store, "temp_below_slowdown", _judged(set_ts_s=T0 + 900)).verdict == "unknown"


def test_throttle_gone_sets_aside_swpowercap_at_the_limit_the_product_set() -> None:
    ours = {
        (g, "power_limit_w"): Intended(g, "power_limit_w", 550.0, "P", "k", "h", T0, T0 + 9e9) for g in GPUS
    }
    with Store(":memory:") as store:
        _gpus(store, 70.0, SW_POWER_CAP, limit_after=550.0)
        assert judge(store, "throttle_gone", _judged(intended=ours)).verdict == "worked"
        assert (
            judge(store, "throttle_gone", _judged()).verdict == "failed"
        )  # a cap nobody set still throttles
    with Store(":memory:") as store:
        _gpus(store, 70.0, HW_SLOWDOWN)
        assert judge(store, "throttle_gone", _judged(intended=ours)).verdict == "failed"


def _steps(store: Store, after_s: float | None) -> None:
    rows: dict[str, list[Any]] = {"ts_s": [], "job": [], "step": [], "step_time_s": []}
    for t in range(0, 300, 2):
        value = 2.0 if t < 60 else 3.0 if t <= ACT_S + 60 else after_s
        if value is None:
            continue
        for key, v in (("ts_s", T0 + t), ("job", "train"), ("step", t), ("step_time_s", value)):
            rows[key].append(v)
    store.ingest("job_steps", rows)


@pytest.mark.parametrize(("after_s", "verdict"), [(2.1, "worked"), (2.6, "failed"), (None, "failed")])
def test_step_time_recovered_against_the_reference_before_the_incident(
    after_s: float | None, verdict: str
) -> None:
    incident = Incident(
        incident_id="I-1", opened_ts_s=T0 + 60, last_ts_s=T0 + 100, title="t", severity="warning",
        components=["job:train"], symptoms=[],
    )  # fmt: skip
    with Store(":memory:") as store:
        _steps(store, after_s)
        got = judge(store, "step_time_recovered", _judged(jobs=["train"], incident=incident))
        assert got.verdict == verdict, got.detail
        assert judge(store, "step_time_recovered", _judged(jobs=["other"])).verdict == "unknown"


def _nics(store: Store, changes: int, lost: int, ce: int, lane: str = "vip") -> None:
    rows: dict[str, list[Any]] = {
        k: [] for k in ("ts_s", "nic", "node", "lane", "interval_s", "drops", "ce_marks", "carrier_changes")
    }
    rows["link_up"] = []
    flows: dict[str, list[Any]] = {
        k: [] for k in ("ts_s", "nic", "node", "traffic_class", "lane", "interval_s")
    }
    flows["tx_bytes"] = []
    for t in range(0, 300, 2):
        after = t > ACT_S + 60
        for key, value in (
            ("ts_s", T0 + t),
            ("nic", "n0/nic0"),
            ("node", "n0"),
            ("lane", "vip"),
            ("interval_s", 2.0),
            ("drops", lost if after else 500),
            ("ce_marks", ce if after else 0),
            ("carrier_changes", changes if after else 1),
            ("link_up", True),
        ):
            rows[key].append(value)
        for key, value in (
            ("ts_s", T0 + t),
            ("nic", "n0/nic0"),
            ("node", "n0"),
            ("traffic_class", "collective"),
            ("lane", lane if after else "bulk"),
            ("interval_s", 2.0),
            ("tx_bytes", 10**6),
        ):
            flows[key].append(value)
    store.ingest("nic_samples", rows)
    store.ingest("flow_class_samples", flows)


def test_network_checks_flap_lanes_and_ecn() -> None:
    with Store(":memory:") as store:
        _nics(store, changes=0, lost=0, ce=5)
        assert {
            c: judge(store, c, _judged()).verdict for c in ("flap_stopped", "lanes_clean", "ecn_marking")
        } == {
            "flap_stopped": "worked",
            "lanes_clean": "worked",
            "ecn_marking": "worked",
        }
    with Store(":memory:") as store:
        _nics(store, changes=2, lost=500, ce=0, lane="bulk")
        assert {
            c: judge(store, c, _judged()).verdict for c in ("flap_stopped", "lanes_clean", "ecn_marking")
        } == {
            "flap_stopped": "failed",
            "lanes_clean": "failed",
            "ecn_marking": "failed",
        }


def test_gpu_healthy_symptom_gone_and_check_ran() -> None:
    incident = Incident(
        incident_id="I-1", opened_ts_s=T0 + 60, last_ts_s=T0 + 280, title="t", severity="warning",
        components=["n0/gpu0", "n1/nic0"],
        symptoms=[
            Symptom(kind="xid", component="n0/gpu0", ts_s=T0 + 60, detail={"last_ts_s": T0 + 270}),
            Symptom(kind="carrier_flap", component="n1/nic0", ts_s=T0 + 60, detail={"last_ts_s": T0 + 120}),
        ],
    )  # fmt: skip
    with Store(":memory:") as store:
        _gpus(store, 70.0, 0)
        assert judge(store, "gpu_healthy", _judged()).verdict == "worked"
        store.ingest("gpu_events", {"ts_s": [T0 + 270], "gpu": ["n0/gpu0"], "node": ["n0"], "kind": ["xid"]})
        assert judge(store, "gpu_healthy", _judged()).verdict == "failed"
        assert judge(store, "symptom_gone", _judged(incident=incident)).verdict == "failed"  # the XID again
        # a drained node may stay faulty: what it carried moved away; the other symptom stopped at 120 s
        assert judge(store, "symptom_gone", _judged("drain_node", incident=incident)).verdict == "worked"
        assert judge(store, "symptom_gone", _judged()).verdict == "unknown"
        assert judge(store, "check_ran", _judged("rerun_check")).verdict == "worked"
        assert judge(store, "no_such_check", _judged()).verdict == "unknown"
    assert set(CHECKS) >= {"temp_below_slowdown", "step_time_recovered", "symptom_gone", "check_ran"}


def _ledger(store: Store, pid: str, kind: str, target: str, incident_id: str | None, at_s: float) -> None:
    records = GuardrailRecords(store)
    action = Action(
        proposal_id=pid,
        kind=kind,
        target=target,
        parameters={"power_limit_w": 550.0} if kind == "set_power_limit" else {},
        proposed_by="analyst",
        created_ts_s=T0,
    )
    records.save_proposal(
        action, status="executed", message="ok", physical=True, approvals_needed=1, incident_id=incident_id
    )
    assert records.claim(ExecutionRecord(pid, kind, target, frozenset(GPUS), 1_900_000_000.0))
    records.finish(pid, "executed", {"detail": {}})
    records.stamp_data_ts(pid, T0 + at_s)


def _topology(store: Store) -> None:
    store.ingest(
        "topology",
        {
            "component": ["rack0", "n0", *GPUS, "n0/nic0"],
            "kind": ["rack", "node", "gpu", "gpu", "nic"],
            "parent": ["fleet", "rack0", "n0", "n0", "n0"],
            "rack": ["rack0"] * 5,
            "node": [None, "n0", "n0", "n0", "n0"],
            "idx": [0, 0, 0, 1, 0],
        },
    )


def test_an_executed_action_is_judged_once_its_window_passed_and_only_once() -> None:
    with Store(":memory:") as store:
        _topology(store)
        _gpus(store, 70.0, 0)
        _ledger(store, "P-1", "set_power_limit", "n0", "INC-0001", ACT_S)
        _ledger(
            store, "P-2", "set_power_limit", "n0/gpu1", None, ACT_S
        )  # a DCIM round's: no incident, not judged
        _ledger(store, "P-3", "open_ticket", "n0", "INC-0001", ACT_S)  # a ticket: not judged
        assert verify_due(store, T0 + ACT_S + 179, wall_ts_s=2e9) == []
        done = verify_due(store, T0 + ACT_S + 181, wall_ts_s=2e9)
        assert [(o.proposal_id, o.verdict, o.check) for o in done] == [
            ("P-1", "worked", "temp_below_slowdown")
        ]
        assert verify_due(store, T0 + ACT_S + 500, wall_ts_s=2e9) == []
        row = store.query("SELECT * FROM action_outcomes")
        assert [(r["proposal_id"], r["incident_id"], r["verdict"]) for r in row] == [
            ("P-1", "INC-0001", "worked")
        ]
        events = [
            (r.event, r.actor, json.loads(r.payload)["verdict"])
            for r in AuditLog(store).rows("P-1", "outcome")
        ]
        assert events == [("outcome", "verifier", "worked")]


def test_a_plan_steps_own_window_comes_first() -> None:
    with Store(":memory:") as store:
        assert spec_for(store, "set_power_limit", None, None) is not None  # the kind's default
        assert spec_for(store, "open_ticket", None, None) is None
        for step_id, within_s, expect in (("PL-1.2", 600.0, "step_time_recovered"), ("PL-1.1", None, None)):
            store.conn.execute(  # the plans' table (aiops/plans, migration 26): only what the verifier reads matters
                "INSERT INTO plan_steps (step_id, plan_id, step_no, title, kind, risk, targets, proposal_ids, "
                "actions, effect, cost, rollback, verify_within_s, verify_expect, reason, status, updated_ts_s, "
                "note, hold) VALUES (?, 'PL-1', 1, 't', 'limit', 'physical', [], [], '[]', '', '', '', ?, ?, '', "
                "'proposed', 0, '', '')",
                [step_id, within_s, expect],
            )
        step = spec_for(store, "set_power_limit", "INC-1", "PL-1.2")
        assert step is not None and (step.within_s, step.check) == (600.0, "step_time_recovered")
        assert spec_for(store, "set_power_limit", "INC-1", "PL-1.1") is None  # the step says: not judged


def _incident(
    store: Store, iid: str, opened_s: float, resolved_s: float | None, cause: str, component: str
) -> Incident:
    incident = Incident(
        incident_id=iid, opened_ts_s=T0 + opened_s, last_ts_s=T0 + opened_s + 10, title="t", severity="warning",
        components=[component], symptoms=[], resolved_ts_s=None if resolved_s is None else T0 + resolved_s,
    )  # fmt: skip
    store.conn.execute(
        "INSERT INTO incidents (incident_id, opened_ts_s, last_ts_s, title, severity, components, symptoms, "
        "resolved_ts_s) VALUES (?, ?, ?, 't', 'warning', [?], '[]', ?)",
        [iid, incident.opened_ts_s, incident.last_ts_s, component, incident.resolved_ts_s],
    )
    store.conn.execute("INSERT INTO hypotheses VALUES (?, 1, ?, ?, 0.9, 's', '[]')", [iid, cause, component])
    return incident


def test_a_recurrence_is_linked_to_the_earlier_incident_within_the_horizon() -> None:
    with Store(":memory:") as store:
        _incident(store, "INC-0001", 0, 300, "thermal_throttle", "node6")
        _incident(store, "INC-0002", 400, 700, "thermal_throttle", "node2")  # another component
        again = _incident(store, "INC-0003", 1000, None, "thermal_throttle", "node6")
        assert (
            link_recurrence(store, again, "thermal_throttle", "node6", 600, T0 + 1010) is None
        )  # 700 s > 600
        assert link_recurrence(store, again, "thermal_throttle", "node6", 0, T0 + 1010) is None  # off
        assert (
            link_recurrence(store, again, "gpu_ecc_error", "node6", 3600, T0 + 1010) is None
        )  # another cause
        assert link_recurrence(store, again, "thermal_throttle", "node6", 3600, T0 + 1010) == "INC-0001"
        assert link_recurrence(store, again, "thermal_throttle", "node6", 3600, T0 + 1020) == "INC-0001"
        assert store.scalar("SELECT count(*) FROM incident_links") == 1
        assert recurrence_of(store, "INC-0003") == "INC-0001"
        assert store.scalar("SELECT gap_s FROM incident_links") == pytest.approx(700.0)


def test_the_incident_timeline_shows_the_outcome_and_the_recurrence() -> None:
    from aiops.console.data import incident as incident_page
    from aiops.runtime.outcomes import Outcome, record

    with Store(":memory:") as store:
        _incident(store, "INC-0001", 0, 300, "thermal_throttle", "node6")
        again = _incident(store, "INC-0002", 1000, None, "thermal_throttle", "node6")
        link_recurrence(store, again, "thermal_throttle", "node6", 3600, T0 + 1010)
        record(
            store,
            Outcome("P-9", "INC-0002", None, "failed", "temp_below_slowdown", "still hot", (0, 1)),
            T0 + 1200,
            2e9,
        )
        page = incident_page(store, "INC-0002")
    assert page is not None
    whats = [e["what"] for e in page["timeline"]]
    assert "recurrence of INC-0001" in whats and "outcome P-9: failed" in whats
