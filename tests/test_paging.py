"""Issue 35 item 2, one page per problem, decided: a diagnosed incident pages; one without a diagnosis is covered
by a diagnosed one about the same components, else held for `undiagnosed_hold_s`, then pages; a maintenance
window or silence holds an incident; on the fleet, a node agent's incident is covered by the fleet's about its
component (and left to its own tier otherwise). The pager acts on it against a real workspace: the sinks hear of
an incident once it pages (the diagnosis with the first page), its resolution only if it paged, a hold that runs
out pages once, a window that ends lets its incident page, a restart pages nothing twice, and the decisions are
what `aiops_incident_pages` exports."""

from __future__ import annotations

from pathlib import Path

from aiops.detect import save_incidents
from aiops.models import Diagnosis, Hypothesis, Incident, Symptom
from aiops.pipeline import save_hypotheses
from aiops.service.pager import Pager
from aiops.service.paging import Subject, decide
from aiops.store import Store, Workspace
from aiops.store.maintenance import Membership, Window, add_window
from tests.guardrails_helpers import NOW_TS_S, FakeClock

HOLD_S = 300.0
NONE = Membership()


def subject(incident_id: str, components: tuple[str, ...], root_cause: str = "", **kw: object) -> Subject:
    fields: dict[str, object] = {
        "node": "fleet",
        "incident_id": incident_id,
        "components": components,
        "root_cause": root_cause,
        "component": components[0] if components else "",
        "severity": "warning",
        "first_seen_ts_s": NOW_TS_S,
        "own": True,
    }
    fields.update(kw)
    return Subject(**fields)  # type: ignore[arg-type]


THERMAL = subject("INC-fleet-0001", ("node3/gpu1", "job:llm"), "thermal_throttle")
SLOW_JOB = subject("INC-fleet-0002", ("job:llm",))
OTHER_JOB = subject("INC-fleet-0003", ("job:bert",))


def test_a_diagnosed_incident_pages_and_covers_the_undiagnosed_one_about_the_same_job() -> None:
    got = decide([THERMAL, SLOW_JOB, OTHER_JOB], [], NONE, NOW_TS_S + 10, HOLD_S)
    assert got[THERMAL.key].pages and got[THERMAL.key].reason == "pages"
    assert not got[SLOW_JOB.key].pages and got[SLOW_JOB.key].covered_by == "INC-fleet-0001"
    assert got[OTHER_JOB.key].reason == "held"  # nobody explains it yet
    later = decide([THERMAL, SLOW_JOB, OTHER_JOB], [], NONE, NOW_TS_S + HOLD_S, HOLD_S)
    assert later[OTHER_JOB.key].pages and not later[SLOW_JOB.key].pages


def test_the_fleet_covers_the_node_incidents_about_its_components_and_leaves_the_others_to_their_node() -> (
    None
):
    node3 = subject("INC-node3-0001", ("node3/gpu1",), "thermal_throttle", node="node3", own=False)
    home = subject("INC-node0-0001", ("job:llm",), node="node0", own=False)  # the job's home: slow, no cause
    elsewhere = subject("INC-node5-0001", ("node5/nic0",), "nic_link_flap", node="node5", own=False)
    node_level = subject("INC-node3-0002", ("node3",), "power_brake", node="node3", own=False)
    got = decide([THERMAL, node3, home, elsewhere, node_level], [], NONE, NOW_TS_S, HOLD_S)
    assert got[node3.key].covered_by == got[home.key].covered_by == "INC-fleet-0001"
    assert got[node_level.key].covered_by == "INC-fleet-0001"  # node3/gpu1 lies under node3
    assert elsewhere.key not in got  # not the fleet's to decide: node5's own word stands
    # the job's home node sees the job slow, its cause is on another node of the job: the fleet's incident
    # about that GPU covers it, even when the fleet itself never saw the job's steps
    gpu_only = subject("INC-fleet-0009", ("node3/gpu1",), "thermal_throttle")
    home_jb = subject("INC-node2-0001", ("job:jb",), node="node2", own=False)
    jobs = Membership({}, {"jb": frozenset({"node2/gpu0", "node3/gpu1", "node2", "node3"})})
    assert decide([gpu_only, home_jb], [], jobs, NOW_TS_S, HOLD_S)[home_jb.key].covered_by == "INC-fleet-0009"
    assert home_jb.key not in decide([gpu_only, home_jb], [], NONE, NOW_TS_S, HOLD_S)


def test_maintenance_and_silences_hold_what_their_scope_holds() -> None:
    members = Membership({"node3": "rack0"}, {})
    maintenance = Window("M-1", "maintenance", "node", "node3", 0, 2e9, "CHG-1", "ana", 0)
    silence = Window("M-2", "silence", "label", "root_cause=thermal_throttle", 0, 2e9, "known", "ana", 0)
    got = decide([THERMAL, SLOW_JOB], [maintenance], members, NOW_TS_S, HOLD_S)
    assert (got[THERMAL.key].reason, got[THERMAL.key].window_id) == ("maintenance", "M-1")
    assert got[SLOW_JOB.key].covered_by == "INC-fleet-0001"  # covered by one that does not page: no page
    assert decide([THERMAL], [silence], members, NOW_TS_S, HOLD_S)[THERMAL.key].reason == "silence"


# -- the pager over a workspace ----------------------------------------------------------------------------------
def incident(incident_id: str, components: list[str], resolved: bool = False) -> Incident:
    return Incident(
        incident_id=incident_id,
        opened_ts_s=NOW_TS_S,
        last_ts_s=NOW_TS_S,
        title=f"incident on {components[0]}",
        severity="warning",
        components=components,
        symptoms=[Symptom(kind="gpu_hot", component=components[0], ts_s=NOW_TS_S)],
        resolved_ts_s=NOW_TS_S + 500 if resolved else None,
    )


TOP = Hypothesis(root_cause="thermal_throttle", component="node3/gpu1", confidence=0.9, summary="hot")


def store_incident(store: Store, found: Incident, top: Hypothesis | None = None) -> None:
    save_incidents(store, [found], replace_all=False)
    if top is not None:
        save_hypotheses(store, [Diagnosis(incident=found, hypotheses=[top])], replace_all=False)


class Sinks:
    def __init__(self) -> None:
        self.got: list[tuple[str, str]] = []

    def __call__(self, store: Store, kind: str, found: Incident, top: Hypothesis | None) -> None:
        self.got.append((kind, found.incident_id))


def test_the_sinks_hear_of_an_incident_once_it_pages(tmp_path: Path) -> None:
    clock, sinks = FakeClock(NOW_TS_S), Sinks()
    with Workspace(tmp_path / "n.duckdb").write() as store:
        pager = Pager("fleet", sinks, hold_undiagnosed_s=HOLD_S, clock=clock)
        thermal = incident("INC-fleet-0001", ["node3/gpu1", "job:llm"])
        store_incident(store, thermal)
        pager.on_event(store, "opened", thermal, None)
        assert sinks.got == []  # no diagnosis yet: held
        store_incident(store, thermal, TOP)
        pager.on_event(store, "diagnosed", thermal, TOP)
        assert sinks.got == [("diagnosed", "INC-fleet-0001")]  # the first page carries the diagnosis
        slow = incident("INC-fleet-0002", ["job:llm"])
        store_incident(store, slow)
        pager.on_event(store, "opened", slow, None)
        clock.advance(HOLD_S + 1)
        states = {s.incident_id: s for s in pager.review(store, NOW_TS_S)}
        assert states["INC-fleet-0002"].reason == "covered" and not states["INC-fleet-0002"].pages
        assert states["INC-fleet-0001"].pages
        pager.on_event(store, "resolved", slow.model_copy(update={"resolved_ts_s": NOW_TS_S + 9}), None)
        assert sinks.got == [("diagnosed", "INC-fleet-0001")]  # it never paged: nothing to resolve

        # an undiagnosed incident nobody explains pages once its hold runs out, and only once
        lone = incident("INC-fleet-0003", ["node5/nic0"])
        store_incident(store, lone)
        pager.on_event(store, "opened", lone, None)
        pager.review(store, NOW_TS_S)
        assert ("opened", "INC-fleet-0003") not in sinks.got
        clock.advance(HOLD_S + 1)
        pager.review(store, NOW_TS_S)
        pager.review(store, NOW_TS_S)
        assert sinks.got.count(("opened", "INC-fleet-0003")) == 1

        # a restart: nothing pages twice; a paged incident's news still goes out
        again = Pager("fleet", sinks, hold_undiagnosed_s=HOLD_S, clock=clock)
        again.review(store, NOW_TS_S)
        assert len(sinks.got) == 2
        again.on_event(store, "resolved", thermal.model_copy(update={"resolved_ts_s": NOW_TS_S + 99}), TOP)
        assert sinks.got[-1] == ("resolved", "INC-fleet-0001")


def test_a_window_stops_the_page_and_when_it_ends_an_incident_still_open_pages(tmp_path: Path) -> None:
    clock, sinks = FakeClock(NOW_TS_S), Sinks()
    with Workspace(tmp_path / "n.duckdb").write() as store:
        window = add_window(
            store,
            kind="maintenance",
            scope="node",
            target="node3",
            starts_ts_s=NOW_TS_S - 1,
            ends_ts_s=NOW_TS_S + 600,
            reason="CHG-9",
            created_by="ana",
            now_ts_s=NOW_TS_S,
        )
        pager = Pager("fleet", sinks, hold_undiagnosed_s=HOLD_S, clock=clock)
        thermal = incident("INC-fleet-0001", ["node3/gpu1", "job:llm"])
        store_incident(store, thermal, TOP)
        pager.on_event(store, "opened", thermal, None)
        pager.on_event(store, "diagnosed", thermal, TOP)
        (state,) = pager.review(store, NOW_TS_S)
        assert (state.pages, state.reason, state.window_id) == (False, "maintenance", window.window_id)
        assert sinks.got == []
        clock.advance(601)
        pager.review(store, NOW_TS_S)
        assert sinks.got == [("diagnosed", "INC-fleet-0001")]
