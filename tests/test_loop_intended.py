"""Intended state (issue 34 item 1): what the product executed is expected, not an incident. Over hand-built
telemetry (2 nodes x 4 GPUs, one job) where node1's power limits fall from 700 W to 550 W at 200 s and the GPUs
then draw at the limit (SwPowerCap): with no execution behind it, that is a `power_limit_drop` incident
diagnosed `power_cap_misconfig`; with an executed set_power_limit in the ledger, nothing opens; a limit that moves
away from what was set (a hand change to 400 W) is caught and its remedy puts back the value that was set (not a
reset that would undo the cap); an expired or replaced intended value no longer hides anything."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from aiops.config import GuardrailsConfig
from aiops.detect import detect, save_incidents
from aiops.models import Diagnosis
from aiops.pipeline import remediate, save_hypotheses
from aiops.rca import analyze
from aiops.report import queries as rq
from aiops.report import sections, sections_ops
from aiops.report.intended import intended_power_cap
from aiops.report.period import Period
from aiops.store import Store
from guardrails.actions import Action, canonical_json
from guardrails.intended import Intended, effects, intended_history, intended_state
from guardrails.policy import ExecutionRecord
from guardrails.records import GuardrailRecords

T0 = 1_767_225_600.0
GPUS = [f"node{n}/gpu{g}" for n in range(2) for g in range(4)]
CAPPED = [g for g in GPUS if g.startswith("node1/")]
CAP_AT_S = 200


def _telemetry(store: Store, duration_s: int = 400, hand: tuple[str, int, float] | None = None) -> None:
    """2 nodes x 4 GPUs, one job; node1's limits 550 W from CAP_AT_S (drawing at the limit: SwPowerCap);
    `hand`: (gpu, from_s, watts) a limit changed by hand later."""
    rng = np.random.default_rng(7)
    nodes = sorted({g.split("/")[0] for g in GPUS})
    store.ingest(
        "topology",
        {
            "component": ["rack0", *nodes, *GPUS],
            "kind": ["rack", *(["node"] * len(nodes)), *(["gpu"] * len(GPUS))],
            "parent": ["fleet", *(["rack0"] * len(nodes)), *[g.split("/")[0] for g in GPUS]],
            "rack": ["rack0"] * (1 + len(nodes) + len(GPUS)),
            "node": [None, *nodes, *[g.split("/")[0] for g in GPUS]],
            "idx": [0, *range(len(nodes)), *[int(g[-1]) for g in GPUS]],
        },
    )
    store.ingest(
        "job_ranks",
        {
            "job": ["train"] * len(GPUS),
            "rank": list(range(len(GPUS))),
            "gpu": GPUS,
            "node": [g.split("/")[0] for g in GPUS],
            "nic": [g.split("/")[0] + "/nic0" for g in GPUS],
        },
    )
    store.ingest("jobs", {"job": ["train"], "nodes": [2], "ranks": [len(GPUS)], "started_ts_s": [T0]})
    cols: dict[str, list[Any]] = {
        k: []
        for k in (
            "ts_s",
            "gpu",
            "node",
            "temp_c",
            "power_w",
            "power_limit_w",
            "power_limit_max_w",
            "power_limit_default_w",
            "clocks_event_reasons",
            "util_pct",
            "slowdown_temp_c",
        )
    }
    steps: dict[str, list[Any]] = {"ts_s": [], "job": [], "step": [], "step_time_s": []}
    for t in range(duration_s):
        for gpu in GPUS:
            limit = 550.0 if gpu in CAPPED and t >= CAP_AT_S else 700.0
            if hand is not None and gpu == hand[0] and t >= hand[1]:
                limit = hand[2]
            capped = limit < 700.0
            row = {
                "ts_s": T0 + t,
                "gpu": gpu,
                "node": gpu.split("/")[0],
                "temp_c": 62.0 + rng.normal(0, 0.3),
                "power_w": limit if capped else 600.0 + rng.normal(0, 5),
                "power_limit_w": limit,
                "power_limit_max_w": 700.0,
                "power_limit_default_w": 700.0,
                "clocks_event_reasons": 0x4 if capped else 0,
                "util_pct": 98.0,
                "slowdown_temp_c": 87.0,
            }
            for key, value in row.items():
                cols[key].append(value)
        if t % 2 == 0:
            for key, value in (("ts_s", T0 + t), ("job", "train"), ("step", t // 2), ("step_time_s", 2.0)):
                steps[key].append(value)
    store.ingest("gpu_samples", cols)
    store.ingest("job_steps", steps)


def _executed(
    store: Store,
    pid: str,
    kind: str,
    target: str,
    parameters: dict[str, Any],
    units: list[str],
    at_s: float,
    detail: dict[str, Any] | None = None,
    status: str = "executed",
) -> None:
    """An execution as the guardrails ledger records it (proposal, claim, finish, stamped on the data clock)."""
    records = GuardrailRecords(store)
    action = Action(
        proposal_id=pid,
        kind=kind,
        target=target,
        parameters=parameters,
        proposed_by="analyst",
        created_ts_s=T0 + at_s - 30,
    )
    records.save_proposal(action, status=status, message="ok", physical=True, approvals_needed=1)
    wall_ts_s = 1_900_000_000.0 + at_s  # the ledger's wall clock: another clock than the telemetry's
    assert records.claim(ExecutionRecord(pid, kind, target, frozenset(units), wall_ts_s))
    records.finish(pid, status, {"kind": kind, "parameters": parameters, "detail": detail or {}})
    records.stamp_data_ts(pid, T0 + at_s)


def _capped(store: Store, at_s: float = CAP_AT_S - 0.5) -> None:
    _executed(
        store,
        "P-cap",
        "set_power_limit",
        "node1",
        {"power_limit_w": 550.0},
        CAPPED,
        at_s,
        {"power_limit_w": dict.fromkeys(CAPPED, 550.0)},
    )


def _diagnose(store: Store) -> list[Diagnosis]:
    return [Diagnosis(incident=i, hypotheses=analyze(store, i)) for i in detect(store)]


def test_a_limit_nobody_set_is_a_power_cap_misconfig_incident() -> None:
    """The baseline the other tests rely on: without an execution, the same telemetry is an incident."""
    with Store(":memory:") as store:
        _telemetry(store)
        found = _diagnose(store)
    assert found, "a lowered limit nobody set opens an incident"
    top = found[0].hypotheses[0]
    assert (top.root_cause, top.component) == ("power_cap_misconfig", "node1")
    assert "power_limit_drop" in {s.kind for s in found[0].incident.symptoms}


def test_a_limit_the_service_set_is_no_incident_and_no_misconfiguration() -> None:
    with Store(":memory:") as store:
        _telemetry(store)
        _capped(store)
        assert detect(store) == []
        state = intended_state(store, T0 + 300)
        assert {k for k in state} == {(g, "power_limit_w") for g in CAPPED}
        assert state[("node1/gpu0", "power_limit_w")].proposal_id == "P-cap"


def test_the_analyst_blames_no_limit_the_service_set() -> None:
    """An incident opened before the execution was recorded (a workspace replayed, a fleet that learnt of it
    late) is diagnosed again: power_cap_misconfig is no longer among its causes."""
    with Store(":memory:") as store:
        _telemetry(store)
        incident = detect(store)[0]
        assert "power_cap_misconfig" in {h.root_cause for h in analyze(store, incident)}
        _capped(store)
        assert "power_cap_misconfig" not in {h.root_cause for h in analyze(store, incident)}


def test_a_limit_moved_away_from_what_was_set_is_caught_and_put_back() -> None:
    with Store(":memory:") as store:
        _telemetry(store, hand=("node1/gpu2", 300, 400.0))
        _capped(store)
        found = _diagnose(store)
        assert len(found) == 1
        incident = found[0].incident
        drops = [s for s in incident.symptoms if s.kind == "power_limit_drop"]
        assert [s.component for s in drops] == ["node1/gpu2"]
        assert drops[0].detail["intended_w"] == 550.0 and drops[0].detail["set_by"] == "P-cap"
        top = found[0].hypotheses[0]
        assert (top.root_cause, top.component) == ("power_cap_misconfig", "node1/gpu2")
        # the remedy restores what the service set, never a reset to the default that would undo its cap
        actions = remediate(store, found[0])
    power = [a for a in actions if a.kind in ("set_power_limit", "reset_power_limit")]
    assert [(a.kind, a.target, a.parameters) for a in power] == [
        ("set_power_limit", "node1/gpu2", {"power_limit_w": 550.0})
    ]


def test_an_expired_intended_value_hides_nothing() -> None:
    with Store(":memory:", guardrails=GuardrailsConfig(intended_ttl_s=60.0)) as store:
        _telemetry(store)
        _capped(store)
        assert intended_state(store, T0 + CAP_AT_S + 30)
        assert intended_state(store, T0 + CAP_AT_S + 61) == {}
        found = detect(store)
    assert found and "power_limit_drop" in {s.kind for s in found[0].symptoms}
    assert found[0].opened_ts_s > T0 + CAP_AT_S + 59  # caught once the cap stopped being expected (60 s)


def test_a_later_execution_replaces_and_a_failed_one_never_counts() -> None:
    with Store(":memory:") as store:
        _capped(store)
        _executed(store, "P-reset", "reset_power_limit", "node1/gpu1", {}, ["node1/gpu1"], 250.0)
        _executed(
            store,
            "P-failed",
            "set_power_limit",
            "node1/gpu2",
            {"power_limit_w": 500.0},
            ["node1/gpu2"],
            260.0,
            status="failed",
        )
        before, after = intended_state(store, T0 + 240), intended_state(store, T0 + 300)
        history = intended_history(store)
    assert before[("node1/gpu1", "power_limit_w")].value == 550.0
    assert after[("node1/gpu1", "power_limit_w")].value is None  # put back to the default
    assert after[("node1/gpu2", "power_limit_w")].proposal_id == "P-cap"  # the failed run changed nothing
    spans = [s for s in history.intervals("power_limit_w") if s[0] == "node1/gpu1"]
    assert [(s[1] - T0, s[2] - T0, s[3]) for s in spans][:1] == [(CAP_AT_S - 0.5, 250.0, 550.0)]


@pytest.mark.parametrize(
    ("kind", "target", "parameters", "units", "expected"),
    [
        (
            "set_clock_limit",
            "n0",
            {"sm_clock_max_mhz": 1500},
            ["n0/gpu0"],
            [("n0/gpu0", "sm_clock_max_mhz", 1500.0)],
        ),
        ("gpu_reset", "n0/gpu1", {}, ["n0/gpu1"], [("n0/gpu1", "sm_clock_max_mhz", None)]),
        ("drain_node", "n0", {"reason_code": "x"}, ["n0"], [("n0", "drained", 1.0)]),
        ("enable_lanes", "n0/nic0", {}, ["n0/nic0"], [("n0/nic0", "lanes_enforced", 1.0)]),
        ("enable_ecn", "n0/nic1", {}, ["n0/nic1"], [("n0/nic1", "ecn_enabled", 1.0)]),
        (
            "set_lane_rate",
            "n0/nic0",
            {"lane": "bulk", "fraction": 0.3},
            ["n0/nic0"],
            [("n0/nic0", "lane_rate_fraction:bulk", 0.3)],
        ),
        (
            "set_cooling_state",
            "rack1",
            {"cooling_fraction": 1.0},
            ["n2"],
            [("rack1", "cooling_fraction", 1.0)],
        ),
        (
            "set_power_limit",
            "n0",
            {"fraction_of_tdp": 0.8},
            ["n0/gpu0"],
            [],
        ),  # unknown watts: nothing claimed
        ("open_ticket", "n0", {"team": "x"}, ["n0"], []),
        ("restart_job", "job:train", {}, ["n0"], []),
    ],
)
def test_what_each_kind_sets(
    kind: str, target: str, parameters: dict[str, Any], units: list[str], expected: list[tuple[str, str, Any]]
) -> None:
    assert effects(kind, target, parameters, units, {}) == expected


def test_a_reading_matches_within_the_read_back_tolerance_and_a_default_matches_nothing() -> None:
    set_w = Intended("g", "power_limit_w", 550.0, "P", "set_power_limit", "h", 0.0, 10.0)
    assert set_w.matches(550.0) and set_w.matches(551.5) and not set_w.matches(540.0)
    assert not set_w.matches(None) and not set_w.matches(float("nan"))
    assert not Intended("g", "power_limit_w", None, "P", "reset_power_limit", "h", 0.0, 10.0).matches(700.0)


def test_an_unreadable_ledger_row_claims_nothing() -> None:
    with Store(":memory:") as store:
        _capped(store)
        store.conn.execute("UPDATE executions SET result = 'not json' WHERE proposal_id = 'P-cap'")
        assert intended_state(store, T0 + 300) == {}
        store.conn.execute(
            "UPDATE executions SET result = ? WHERE proposal_id = 'P-cap'",
            [canonical_json({"detail": {"power_limit_w": {"node1/gpu0": "550"}}})],
        )
        state = intended_state(store, T0 + 300)
    assert json.dumps([e.value for e in state.values()]) == "[null]"  # a text is no reading: the default


def test_reports_count_a_limit_the_service_set_apart_and_lose_no_gpu_hours_to_it() -> None:
    """The health report: SwPowerCap at the limit the service set is no throttling and no GPU-hours lost; the
    actions section says what the service set. Without the execution the same telemetry is throttling."""
    period = Period(T0, T0 + 400)
    with Store(":memory:") as store:
        _telemetry(store)
        assert "SwPowerCap" in {r["reason"] for r in rq.throttle_by_reason(store, period, 1.0)}
        save_incidents(store, detect(store))
        save_hypotheses(store, _diagnose(store), replace_all=True)  # the incident a workspace held before
        _capped(store)
        assert rq.throttle_by_reason(store, period, 1.0) == []
        assert intended_power_cap(store, period, 1.0) == {
            "gpu_s": 4 * (400 - CAP_AT_S) * 1.0,
            "gpus": 4,
            "proposals": ["P-cap"],
        }
        thermal = sections.thermal(store, period, 1.0)
        incidents = sections_ops.incidents(store, period).tables[0]
        actions = sections_ops.actions(store, period).tables
    assert thermal is not None and any(
        "Set by the service:" in line and "P-cap" in line for line in thermal.lines
    )
    lost = incidents.rows[0][incidents.headers.index("GPU-hours lost")]
    assert lost == "0.00 (a limit the service set)"
    set_table = next(t for t in actions if t.caption.startswith("What the service set"))
    assert [(r[0], r[1], r[2], r[3]) for r in set_table.rows] == [
        ("P-cap", "set_power_limit", "power_limit_w", "550")
    ]


def test_on_the_fleet_a_limit_a_node_agent_exported_as_set_is_no_incident() -> None:
    """The fleet's workspace holds no execution of node1's cap: node1's agent ran it and exported it
    (`aiops_intended_state*`, read into intended_exports by aiops/fleet/pivot.py)."""
    with Store(":memory:") as store:
        _telemetry(store)
        for gpu in CAPPED:
            store.conn.execute(
                "INSERT INTO intended_exports VALUES ('node1', ?, 'power_limit_w', 550, 'P-node1', "
                "'set_power_limit', 'h', ?, ?, ?)",
                [gpu, T0 + CAP_AT_S - 0.5, T0 + 10_000, T0 + CAP_AT_S + 15],
            )
        assert detect(store) == []
        assert {e.source for e in intended_state(store, T0 + 300).values()} == {"node:node1"}
