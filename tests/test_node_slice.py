"""One node agent's slice of the twin's cluster (aiops/service/node_slice.py, `aiops run --sim S --node N`):
`NodeSlice` and `job_homes` on a small inventory; the twin's sources for one node (its collectors only, the
fabric's rows filtered, the inventory it holds); the workspace that records its node and refuses another node's
or the whole cluster's; an unknown node named with the names allowed; and the analyst on a node's slice (no
rack sensors, no DCIM signals) finding the fault on that node."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from aiops.errors import ConfigError, TwinMismatch
from aiops.pipeline import analyze_store
from aiops.scenarios import Scenario, parse_scenario_text
from aiops.service.node_slice import NodeSlice, job_homes
from aiops.service.sim_sources import SlicedCollector, sim_sources
from aiops.service.sources import check_node
from aiops.sim.telemetry import SimFabricCollector
from aiops.sim.twin import Twin
from aiops.sim.world import World
from aiops.store import Store
from collectors.base import RowBuffer
from tests.clirun import run_cli
from tests.service_helpers import service_env

SCENARIO = """\
name: three-nodes
seed: 4
duration_s: 600
cluster: {racks: 3, nodes_per_rack: 1, gpus_per_node: 2, nics_per_node: 1}
jobs:
  - {name: llm, nodes: [node0, node1], step_compute_s: 1.0, allreduce_mb: 64}
  - {name: aux, nodes: [node2], step_compute_s: 0.5, allreduce_mb: 16}
faults:
  - {kind: thermal_throttle, target: node2/gpu1, start_s: 20, severity: 0.9}
"""

RANKS = [
    {"job": "llm", "rank": 1, "gpu": "node1/gpu0", "node": "node1", "nic": "node1/nic0"},
    {"job": "llm", "rank": 0, "gpu": "node0/gpu0", "node": "node0", "nic": "node0/nic0"},
    {"job": "aux", "rank": 0, "gpu": "node2/gpu0", "node": "node2", "nic": "node2/nic0"},
    {"job": "aux", "rank": 1, "gpu": "node2/gpu1", "node": "node2", "nic": "node2/nic0"},
]


def _scenario() -> Scenario:
    return parse_scenario_text(SCENARIO, "three-nodes.yaml")


# -- NodeSlice on a small inventory ---------------------------------------------------------------------------
def test_job_homes_are_the_nodes_of_rank_zero_in_any_row_order() -> None:
    assert job_homes(RANKS) == {"llm": "node0", "aux": "node2"}
    assert job_homes([]) == {}


def test_a_node_owns_its_components_its_home_jobs_the_rules_and_no_facility_rows() -> None:
    one = NodeSlice("node1", "rack1", job_homes(RANKS))
    home = NodeSlice("node0", "rack0", job_homes(RANKS))
    assert one.owns("gpu_samples", {"node": "node1", "gpu": "node1/gpu0"})
    assert not one.owns("gpu_samples", {"node": "node0", "gpu": "node0/gpu0"})
    assert one.owns("log_events", {"host": "node1", "source": "node1/nccl.log"})  # a log line names its host
    assert not one.owns("log_events", {"host": "node2", "source": "node2/nccl.log"})
    for table in ("job_steps", "collective_samples", "jobs"):  # the job's series: its rank 0's node only
        assert home.owns(table, {"job": "llm"}) and not one.owns(table, {"job": "llm"})
        assert not home.owns(table, {"job": "aux"})
    assert one.owns("job_ranks", RANKS[0]) and not one.owns("job_ranks", RANKS[1])  # its own rank only
    assert home.owns("job_ranks", RANKS[0]) and home.owns("job_ranks", RANKS[1])  # the home: all of its job
    assert not home.owns("job_ranks", RANKS[2])
    for table in ("lane_rules", "collector_errors"):
        assert one.owns(table, {}) and home.owns(table, {})
    for table in ("rack_samples", "dcim_signals", "some_new_table"):
        assert not one.owns(table, {"node": "node1", "rack": "rack1", "scope": "rack1"})
    assert one.owns("topology", {"kind": "fleet"})
    assert one.owns("topology", {"kind": "rack", "rack": "rack1"})
    assert not one.owns("topology", {"kind": "rack", "rack": "rack0"})
    assert NodeSlice("node1").owns("topology", {"kind": "rack", "rack": "rack0"})  # rack unknown: kept
    assert one.owns("topology", {"kind": "gpu", "node": "node1"})
    assert not one.owns("topology", {"kind": "nic", "node": "node2"})


def test_rows_keeps_the_batch_order_and_every_row_of_the_rules() -> None:
    part = NodeSlice("node2", "rack2", job_homes(RANKS))
    columns = ("ts_s", "gpu", "node")
    rows = [(1.0, "node0/gpu0", "node0"), (1.0, "node2/gpu1", "node2"), (2.0, "node2/gpu0", "node2")]
    assert part.rows("gpu_samples", columns, rows) == [rows[1], rows[2]]
    rules = [(1.0, "r1", "dport", "4791", "rdma", "cluster")]
    assert (
        part.rows("lane_rules", ("ts_s", "rule_id", "match_kind", "match_value", "lane", "scope"), rules)
        == rules
    )


# -- the twin's sources for one node ----------------------------------------------------------------------------
def test_an_unknown_node_is_a_config_error_naming_the_flag_and_the_names() -> None:
    with pytest.raises(ConfigError) as caught:
        check_node(_scenario(), "node3")
    assert "--node" in str(caught.value) and "node0..node2" in str(caught.value)
    assert check_node(_scenario(), "node2") == "rack2"


def test_the_fabric_seen_by_one_node_is_its_own_rows_and_its_home_jobs() -> None:
    world = World(_scenario())
    fabric = SimFabricCollector(world)
    sliced = SlicedCollector(
        SimFabricCollector(world), NodeSlice("node2", "rack2", {"llm": "node0", "aux": "node2"})
    )
    world.step(1.0)
    whole, mine = fabric.rows(world.now_ts_s), sliced.rows(world.now_ts_s)
    assert "rack_samples" in whole and "rack_samples" not in mine and "dcim_signals" not in mine
    for table in ("nic_samples", "flow_class_samples", "host_samples", "netdev_samples", "ib_port_samples"):
        at = whole[table].columns.index("node")
        assert {r[at] for r in whole[table].rows} == {"node0", "node1", "node2"}, table
        assert {r[at] for r in mine[table].rows} == {"node2"}, table
    for table in ("collective_samples", "job_steps"):
        if table in mine:
            at = mine[table].columns.index("job")
            assert {r[at] for r in mine[table].rows} <= {"aux"}, table
    assert mine["lane_rules"].rows == whole["lane_rules"].rows


def test_a_node_workspace_records_its_node_and_refuses_another_slice(tmp_path: Path) -> None:
    scenario = _scenario()
    db = tmp_path / "node1.duckdb"
    with Store(db) as store:
        sources = sim_sources(store, scenario, None, 10.0, node="node1")
        assert [s.name for s in sources.sources] == ["nvml-node1", "sim-fabric", "sysfs-node1"]
        sources.close()
        assert store.scalar("SELECT node FROM sim_runs") == "node1"
        topology = {r["component"] for r in store.query("SELECT component FROM topology")}
        assert topology == {"fleet", "rack1", "node1", "node1/gpu0", "node1/gpu1", "node1/nic0"}
        ranks = store.query("SELECT job, rank, node FROM job_ranks ORDER BY rank")
        assert ranks == [{"job": "llm", "rank": r, "node": "node1"} for r in (2, 3)]  # its own ranks only
        assert store.scalar("SELECT count(*) FROM jobs") == 0  # llm's home is node0
        twin = Twin.load(store)  # another process's twin of this workspace: the slice's topology checks
        assert twin is not None and twin.node == "node1"
        sim_sources(store, scenario, None, 10.0, node="node1").close()  # a restart resumes the same slice
        for other, says in (("node2", "node1's slice"), (None, "node1's slice")):
            with pytest.raises(TwinMismatch, match=says):
                sim_sources(store, scenario, None, 10.0, node=other)
    with Store(tmp_path / "whole.duckdb") as store:
        sim_sources(store, scenario, None, 10.0).close()
        assert store.scalar("SELECT node FROM sim_runs") is None
        with pytest.raises(TwinMismatch, match="the whole cluster"):
            sim_sources(store, scenario, None, 10.0, node="node0")


def test_a_shared_epoch_catches_up_keeps_pace_and_is_kept(tmp_path: Path) -> None:
    scenario = _scenario()
    epoch = time.time() - 3.0
    with Store(tmp_path / "a.duckdb") as store:
        first = sim_sources(store, scenario, None, 10.0, node="node0", epoch_ts_s=epoch)
        caught_up_by_s = (time.time() - epoch) * 10.0  # the simulated seconds due when it returned
        first.close()
        assert first.twin is not None
        world = first.twin.world
        assert world.epoch_ts_s == epoch
        # 3 s late at 10x: 30 simulated seconds caught up (a slow start: more, never past what was due when it
        # returned, a tick's second aside), recorded with the first flush
        assert 30 <= world.elapsed_s <= caught_up_by_s + 1 and first.stepped_s == world.elapsed_s
        first.twin.log_steps(store, first.stepped_s)
        time.sleep(0.3)
        # a restart rebuilds the twin where it was and catches up the 3 simulated seconds since
        again = sim_sources(store, scenario, None, 10.0, node="node0", epoch_ts_s=epoch)
        again.close()
        assert again.twin is not None and again.twin.world.elapsed_s >= world.elapsed_s + 2
        assert again.stepped_s == again.twin.world.elapsed_s - world.elapsed_s
        # simulated second e is due at epoch + e / speed: none to wait while behind, the rest when ahead
        due_s = epoch + (again.twin.world.elapsed_s + 1) / 10.0 - time.time()
        assert again.pace is not None and abs(again.wait_s(0.0) - max(0.0, due_s)) < 0.05
        assert again.wait_s(0.0) <= 0.1
        for _ in range(20):  # two wall seconds ahead of the shared clock: never more than a tick's wait
            again.tick()
        assert 1.5 <= again.pace() <= 2.1 and again.wait_s(0.0) == 0.1
        with pytest.raises(TwinMismatch, match="epoch"):
            sim_sources(store, scenario, None, 10.0, node="node0", epoch_ts_s=epoch - 1)
    with Store(tmp_path / "b.duckdb") as store:
        with pytest.raises(ConfigError, match="future"):
            sim_sources(store, scenario, None, 10.0, node="node0", epoch_ts_s=time.time() + 60)
        # at most a simulated day to step at start, not hours of start-up
        with pytest.raises(ConfigError, match="catch up"):
            sim_sources(store, scenario, None, 10.0, node="node0", epoch_ts_s=time.time() - 9000)
        assert store.scalar("SELECT count(*) FROM sim_runs") == 0  # refused before anything was written


def test_the_cli_names_an_unknown_node_and_an_epoch_without_a_twin(tmp_path: Path) -> None:
    path = tmp_path / "three.yaml"
    path.write_text(SCENARIO)
    db = str(tmp_path / "x.duckdb")
    env = service_env(tmp_path)
    done = run_cli("run", "--sim", str(path), "--node", "node7", "--db", db, env=env)
    assert done.returncode == 2 and "--node" in done.stderr and "node0..node2" in done.stderr, done
    done = run_cli("run", "--epoch-ts-s", "1", "--db", db, env=env)
    assert done.returncode == 2 and "--epoch-ts-s" in done.stderr and "--sim" in done.stderr, done
    done = run_cli("run", "--sim", str(path), "--epoch-ts-s", "nan", "--db", db, env=env)
    assert done.returncode == 2 and "--epoch-ts-s" in done.stderr, done
    assert not Path(db).exists()  # refused before any workspace was made


def test_the_analyst_on_a_node_slice_finds_the_fault_without_rack_sensors_or_dcim(tmp_path: Path) -> None:
    """The slice has no rack_samples nor dcim_signals: detection and diagnosis run on it and name the fault."""
    scenario = _scenario()
    with Store(tmp_path / "node2.duckdb") as store:
        sources = sim_sources(store, scenario, None, 1000.0, node="node2")
        buffer = RowBuffer()
        try:
            for _ in range(150):
                sources.tick()
                for source in sources.due():
                    buffer.add_tables(source.collector.collect(sources.clock()))
        finally:
            sources.close()
        store.ingest_many(buffer.drain())
        assert store.scalar("SELECT count(*) FROM rack_samples") == 0
        assert store.scalar("SELECT count(*) FROM dcim_signals") == 0
        assert {r["node"] for r in store.query("SELECT DISTINCT node FROM gpu_samples")} == {"node2"}
        result = analyze_store(store)
    tops = [(d.hypotheses[0].root_cause, d.hypotheses[0].component) for d in result.diagnoses if d.hypotheses]
    assert tops and tops[0][0] == "thermal_throttle" and tops[0][1].startswith("node2"), tops
