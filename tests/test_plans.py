"""Issue 34 item 3, plans not piles. The thermal caps touch the hot GPUs only, and another node of the job only
where its own numbers favour it (about to throttle by itself, at no cost in steps/s), said in °C, W and steps/s;
a cap that cuts no heat now is not proposed, and the plan says why in numbers. A plan's life: its first steps
proposed (up to and including the first physical one), the next one proposed when the closed loop records a
`failed` outcome (contract 3, recorded by the closed loop's own writer), never a step held for a person, done when a step worked, superseded by a new
diagnosis, closed when the incident resolves; every change audited."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aiops.control.capping import thermal_caps
from aiops.control.readings import ThermalInputs
from aiops.control.thermal import GpuTemp, NodeInfo, assess
from aiops.models import GpuPower, Hypothesis, Incident
from aiops.plans import StepDraft, advance, close_for_incident, file_plan, plan, plans, propose_step
from aiops.runtime.outcomes import Outcome, record
from aiops.store import Store
from guardrails.actions import Action
from guardrails.audit import read_rows
from guardrails.policy import Context
from guardrails.proposal_desk import Guardrails
from guardrails.steps import approve_step
from guardrails.topology import Topology
from tests.guardrails_helpers import gpu_state
from tests.signing_helpers import Keys, signing

__all__ = ["signing"]
NOW = 1_800_000_000.0


def _inputs(hot_c: float, hot_draw_w: float, warm_trend: float) -> ThermalInputs:
    """job j on node0..node3 (2 GPUs each), node4 idle; node1/gpu1 hot; node2/gpu0 warm and rising."""
    gpus, power = [], {}
    for n in range(5):
        for g in range(2):
            name = f"node{n}/gpu{g}"
            temp, trend, draw = 60.0, 0.0, 650.0
            if name == "node1/gpu1":
                temp, draw = hot_c, hot_draw_w
            if name == "node2/gpu0":
                temp, trend = 80.0, warm_trend
            if n == 4:
                draw = 60.0
            gpus.append(GpuTemp(name, f"node{n}", temp, trend))
            power[name] = GpuPower(name, 700.0, 200.0, 700.0, 700.0, draw, job="j" if n < 4 else None)
    nodes = [NodeInfo(f"node{n}", "rack0", "j" if n < 4 else None) for n in range(5)]
    return ThermalInputs(gpus, nodes, [], power, NOW)


def test_a_hot_gpu_is_capped_alone_unless_the_jobs_numbers_favour_more() -> None:
    inputs = _inputs(hot_c=88.0, hot_draw_w=650.0, warm_trend=0.0)
    report = assess(inputs.gpus, inputs.nodes, inputs.racks)
    caps = thermal_caps(report, inputs, ["node1"])
    assert [(a.target, a.parameters) for a in caps.actions] == [("node1/gpu1", {"power_limit_w": 550.0})]
    reason, evidence = caps.actions[0].reason, " ".join(caps.actions[0].evidence)
    for said in ("88.0 °C", "82 °C", "650 W", "limit 550 W per GPU", "100 W less heat"):
        assert said in reason, (said, reason)
    assert "other 3 node(s) are left alone" in evidence and "gain the job no steps/s" in evidence, evidence
    assert "kW" in evidence and "-" not in reason.split("limit")[0].split("W")[-1]  # never "... = -184 W"

    rising = _inputs(hot_c=88.0, hot_draw_w=650.0, warm_trend=0.05)  # node2/gpu0 reaches 87 °C in 140 s
    caps = thermal_caps(assess(rising.gpus, rising.nodes, rising.racks), rising, ["node1"])
    assert [a.target for a in caps.actions] == ["node1/gpu1", "node2"]
    assert "would reach 87 °C in 140 s" in caps.actions[1].reason
    assert "costs the job no steps/s" in caps.actions[1].reason


def test_a_throttled_gpu_is_capped_one_step_and_told_in_watts_that_it_cuts_no_heat_yet() -> None:
    throttled = _inputs(hot_c=90.0, hot_draw_w=380.0, warm_trend=0.0)
    caps = thermal_caps(assess(throttled.gpus, throttled.nodes, throttled.racks), throttled, ["node1"])
    (cap,) = caps.actions
    assert cap.parameters == {"power_limit_w": 550.0}  # one 150 W guardrail step from 700 W
    assert "draws 380 W throttled" in cap.reason and "needs about 235 W (3 more 150 W step(s))" in cap.reason
    assert "no heat is cut until it would draw more" in cap.expected_effect, cap.expected_effect


# -- a plan's life --------------------------------------------------------------------------------------------
TOPOLOGY = Topology.grid(1, 3, 2, 1)
INCIDENT = Incident(
    incident_id="INC-7", opened_ts_s=NOW - 300, last_ts_s=NOW, title="hot", severity="warning",
    components=["node1/gpu1"], symptoms=[],
)  # fmt: skip
TOP = Hypothesis(root_cause="thermal_throttle", component="node1/gpu1", confidence=0.9, summary="")


def _action(kind: str, target: str, **parameters: object) -> Action:
    return Action(
        proposal_id="draft",
        kind=kind,
        target=target,
        parameters=parameters,
        proposed_by="analyst",
        created_ts_s=0,
    )


def _draft(no: int, kind: str, risk: str, actions: list[Action], hold: str = "") -> StepDraft:
    return StepDraft(
        no, kind, f"step {no}", risk, actions, "effect", "cost", "rollback", 60.0, "x", "why", hold
    )


DRAFTS = [
    _draft(1, "notify", "digital", [_action("open_ticket", "node1/gpu1", team="facilities")]),
    _draft(2, "limit", "physical", [_action("set_power_limit", "node1/gpu1", power_limit_w=560.0)]),
    _draft(3, "drain", "physical", [_action("drain_node", "node1")]),
    _draft(4, "reset", "physical", [_action("gpu_reset", "node1/gpu1")], hold="a person decides"),
]


@pytest.fixture
def desk(signing: Keys, tmp_path: Path) -> Guardrails:
    store = Store(tmp_path / "ws.duckdb", guardrails=signing.guardrails)
    gpus = {g: gpu_state(g) for node in TOPOLOGY.node_gpus.values() for g in node}
    return Guardrails(store, context_for=lambda now: Context(TOPOLOGY, gpus, (), now))


def _outcome(store: Store, step_id: str, pid: str, verdict: str, detail: str) -> None:
    """What the closed loop records once a step's verify window passed (aiops/runtime/outcomes.py, contract 3)."""
    now = time.time()
    outcome = Outcome(
        pid, INCIDENT.incident_id, step_id, verdict, "temp_below_slowdown", detail, (now - 180, now)
    )
    record(store, outcome, now, now)


def _statuses(desk: Guardrails) -> list[str]:
    found = plans(desk.store, incident_id=INCIDENT.incident_id)[-1]
    return [s.status for s in found.steps]


def _run_step(desk: Guardrails, keys: Keys, step_id: str) -> str:
    found = next(s for p in plans(desk.store) for s in p.steps if s.step_id == step_id)
    approve_step(desk, step_id, found.proposal_ids, keys.signer("alice"))
    for pid in found.proposal_ids:
        assert desk.execute(pid).status == "executed"
    return found.proposal_ids[0]


def test_a_failed_step_proposes_the_next_and_a_held_one_waits_for_a_person(
    desk: Guardrails, signing: Keys
) -> None:
    filed, proposals = file_plan(desk, INCIDENT, TOP, DRAFTS, "test")
    assert _statuses(desk) == ["proposed", "proposed", "waiting", "waiting"]  # up to the first physical step
    assert [f.status for f in proposals] == ["pending", "pending"]
    assert {r.step_id for r in desk.records.proposals()} == {f"{filed.plan_id}.1", f"{filed.plan_id}.2"}
    pid = _run_step(desk, signing, f"{filed.plan_id}.2")
    advance(desk)
    assert _statuses(desk)[1] == "done"
    _outcome(desk.store, f"{filed.plan_id}.2", pid, "failed", "node1/gpu1 still 89 °C after 180 s")
    assert f"{filed.plan_id}.3 proposed" in advance(desk)
    steps = plans(desk.store)[0].steps
    assert [s.status for s in steps] == ["proposed", "failed", "proposed", "waiting"]
    assert "still 89 °C" in steps[1].note and f"{filed.plan_id}.2 failed" in steps[2].note
    drain = _run_step(desk, signing, f"{filed.plan_id}.3")
    _outcome(desk.store, f"{filed.plan_id}.3", drain, "failed", "still throttling")
    advance(desk)
    assert _statuses(desk)[2:] == ["failed", "waiting"]  # the held reset is never proposed by itself
    assert plan(desk.store, filed.plan_id).status == "open"  # type: ignore[union-attr]
    assert propose_step(desk, f"{filed.plan_id}.4", origin="person", why="asked", actor="bob")
    assert _statuses(desk)[3] == "proposed"
    events = [r.data()["what"] for r in read_rows(desk.store, proposal_id=filed.plan_id, event="plan")]
    assert events == ["filed", "proposed", "proposed", "proposed", "proposed"], events


def test_a_step_that_worked_closes_the_plan_and_a_new_diagnosis_supersedes_it(
    desk: Guardrails, signing: Keys
) -> None:
    first, _ = file_plan(desk, INCIDENT, TOP, DRAFTS, "test")
    pid = _run_step(desk, signing, f"{first.plan_id}.2")
    _outcome(desk.store, f"{first.plan_id}.2", pid, "worked", "node1/gpu1 at 80 °C")
    advance(desk)
    assert plan(desk.store, first.plan_id).status == "done"  # type: ignore[union-attr]
    assert _statuses(desk)[2:] == ["waiting", "waiting"]  # nothing escalated
    second, _ = file_plan(desk, INCIDENT, TOP, DRAFTS, "test")
    third, _ = file_plan(desk, INCIDENT, TOP.model_copy(update={"root_cause": "power_brake"}), DRAFTS, "test")
    assert [p.status for p in plans(desk.store)] == ["done", "superseded", "open"]
    assert all(s.status in ("superseded", "skipped", "done") for s in plan(desk.store, second.plan_id).steps)  # type: ignore[union-attr]
    close_for_incident(desk, INCIDENT.incident_id)
    closed = plan(desk.store, third.plan_id)
    assert closed is not None and closed.status == "done" and closed.steps[2].status == "skipped"


def test_a_new_diagnosis_on_other_hardware_leaves_the_other_faults_plan_open(
    desk: Guardrails, signing: Keys
) -> None:
    """A fleet incident that gathered a second fault elsewhere (another node) is re-diagnosed as that fault: the
    first fault's plan stays open with its steps; a new diagnosis on the first fault's node replaces its plan
    alone; the same cause and component again files nothing."""
    first, _ = file_plan(desk, INCIDENT, TOP, DRAFTS, "test")
    elsewhere = TOP.model_copy(update={"root_cause": "gpu_fell_off_bus", "component": "node2/gpu0"})
    other = [_draft(1, "restart", "physical", [_action("restart_job", "job:j", exclude="node2")])]
    second, filed = file_plan(desk, INCIDENT, elsewhere, other, "test")
    assert filed and {p.plan_id: p.status for p in plans(desk.store)} == {
        first.plan_id: "open",
        second.plan_id: "open",
    }
    assert plan(desk.store, first.plan_id).steps[1].status == "proposed"  # type: ignore[union-attr]
    again, refiled = file_plan(desk, INCIDENT, elsewhere, other, "test")
    assert again.plan_id == second.plan_id and refiled == []
    here = TOP.model_copy(update={"root_cause": "power_brake", "component": "node1"})
    third, _ = file_plan(desk, INCIDENT, here, DRAFTS, "test")
    statuses = {p.plan_id: p.status for p in plans(desk.store)}
    assert statuses == {first.plan_id: "superseded", second.plan_id: "open", third.plan_id: "open"}


def test_a_step_over_many_gpus_is_judged_with_one_context(signing: Keys, tmp_path: Path) -> None:
    """A site cap's step lowers every GPU of a shard (5,120 at 40,960 GPUs): built per target, the validation
    context re-read every GPU's newest sample for each, and the shard's flush held its workspace for half an hour.
    The step's targets are created at one instant and filing changes nothing a rule reads, so one context judges
    them all; each is still judged on its own (a limit below the floor is denied, the others pending)."""
    topology = Topology.grid(1, 8, 8, 1)
    gpus = {g: gpu_state(g) for node in topology.node_gpus.values() for g in node}
    built: list[float] = []

    def context_for(now: float) -> Context:
        built.append(now)
        return Context(topology, gpus, (), now)

    desk = Guardrails(Store(tmp_path / "ws.duckdb", guardrails=signing.guardrails), context_for=context_for)
    targets = sorted(gpus)
    limits = [560.0 if g != targets[5] else 50.0 for g in targets]  # one below any GPU's floor
    drafts = [
        _draft(
            1,
            "limit",
            "physical",
            [_action("set_power_limit", g, power_limit_w=w) for g, w in zip(targets, limits, strict=True)],
        )
    ]
    built.clear()
    _, proposals = file_plan(desk, INCIDENT, TOP, drafts, "test")
    assert len(built) == 1, len(built)
    assert len(proposals) == 64
    assert [f.status for f in proposals].count("denied") == 1 and proposals[5].status == "denied", proposals[
        5
    ]
