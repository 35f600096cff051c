"""The twin's sysfs tree is read by the real sysfs collectors: one thermal zone and one RAPL zone per node,
the package warmer with CPU load, energy that only grows."""

from __future__ import annotations

import time
from pathlib import Path

from aiops.scenarios import parse_scenario_text
from aiops.service.sim_sources import sim_sources
from aiops.sim.sysfs import SimSysfs
from aiops.sim.world import World
from aiops.store import Store

SCENARIO = """\
name: sysfs
seed: 3
duration_s: 600
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 2, nics_per_node: 1}
jobs:
  - {name: llm, nodes: [node0], step_compute_s: 1.0, allreduce_mb: 64}
"""


def test_the_real_collectors_read_the_twins_tree() -> None:
    world = World(parse_scenario_text(SCENARIO, "sysfs.yaml"))
    tree = SimSysfs(world)
    try:
        collectors = [tree.collector(n) for n in range(world.layout.nodes)]
        energy: dict[str, list[int]] = {}
        for _ in range(5):
            world.step(1.0)
            for collector in collectors:
                batches = collector.rows(world.now_ts_s)
                assert "collector_errors" not in batches
                zones = [
                    dict(zip(batches["thermal_zone_samples"].columns, r, strict=True))
                    for r in batches["thermal_zone_samples"].rows
                ]
                caps = [
                    dict(zip(batches["powercap_samples"].columns, r, strict=True))
                    for r in batches["powercap_samples"].rows
                ]
                assert [(z["node"], z["type"], z["trip_critical_c"]) for z in zones] == [
                    (collector.tree.world.layout.node_names[collector.node], "x86_pkg_temp", 100.0)
                ]
                assert 20.0 < zones[0]["temp_c"] < 100.0
                (cap,) = caps
                assert cap["name"] == "package-0" and cap["power_limit_uw"] == 350_000_000 and cap["enabled"]
                energy.setdefault(zones[0]["node"], []).append(cap["energy_uj"])
        for series in energy.values():
            assert series == sorted(series) and series[-1] > series[0]
        busy, idle = (float(world.host_cpu_pct[n]) for n in (0, 1))
        if busy != idle:  # the job's node works its CPUs; the package is warmer and uses more energy
            assert (energy["node0"][-1] > energy["node1"][-1]) == (busy > idle)
    finally:
        tree.close()
    assert not tree.root.exists()


def test_a_twin_agents_tree_lives_beside_its_workspace_and_goes_with_it(tmp_path: Path) -> None:
    """Not under /tmp: an agent killed with SIGKILL leaves its render beside the workspace, and the next start
    removes it (a suite run used to leave ~10 folders in /tmp)."""
    db = tmp_path / "ws.duckdb"
    scenario = parse_scenario_text(SCENARIO, "sysfs.yaml")
    stale = Path(str(db) + ".sim-sysfs") / "left-by-a-killed-agent"
    stale.mkdir(parents=True)
    store = Store(db)
    try:
        sources = sim_sources(store, scenario, None, 1.0)
        assert not stale.exists()  # the killed agent's render removed at start
        for source in sources.sources:
            if source.name.startswith("sysfs-"):
                source.collector.collect(time.time())
        assert (Path(str(db) + ".sim-sysfs") / "node0" / "sys").is_dir()
        sources.close()
        assert not Path(str(db) + ".sim-sysfs").exists()
    finally:
        store.close()
