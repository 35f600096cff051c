"""One page per condition across shards, the rule on its own (aiops/fleet/peer_pages.py; the two real shards:
tests/fleet/test_fleet_shards_view.py)."""

from __future__ import annotations

from typing import Any

from aiops.fleet.peer_pages import PeerIncident, PeerPages, arbitrate, peer_incidents
from aiops.service.paging import Decision, Subject
from aiops.store import Store

PAGES = Decision(True, "pages")
CAP = Subject("fleet", "INC-fleet-b-0001", ("rack1",), "facility_power_cap", "fleet", "warning", 0.0)


def peer(
    shard: str, *, pages: bool = True, paged: bool = False, cause: str = "facility_power_cap"
) -> PeerIncident:
    return PeerIncident(shard, f"INC-fleet-{shard}-0001", cause, "fleet", pages=pages, paged=paged)


def judge(
    shard: str, peers: list[PeerIncident], *, own: bool = False, at_s: float = 1.0, subject: Subject = CAP
) -> Decision:
    return arbitrate(
        shard,
        ["a", "b", "c"],
        subject,
        PAGES,
        peers,
        own_component=own,
        now_ts_s=at_s,
        hold_s=15.0,
        known_ts_s=0.0,
    )


def test_a_condition_another_shard_paged_does_not_page_again() -> None:
    assert judge("a", [peer("b", paged=True)]) == Decision(False, "elsewhere", covered_by="INC-fleet-b-0001")
    assert judge("c", [peer("b", paged=True)], at_s=99.0).covered_by == "INC-fleet-b-0001"


def test_the_first_named_shard_pages_and_the_later_ones_defer_to_it() -> None:
    assert judge("a", []) == PAGES  # the first shard: at once, nobody asked
    assert judge("a", [peer("b")]) == PAGES  # a later shard about to page does not stop the first
    assert judge("b", [peer("a")]) == Decision(False, "elsewhere", covered_by="INC-fleet-a-0001")
    assert judge("b", [peer("a", pages=False)]).reason == "waiting"  # held there (its window): b waits ...
    assert judge("b", [peer("a", pages=False)], at_s=20.0) == PAGES  # ... then pages on its own


def test_a_shard_pages_on_its_own_when_no_shard_before_it_has_the_condition() -> None:
    assert judge("b", []) == Decision(False, "waiting")  # within the hold: the first shard may page it
    assert judge("b", [], at_s=15.0) == PAGES  # the first shard down or blind: a page beats none
    assert judge("b", [peer("a", cause="rack_cooling")], at_s=15.0) == PAGES  # another cause is another page


def test_a_component_of_the_shards_own_pages_at_once() -> None:
    rack = Subject("fleet", "INC-fleet-b-0002", ("rack1",), "rack_cooling", "rack1", "warning", 0.0)
    assert judge("b", [], own=True, subject=rack) == PAGES


def test_only_own_incidents_that_page_with_a_cause_are_judged() -> None:
    held = Decision(False, "held")
    assert (
        arbitrate(
            "b",
            ["a"],
            CAP,
            held,
            [peer("a", paged=True)],
            own_component=False,
            now_ts_s=1.0,
            hold_s=15.0,
            known_ts_s=0.0,
        )
        == held
    )
    undiagnosed = Subject("fleet", "INC-fleet-b-0002", ("rack2",), "", "rack2", "warning", 0.0)
    assert judge("b", [peer("a", paged=True, cause="")], subject=undiagnosed) == PAGES


def test_a_blind_fleet_every_shard_states_at_once_pages_once() -> None:
    """Every shard reads one store: when it goes down (or a site cap's flush makes every shard's reads fall
    behind), each states `source_blind` on `fleet` in the same minute. One page, not eight: the first-named
    shard's, the others naming it; a shard alone blind still pages, after the first shard's hold."""
    blind = Subject(
        "fleet", "INC-fleet-b-0003", ("fleet",), "", "fleet", "critical", 0.0, condition="source_blind"
    )
    a_blind = peer("a", cause="source_blind")
    assert judge("b", [a_blind], subject=blind) == Decision(False, "elsewhere", covered_by="INC-fleet-a-0001")
    assert judge("b", [], subject=blind) == Decision(False, "waiting")  # the first shard may page it
    assert judge("b", [], subject=blind, at_s=16.0) == PAGES  # it did not: this shard alone is blind
    assert (
        judge("a", [peer("b", cause="source_blind")], subject=blind) == PAGES
    )  # the first-named pages at once
    # another shard's page of another cause, or of a lost agent, covers nothing here
    assert (
        judge(
            "b",
            [peer("a", paged=True), peer("a", paged=True, cause="node_agent_lost")],
            subject=blind,
            at_s=16.0,
        )
        == PAGES
    )


def test_a_shards_answer_is_read_as_hostile_input() -> None:
    answer: Any = {
        "incidents": [
            {
                "incident_id": "INC-fleet-a-0001",
                "status": "open",
                "top_hypothesis": {"root_cause": "facility_power_cap", "component": "fleet"},
                "paging": {"pages": True, "paged_ts_s": 12.0},
            },
            {
                "incident_id": "INC-fleet-a-0002",
                "status": "resolved",
                "top_hypothesis": {"root_cause": "facility_power_cap", "component": "fleet"},
            },
            {"incident_id": "INC-fleet-a-0003", "status": "open", "top_hypothesis": None},
            {
                "incident_id": "INC-fleet-a-0004",
                "status": "open",
                "top_hypothesis": {"root_cause": "x", "component": "y"},
                "paging": {"pages": "yes"},
            },
            "not an incident",
            {  # a condition of sight: its cause is its kind on its one component
                "incident_id": "INC-fleet-a-0005",
                "status": "open",
                "top_hypothesis": None,
                "condition": "source_blind",
                "components": ["fleet"],
                "paging": {"pages": True, "paged_ts_s": 3.0},
            },
            {
                "incident_id": "INC-fleet-a-0006",
                "status": "open",
                "condition": "rm -rf",
                "components": ["fleet"],
            },
            {
                "incident_id": "INC-fleet-a-0007",
                "status": "open",
                "condition": "source_blind",
                "components": "f",
            },
        ]
    }
    found = peer_incidents("a", answer)
    assert [(p.incident_id, p.root_cause, p.component, p.pages, p.paged) for p in found] == [
        ("INC-fleet-a-0001", "facility_power_cap", "fleet", True, True),
        ("INC-fleet-a-0004", "x", "y", False, False),
        ("INC-fleet-a-0005", "source_blind", "fleet", True, True),
    ]
    assert peer_incidents("a", ["a list"]) == [] and peer_incidents("a", {"incidents": "x"}) == []


def test_an_old_answer_counts_as_none_and_the_hold_counts_from_the_diagnosis() -> None:
    now = [100.0]
    peers = PeerPages(
        "b",
        {"a": "http://127.0.0.1:9", "b": "http://127.0.0.1:8"},
        None,
        interval_s=5.0,
        clock=lambda: now[0],
    )
    assert list(peers.urls) == ["a"]  # itself is not asked
    peers.answers["a"] = (100.0, [peer("a")])
    assert peers.fresh() == [peer("a")]
    with Store(":memory:") as store:
        undiagnosed_long_ago = Subject(
            "fleet", "INC-fleet-b-0001", (), "facility_power_cap", "fleet", "warning", 0.0
        )
        decided = peers.apply(store, [undiagnosed_long_ago], {undiagnosed_long_ago.key: PAGES}, now[0])
        assert decided[undiagnosed_long_ago.key].reason == "elsewhere"
        now[0] = 116.0  # the first shard's answer is three intervals old: it counts as none
        assert peers.fresh() == []
        # first seen at 0 s, diagnosed (first judged) at 100 s: still within its hold at 110 s
        decided = peers.apply(store, [undiagnosed_long_ago], {undiagnosed_long_ago.key: PAGES}, 110.0)
        assert decided[undiagnosed_long_ago.key].reason == "waiting"
        decided = peers.apply(store, [undiagnosed_long_ago], {undiagnosed_long_ago.key: PAGES}, 116.0)
        assert decided[undiagnosed_long_ago.key] == PAGES
