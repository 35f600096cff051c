"""The lemon rule on the twin (issue 34's must-show): one GPU (node1/gpu1) throws uncorrectable ECC errors three
times, an hour apart. The twin runs in segments with the service's own live detection and responder between
them (aiops/service/live.py, respond.py: what `aiops run --sim` does each flush, without its wall-clock loop),
so each failure opens its own incident, is diagnosed and gets its remediation filed (the quiet hours between
failures are stepped through coarsely, without telemetry: nothing happens in them). After the first and the
second, people do what the playbook proposes: alice drains the node, alice and bob reset the GPU (two people),
alice resumes the node (the plan's drain and reset steps, asked for by a person). The third time, the GPU has
come back twice after resets that did not hold: the plan leads with the RMA step (the bug-report bundle and the
RMA ticket, proposed with the plan) and offers no reset (skipped, saying why), and the component's history and
lemon score say why in numbers."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from aiops.memory.history import component_history
from aiops.memory.lemon import lemon_ranking, lemon_score, rma_verdict
from aiops.plans import PlanRecord, plans, propose_step
from aiops.report.build import build_report
from aiops.report.period import Period
from aiops.report.render_md import render_md
from aiops.runtime.world import attach, desk
from aiops.scenarios import Scenario, parse_scenario
from aiops.service.live import LiveDetection
from aiops.service.respond import Responder
from aiops.sim import World, simulate
from aiops.sim.twin import Twin, record_run
from aiops.store import Store, Workspace
from guardrails.actions import Action
from guardrails.proposal_desk import Guardrails
from tests.signing_helpers import Keys

GPU = "node1/gpu1"
FAULTS_AT_S = (60.0, 3960.0, 7860.0)  # an hour and more apart: a GPU is reset at most once an hour
SEGMENT_S = 360.0  # each failure and the quiet that closes its incident
GAP_STEP_S = 20.0
DETECT_S = 90.0  # from a segment's start to a point where its fault's incident is open


def scenario() -> Scenario:
    return parse_scenario(
        {
            "name": "lemon-gpu",
            "seed": 11,
            "duration_s": FAULTS_AT_S[-1] + SEGMENT_S,
            "cluster": {"racks": 1, "nodes_per_rack": 2, "gpus_per_node": 2, "nics_per_node": 1},
            "faults": [
                {"kind": "gpu_ecc_error", "target": GPU, "start_s": t, "duration_s": 60, "severity": 0.8}
                for t in FAULTS_AT_S
            ],
        }
    )


class Run:
    """The twin stepped in segments into one workspace, with live detection and the responder after each."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.scenario = scenario()
        self.world = World(self.scenario)
        self.twin = Twin(self.world)
        self.live = LiveDetection()
        self.responder = Responder()
        record_run(store, self.scenario, None, 0.0)

    def desk(self) -> Guardrails:
        return desk(self.store, attach(self.store, twin=self.twin), clock=lambda: self.world.now_ts_s)

    def skip(self, seconds: float) -> None:
        """The quiet hour between failures: the twin steps on in 20 s steps (a test's economy: nothing happens
        in it), no telemetry is stored, and live detection resumes where the next telemetry starts."""
        steps = round(seconds / GAP_STEP_S)
        for _ in range(steps):
            self.world.step(GAP_STEP_S)
        self.twin.log_steps(self.store, steps * GAP_STEP_S)
        self.live.until_ts_s = self.world.now_ts_s

    def run(self, seconds: float) -> list[str]:
        """Step the twin `seconds` with its telemetry stored, detect, respond; the incidents opened."""
        simulate(
            self.scenario.model_copy(update={"duration_s": seconds}),
            self.store,
            world=self.world,
            flush_every_s=math.inf,
        )
        self.twin.log_steps(self.store, seconds)
        newest = float(self.store.scalar("SELECT max(ts_s) FROM gpu_samples"))
        transitions = self.live.advance(self.store, newest)
        self.responder.handle(self.store, transitions, self.desk)
        return [t.incident.incident_id for t in transitions if t.kind == "opened"]

    def filed(self, incident_id: str) -> list[Action]:
        return [r.action for r in self.desk().records.proposals() if r.incident_id == incident_id]

    def plan_of(self, incident_id: str) -> PlanRecord:
        found = [p for p in plans(self.store) if p.incident_id == incident_id]
        assert len(found) == 1, found
        return found[0]

    def ask_for(self, incident_id: str, rung: str) -> dict[str, str]:
        """A person asks for a waiting step of the incident's plan now: its proposals, kind -> id."""
        wanted = next(s for s in self.plan_of(incident_id).steps if s.kind == rung)
        filed = propose_step(
            self.desk(), wanted.step_id, origin="person", why="asked for by alice", actor="alice"
        )
        ids = {f.proposal_id for f in filed}
        return {r.action.kind: r.proposal_id for r in self.desk().records.proposals() if r.proposal_id in ids}

    def act(self, keys: Keys, pid: str, *people: str) -> None:
        guard = self.desk()
        for person in people:
            guard.approve(pid, keys.signer(person))
        outcome = guard.execute(pid)
        assert outcome.ran, outcome.message

    def repair(self, keys: Keys, incident_id: str) -> None:
        """The plan's drain and reset steps, asked for and done by people: drain, reset (two people), then the
        node back in service."""
        self.act(keys, self.ask_for(incident_id, "drain")["drain_node"], "alice")
        self.act(keys, self.ask_for(incident_id, "reset")["gpu_reset"], "alice", "bob")
        guard = self.desk()
        resume = Action(
            proposal_id=f"P-resume-{incident_id}",
            kind="resume_node",
            target="node1",
            reason="reset done",
            proposed_by="analyst",
            created_ts_s=self.world.now_ts_s,
        )
        guard.propose(resume, origin="test")
        self.act(keys, resume.proposal_id, "alice")


@pytest.fixture
def keys(signing: Keys) -> Keys:
    return signing


def test_a_gpu_that_fails_the_same_way_three_times_goes_to_rma_on_the_third(
    tmp_path: Path, keys: Keys
) -> None:
    with Workspace(str(tmp_path / "lemon.duckdb"), guardrails=keys.guardrails).write() as store:
        run = Run(store)
        incidents: list[str] = []
        for i, fault_s in enumerate(FAULTS_AT_S):
            if i:
                run.skip(fault_s - 30.0 - run.world.elapsed_s)
            opened = run.run(DETECT_S)  # the fault began 30 s in: its incident is open and its plan filed
            assert len(opened) == 1, (i, opened)
            incidents += opened
            verdict = rma_verdict(store, GPU, "gpu_ecc_error")
            if i < 2:  # the ladder as the playbook has it: move, drain, reset, then RMA last
                assert not verdict.due, verdict.reason
                rungs = [(s.kind, bool(s.actions)) for s in run.plan_of(opened[0]).steps]
                assert rungs[:3] == [("move", True), ("drain", True), ("reset", True)], rungs
                assert rungs[-1] == ("rma", True)
                run.repair(keys, opened[0])  # while the incident is open, as people would
                assert run.run(SEGMENT_S - DETECT_S) == []  # the quiet closes it
        third = run.plan_of(incidents[2])
        assert verdict.due and verdict.occurrences == 3 and verdict.repeats == 2
        first = third.steps[0]  # the plan's choice: the RMA step, proposed with the plan
        assert (first.kind, first.status) == ("rma", "proposed"), third.steps
        assert {a.kind for a in first.actions} == {"rerun_check", "open_ticket"}
        assert "gpu_ecc_error 3 times" in first.reason and "back after 2 repair(s)" in first.reason
        reset = next(s for s in third.steps if s.kind == "reset")
        assert (reset.status, reset.actions) == ("skipped", []) and "not offered" in reset.reason, reset
        filed = run.filed(incidents[2])
        assert "gpu_reset" not in [a.kind for a in filed]
        tickets = [a for a in filed if a.kind == "open_ticket"]
        assert [(a.target, a.parameters["priority"]) for a in tickets] == [(GPU, "high")]

        history = component_history(store, GPU)
        assert [f.root_cause for f in history.failures] == ["gpu_ecc_error"] * 3
        assert [a.kind for a in history.actions if a.repair] == ["gpu_reset", "gpu_reset"]
        assert [f.incident_id for f in history.repeats()] == incidents[1:]
        score = lemon_score(history, run.world.now_ts_s)
        assert score.take_out and score.fault_count == 3 and score.repeats == 2 and 4.9 < score.score <= 5.0
        ranking = lemon_ranking(store)
        assert [s.component for s in ranking[:2]] == [GPU, "node1"]
        assert all(s.component.startswith("node1") for s in ranking)  # nothing else failed

        # the report as of the run's end (a period after the telemetry: its GPU sections, seconds of plots, are
        # not what this test is about; the components section ranks 30 days of history whatever the period)
        report = render_md(build_report(store, Period(run.world.now_ts_s, run.world.now_ts_s + 1)))
        section = report[report.index("Components to watch or take out of service") :]
        assert "| node1/gpu1 | 5.0 | 3 | 2 | 0 | take out of service |" in section, section[:1500]
