"""The false-alarm run's shards (bench/oncall_quiet_shards.py): independent fleets whose node-days, pages and
false actionable proposals add up, the rates taken over the sum."""

from __future__ import annotations

from bench.oncall_quiet_shards import combine


def shard(node_days: float, pages: int, actionable: int, cpu_s: float) -> dict[str, object]:
    return {
        "node_days": node_days,
        "pages": pages,
        "incidents": pages + 3,
        "proposals": actionable,
        "false_actionable": actionable,
        "cpu_s": cpu_s,
        "wall_s": 100.0,
        "incidents_by_top_cause": {"application_error": 2},
        "churn_events": {"evaluation": 5},
    }


def test_the_shards_figures_add_up() -> None:
    total = combine([shard(300.0, 1, 0, 600.0), shard(200.0, 0, 0, 400.0)])
    assert total["node_days"] == 500.0 and total["pages"] == 1
    assert total["false_pages_per_1000_node_days"] == 2.0
    assert total["false_pages_upper_95_per_1000_node_days"] is None  # a page was seen: the rate, not a bound
    assert total["false_actionable_upper_95_per_1000_node_days"] == 6.0  # none in 500: below 3 / 500
    assert total["cpu_s_per_node_day"] == 2.0 and total["wall_s"] == 100.0
    assert total["incidents_by_top_cause"] == {"application_error": 4} and len(total["shards"]) == 2
