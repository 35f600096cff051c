"""One view across fleet shards (aiops/fleet/view.py): shards' answers merged as people see them. A condition two
shards both see (a facility cap over the site) is one incident, named once with the id of the shard that opened it
first, and its plan is that shard's; one shard's own incidents are never merged; a shard that does not answer is
named, the others still shown."""

from __future__ import annotations

from typing import Any

from aiops.fleet.view import ShardAnswer, merge, render_html


def incident(incident_id: str, cause: str, component: str, opened: float, **more: Any) -> dict[str, Any]:
    return {
        "incident_id": incident_id,
        "opened_ts_s": opened,
        "resolved_ts_s": more.pop("resolved_ts_s", None),
        "status": more.pop("status", "open"),
        "severity": "critical",
        "top_hypothesis": {"root_cause": cause, "component": component, "confidence": 0.9},
        "paging": {"pages": True, "reason": "impact"},
        **more,
    }


def plan(proposal_id: str, incident_id: str) -> dict[str, Any]:
    return {
        "proposal_id": proposal_id,
        "incident_id": incident_id,
        "kind": "set_power_limit",
        "status": "pending",
    }


def shards() -> list[ShardAnswer]:
    cap_a = incident("INC-fleet-a-0002", "facility_power_cap", "fleet", 1000.0)
    cap_b = incident("INC-fleet-b-0001", "facility_power_cap", "fleet", 985.0)
    hot_a = incident("INC-fleet-a-0001", "thermal_throttle", "gpu-0003/gpu1", 900.0)
    hot_b = incident("INC-fleet-b-0002", "thermal_throttle", "gpu-0017/gpu1", 1100.0)
    return [
        ShardAnswer("a", "http://a", [hot_a, cap_a], [plan("p-a1", "INC-fleet-a-0002"), plan("p-a0", "")]),
        ShardAnswer("b", "http://b", [cap_b, hot_b], [plan("p-b1", "INC-fleet-b-0001")]),
    ]


def test_a_condition_both_shards_see_is_one_incident_with_the_first_shards_id() -> None:
    view = merge(shards())
    caps = [i for i in view["incidents"] if i["top_hypothesis"]["root_cause"] == "facility_power_cap"]
    assert len(caps) == 1
    assert caps[0]["incident_id"] == "INC-fleet-b-0001"  # shard b opened it first
    assert [(s["shard"], s["incident_id"]) for s in caps[0]["seen_by"]] == [
        ("b", "INC-fleet-b-0001"),
        ("a", "INC-fleet-a-0002"),
    ]
    assert [p["shard"] for p in caps[0]["duplicate_pages"]] == ["a"]
    # its plan once: shard b's; shard a's plan for the same condition is not shown again
    assert sorted(p["proposal_id"] for p in view["proposals"]) == ["p-a0", "p-b1"]
    # different GPUs, each found by one shard: two incidents
    assert sorted(i["incident_id"] for i in view["incidents"]) == [
        "INC-fleet-a-0001",
        "INC-fleet-b-0001",
        "INC-fleet-b-0002",
    ]


def test_only_overlapping_times_of_different_shards_merge() -> None:
    earlier = incident(
        "INC-fleet-a-0001", "facility_power_cap", "fleet", 100.0, resolved_ts_s=200.0, status="resolved"
    )
    later = incident("INC-fleet-b-0001", "facility_power_cap", "fleet", 500.0)
    again = incident("INC-fleet-a-0003", "facility_power_cap", "fleet", 520.0)
    view = merge([ShardAnswer("a", "http://a", [earlier, again]), ShardAnswer("b", "http://b", [later])])
    assert sorted((i["incident_id"], len(i["seen_by"])) for i in view["incidents"]) == [
        ("INC-fleet-a-0001", 1),  # over before the other opened: its own
        ("INC-fleet-b-0001", 2),  # the later cap, seen by both
    ]


def test_a_shard_that_does_not_answer_is_named_and_the_others_shown() -> None:
    down = ShardAnswer("c", "http://c", error="http://c/api/incidents: connection refused")
    view = merge([*shards(), down])
    assert [(s["shard"], s["ok"]) for s in view["shards"]] == [("a", True), ("b", True), ("c", False)]
    assert len(view["incidents"]) == 3
    page = render_html(view)
    assert "connection refused" in page


def test_the_page_escapes_what_shards_say() -> None:
    hostile = incident("INC-fleet-a-0001", "thermal_throttle", "<script>alert(1)</script>", 1.0)
    hostile_id = incident('INC-1"><script>x</script>', "thermal_throttle", "node0/gpu1", 2.0)
    page = render_html(merge([ShardAnswer("a", "http://a", [hostile, hostile_id])]))
    assert "<script>" not in page and "&lt;script&gt;" in page
    assert 'href="http://a/incidents/INC-1%22%3E%3Cscript%3Ex%3C%2Fscript%3E"' in page


def test_each_id_links_to_its_shards_console() -> None:
    page = render_html(merge(shards()))
    assert '<a href="http://b/incidents/INC-fleet-b-0001">b: INC-fleet-b-0001</a>' in page
    assert '<a href="http://a/incidents/INC-fleet-a-0002">a: INC-fleet-a-0002</a>' in page


def test_the_served_view_asks_what_the_shards_ask() -> None:
    from aiops.cli.fleet_view import allowed

    assert allowed("127.0.0.1", "", None) and allowed("::1", "", "s3cret")
    assert not allowed("198.18.0.7", "", None)  # no token configured: loopback only
    assert not allowed("198.18.0.7", "Bearer wrong", "s3cret")
    assert allowed("198.18.0.7", "Bearer s3cret", "s3cret")


def test_a_plan_for_an_incident_not_listed_is_still_shown_and_bad_times_do_not_stop_the_view() -> None:
    odd = incident("INC-fleet-a-0009", "thermal_throttle", "node0/gpu1", 1.0)
    odd["opened_ts_s"], odd["paging"] = "not a time", "not a mapping"
    twin = incident("INC-fleet-b-0009", "thermal_throttle", "node0/gpu1", 2.0)
    view = merge(
        [
            ShardAnswer("a", "http://a", [odd], [plan("p-old", "INC-fleet-a-0001")]),
            ShardAnswer("b", "http://b", [twin]),
        ]
    )
    assert [p["proposal_id"] for p in view["proposals"]] == ["p-old"]  # its incident resolved out of the list
    assert [len(i["seen_by"]) for i in view["incidents"]] == [2]
