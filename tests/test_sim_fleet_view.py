"""aiops/sim/fleet_view.py against the real path it stands for: the same twin, read every second by each node's
collectors into the node agents' exporters (MetricsCache, as `aiops run --sim S --node N` feeds it), their exports
imported at every 15 s scrape into a real VictoriaMetrics and read back by the fleet's own ingest and pivots; and
read by FleetView. The rows the fleet analyst gets must be the same: gauges, per-sample counts (m017), counters'
increases, job steps, NICs, HCAs and hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.fleet.ingest import fetch_interval
from aiops.scenarios import ChurnSpec, ClusterSpec, FaultSpec, JobSpec, Scenario
from aiops.service.metrics import MetricsCache
from aiops.service.node_slice import NodeSlice, job_homes
from aiops.sim.fleet_view import FleetView
from aiops.sim.telemetry import SimFabricCollector, inventory
from aiops.sim.world import World
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store
from bench import victoria
from bench.oncall_cluster import SharedRows, exposition
from collectors.nvml import NvmlCollector
from tests.service_helpers import require_binary

STEP_S = 15.0
SCENARIO = Scenario(
    name="view",
    seed=3,
    duration_s=600,
    cluster=ClusterSpec(racks=1, nodes_per_rack=3),
    jobs=[JobSpec(name="llm", nodes=["node0", "node1"], checkpoint_every_s=120, checkpoint_gb=20)],
    faults=[
        FaultSpec(kind="thermal_throttle", target="node1/gpu2", start_s=30, severity=0.9),
        FaultSpec(kind="nic_link_flap", target="node0/nic1", start_s=60, duration_s=120, severity=0.7),
    ],
    churn=ChurnSpec(rate=10.0, pcie_nodes=["node2"], unused_ports=["node0"]),  # a user error at 201 s
)


def _both(tmp_path: Path, seconds: int) -> tuple[Store, Store, float, float]:
    world = World(SCENARIO)
    lay = world.layout
    ranks = inventory(world)["job_ranks"].to_pylist()
    topology = inventory(world)["topology"].to_pylist()
    homes = job_homes(ranks)
    fabric = SharedRows(SimFabricCollector(world), homes, list(lay.node_names))
    caches, nvml = {}, {}
    for n, node in enumerate(lay.node_names):
        part = NodeSlice(node, "rack0", homes)
        caches[node] = MetricsCache(node)
        caches[node].inventory(
            [r for r in topology if part.owns("topology", r)], [r for r in ranks if part.owns("job_ranks", r)]
        )
        nvml[node] = NvmlCollector(world.nvml(n), node)
    view = FleetView(world, STEP_S)
    viewed = Store(tmp_path / "view.duckdb")
    scrapes: list[str] = []
    first_s = last_s = 0.0
    for _ in range(seconds):
        world.step(1.0)
        view.observe()
        for node, cache in caches.items():
            batches = {**nvml[node].rows(world.now_ts_s), **fabric.part(node, world.now_ts_s)}
            for table, batch in batches.items():
                cache.observe(table, batch.columns, batch.rows)
        if round(world.elapsed_s) % round(STEP_S) == 0:
            first_s = first_s or world.now_ts_s
            last_s = world.now_ts_s
            scrapes.append("".join(exposition(c.collect(), world.now_ts_s) for c in caches.values()))
            viewed.ingest_many(view.collect(world.now_ts_s))
    real = Store(tmp_path / "real.duckdb")
    with victoria.serving(tmp_path) as (url, _proc):
        victoria.import_text(url, "".join(scrapes).encode())
        victoria.force_flush(url)
        fetch_interval(
            real, PrometheusClient(url, timeout_s=60.0), start_s=first_s, end_s=last_s, step_s=STEP_S
        )
    return real, viewed, first_s + STEP_S, last_s


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> tuple[Store, Store, float, float]:
    require_binary("victoria-metrics")
    return _both(tmp_path_factory.mktemp("view"), 300)


def _rows(store: Store, sql: str, since_s: float) -> list[tuple[object, ...]]:
    return [tuple(r) for r in store.conn.execute(sql, [since_s]).fetchall()]


CHECKS = {
    "gpu_samples": "SELECT ts_s, gpu, temp_c, power_w, power_limit_w, sm_clock_mhz, util_pct, clocks_event_reasons, "
    "samples, throttled_samples, idle_samples, ecc_sbe_total, nvlink_crc_total, pcie_link_width, uuid "
    "FROM gpu_samples WHERE ts_s > ? ORDER BY ts_s, gpu",
    # a step's time of day comes back from VictoriaMetrics to the ms (it keeps 12 significant digits)
    # (the slowest rank of an interval with a tie between two reports is either's: test_the_run_shows... below)
    "job_steps": "SELECT round(ts_s, 3), job, step, round(step_time_s, 6), ranks FROM job_steps WHERE ts_s > ? "
    "ORDER BY ts_s",
    "nic_samples": "SELECT ts_s, nic, lane, interval_s, tx_bytes, drops, ce_marks, retransmits, carrier_changes, "
    "round(queue_delay_ms, 6), link_up FROM nic_samples WHERE ts_s > ? ORDER BY ts_s, nic, lane",
    "flow_class_samples": "SELECT ts_s, nic, traffic_class, rule_id, lane, tx_bytes FROM flow_class_samples "
    "WHERE ts_s > ? ORDER BY ALL",
    "collective_samples": "SELECT ts_s, job, op, scope, count, bytes, round(latency_p50_ms, 6), timeouts "
    "FROM collective_samples WHERE ts_s > ? ORDER BY ALL",
    # one row per Xid and scrape: the store keeps each key once (the fleet's service ingests the pivot's rows so)
    "gpu_events": "SELECT DISTINCT ts_s, gpu, xid FROM gpu_events WHERE ts_s > ? ORDER BY ALL",
    # (a ratio or seconds stored as a decimal and scaled back can differ in the last bit: 6.1000000000000005)
    "host_samples": "SELECT ts_s, node, round(cpu_util_pct, 6), round(loader_wait_ms, 6), round(mem_used_pct, 6) "
    "FROM host_samples WHERE ts_s > ? ORDER BY ALL",
    "netdev_samples": "SELECT ts_s, node, dev, nic, rx_bytes, tx_bytes, carrier_changes, oper_up, rx_pause_frames "
    "FROM netdev_samples WHERE ts_s > ? ORDER BY ALL",
    "ib_port_samples": "SELECT ts_s, node, device, port, nic, link_downed, port_xmit_data, np_cnp_sent "
    "FROM ib_port_samples WHERE ts_s > ? ORDER BY ALL",
}


@pytest.mark.parametrize("table", sorted(CHECKS))
def test_the_fleet_view_is_what_the_fleet_reads_through_prometheus(
    stores: tuple[Store, Store, float, float], table: str
) -> None:
    real, viewed, since_s, _last_s = stores
    want = _rows(real, CHECKS[table], since_s)
    got = _rows(viewed, CHECKS[table], since_s)
    assert want, f"the real path wrote no {table} rows"
    assert got == want


def test_the_run_shows_what_the_comparison_needs(stores: tuple[Store, Store, float, float]) -> None:
    """The comparison covers throttled and idle samples, a flapping NIC, Xids, and the PCIe node's absent NVLink."""
    real, viewed, since_s, _ = stores
    mode = "SELECT mode(slowest_gpu) FROM job_steps WHERE ts_s > ?"
    assert _rows(viewed, mode, since_s) == _rows(real, mode, since_s) == [("node1/gpu2",)]
    assert viewed.scalar("SELECT sum(throttled_samples) FROM gpu_samples WHERE gpu = 'node1/gpu2'") > 30
    assert viewed.scalar("SELECT sum(idle_samples) FROM gpu_samples WHERE node = 'node2'") > 100
    assert viewed.scalar("SELECT sum(carrier_changes) FROM nic_samples WHERE nic = 'node0/nic1'") >= 2
    assert (
        viewed.scalar("SELECT count(*) FROM gpu_samples WHERE node = 'node2' AND nvlink_crc_total IS NULL")
        > 0
    )
    assert viewed.scalar("SELECT count(*) FROM gpu_events") > 0
