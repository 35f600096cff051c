"""The fleet view's flow rows (aiops/sim/fleet_view.py) are the sums of the twin's per-second flow rows
(aiops/sim/fabric.py `FabricOut.flows`) over each scrape interval, key by key, also when a NIC's lanes are
enforced in the middle of an interval (its rows move from `fifo` to its lanes): the view sums arrays and folds
them under the rows' keys instead of reading every row every second."""

from __future__ import annotations

from collections import defaultdict

from aiops.scenarios import ClusterSpec, JobSpec, Scenario
from aiops.sim.fleet_view import FleetView
from aiops.sim.world import World

SCRAPE_S = 5


def test_the_views_flow_rows_are_the_sums_of_the_twins_rows_when_lanes_change_mid_interval() -> None:
    scenario = Scenario(
        name="flows",
        seed=3,
        duration_s=60,
        cluster=ClusterSpec(racks=1, nodes_per_rack=2),
        jobs=[JobSpec(name="train", nodes=["node0", "node1"])],
    )
    world = World(scenario)
    view = FleetView(world, float(SCRAPE_S))
    nic = world.layout.nic_names[0]
    lanes_seen: set[str] = set()
    for second in range(1, 4 * SCRAPE_S + 1):
        if second == SCRAPE_S + 2:  # in the middle of the second interval
            world.set_lanes_enforced(nic, not bool(world.lanes_enforced[0]))
        world.step(1.0)
        view.observe()
        if second % SCRAPE_S == 1:
            expected: dict[tuple[str, str, str | None, str], int] = defaultdict(int)
        for i, traffic_class, rule_id, lane, tx in world.out.flows:
            expected[(world.layout.nic_names[i], traffic_class, rule_id, lane)] += int(tx)
        if second % SCRAPE_S:
            continue
        table = view.collect(world.now_ts_s)["flow_class_samples"].to_pylist()
        got = {(r["nic"], r["traffic_class"], r["rule_id"], r["lane"]): r["tx_bytes"] for r in table}
        moved = {key: n for key, n in expected.items() if key[0] == nic}
        lanes_seen |= {key[3] for key in moved}
        assert {key: got.get(key) for key in expected} == dict(expected), f"interval ending at {second} s"
        # a key seen before and not since is a row of zeros (a counter series keeps its row)
        assert all(n == 0 for key, n in got.items() if key not in expected)
    assert "fifo" in lanes_seen and len(lanes_seen) > 1  # the NIC's rows did move from one key to others
