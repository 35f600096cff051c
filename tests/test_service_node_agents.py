"""The twin as a cluster of node agents, end to end (issue 24 item 5): three `aiops run --sim S --node nodeK`
processes of one faulted scenario, sharing the twin's epoch, each on its own loopback port, and a real Prometheus
(started beside them, its targets written to a file it watches once they listen) scraping all three every second
with `honor_labels: true`. Through Prometheus' HTTP API: every GPU series comes from exactly one agent, labelled
with that agent's node and rack; the job series come from each job's home (the node of its rank 0) only; the
faulted GPU's node shows the fault in its own series (thermal clocks-event samples, the hottest GPU, the open
incident) and the others do not; no flush step failed on a slice without rack sensors or DCIM signals."""

from __future__ import annotations

import time
from pathlib import Path

from aiops.config import FleetConfig
from aiops.fleet.source import FleetCollector, FleetSetup
from aiops.store import Store, Workspace
from tests.agent_cluster import agents, labels, prometheus, query, scrape
from tests.service_helpers import get_json, wait_for

# node k stands in rack k; llm runs on node0 and node1 (home node0), aux on node2 (home node2)
SCENARIO = """\
name: three-agents
seed: 4
duration_s: 3600
cluster: {racks: 3, nodes_per_rack: 1, gpus_per_node: 2, nics_per_node: 1}
jobs:
  - {name: llm, nodes: [node0, node1], step_compute_s: 1.0, allreduce_mb: 64}
  - {name: aux, nodes: [node2], step_compute_s: 0.5, allreduce_mb: 16}
faults:
  - {kind: thermal_throttle, target: node2/gpu1, start_s: 30, severity: 0.9}
"""
NODES = ("node0", "node1", "node2")
SPEED = "20"


def test_three_node_agents_scraped_by_one_prometheus_each_export_their_own_slice(tmp_path: Path) -> None:
    scenario = tmp_path / "three-agents.yaml"
    scenario.write_text(SCENARIO)
    epoch_ts_s = time.time()
    with (
        prometheus(tmp_path) as (prom, targets),
        agents(tmp_path, scenario, epoch_ts_s, NODES, SPEED) as ports,
    ):
        scrape(prom, targets, ports)
        node_of = {f"127.0.0.1:{port}": node for node, port in ports.items()}
        wait_for(
            lambda: len(query(prom, 'count_over_time(up{job="aiops"}[1m]) >= 2')) == 3, 30, "2 scrapes each"
        )

        # every GPU series from exactly one agent: the one of the GPU's node, in its rack
        temps = labels(prom, "aiops_gpu_temperature_celsius")
        assert sorted(t["gpu"] for t in temps) == [f"{n}/gpu{g}" for n in NODES for g in (0, 1)]
        for t in temps:
            assert t["node"] == node_of[t["instance"]] and t["gpu"].startswith(t["node"] + "/"), t
        infos = labels(prom, "aiops_gpu_info")
        assert len(infos) == 6
        for i in infos:
            node = node_of[i["instance"]]
            assert (i["node"], i["rack"]) == (node, "rack" + node.removeprefix("node")), i
            assert i["gpu"] == f"{node}/gpu{i['index']}" and i["uuid"].startswith("GPU-"), i
        assert {(i["node"], i["rack"]) for i in labels(prom, "aiops_node_info")} == {
            (n, "rack" + n.removeprefix("node")) for n in NODES
        }
        for family in ("aiops_nic_link_up", "aiops_host_loader_wait_seconds", "aiops_thermal_zone_celsius"):
            series = labels(prom, family)
            assert {s["node"] for s in series} == set(NODES), family
            assert all(s["node"] == node_of[s["instance"]] for s in series), family

        # job series: from each job's home only (llm: node0, aux: node2), never from node1
        def homes() -> set[tuple[str, str, str]]:
            steps = labels(prom, "aiops_job_last_step_timestamp_seconds")
            return {(s["job"], s["node"], node_of[s["instance"]]) for s in steps}

        wait_for(lambda: homes() == {("llm", "node0", "node0"), ("aux", "node2", "node2")}, 20, "job series")
        collectives = labels(prom, "aiops_collective_operations_total")
        assert collectives and {(c["job"], node_of[c["instance"]]) for c in collectives} <= {
            ("llm", "node0"),
            ("aux", "node2"),
        }
        ranks = labels(prom, "aiops_job_rank_info")
        assert {(r["job"], r["rank"], node_of[r["instance"]]) for r in ranks} == {
            *{("llm", str(k), "node0") for k in range(4)},  # the home knows every rank of its job
            ("llm", "2", "node1"),  # node1 knows its own ranks
            ("llm", "3", "node1"),
            ("aux", "0", "node2"),
            ("aux", "1", "node2"),
        }

        # the fault (node2/gpu1 from 30 simulated s): node2's own series show it, nobody else's
        thermal = 'aiops_gpu_clocks_event_samples_total{reason="SwThermalSlowdown"} > 0'
        found = wait_for(lambda: labels(prom, thermal), 30, "node2/gpu1 thermally throttled")
        assert [(f["gpu"], f["node"], node_of[f["instance"]]) for f in found] == [
            ("node2/gpu1", "node2", "node2")
        ]
        hottest = labels(prom, "topk(1, aiops_gpu_temperature_celsius)")
        assert [(h["gpu"], node_of[h["instance"]]) for h in hottest] == [("node2/gpu1", "node2")]
        incident = wait_for(lambda: labels(prom, "aiops_incident_open == 1"), 30, "the open incident")
        assert {node_of[i["instance"]] for i in incident} == {"node2"}, incident
        assert incident[0]["root_cause"] == "thermal_throttle" and incident[0]["component"].startswith(
            "node2"
        )
        assert not query(prom, "aiops_loop_errors_total > 0")  # no flush step failed on a slice
        # each agent's own API: the incident is node2's alone
        api = {n: get_json(f"http://127.0.0.1:{p}/api/incidents")["incidents"] for n, p in ports.items()}
        assert not api["node0"] and not api["node1"] and api["node2"], api

        # the fleet reading these scraped series (each with its `instance`): the finer grid's per-rank timing and
        # NIC rows are kept (their reads stage the agents' aiops_node_info, which says who speaks for which node)
        config = FleetConfig(prometheus=f"http://127.0.0.1:{prom}", step_s=1.0, delay_s=1.0, lookback_s=10.0)
        with Store(tmp_path / "fleet.duckdb") as fleet_store:
            collector = FleetCollector(fleet_store, FleetSetup(config.model_copy(update={"rank_reads": 2})))
            # up to five reads a second apart until each kind of row came (under the suite's load one read of the
            # 10 s look-back once held rank and NIC rows and no GPU row: fresh63 of 2026-12-07); none refuses any
            wanted, tables, refused = {"rank_timing_samples", "nic_samples", "gpu_samples"}, set[str](), []
            try:
                for _ in range(5):
                    tables |= set(collector.collect(collector.horizon_ts_s if tables else 0))
                    refused += collector.last.nodes.refusals.examples if collector.last else ["no read"]
                    if wanted <= tables:
                        break
                    time.sleep(1.0)
            finally:
                collector.close()
        assert not refused, refused
        assert wanted <= tables, sorted(tables)
    for node in NODES:
        with Workspace(tmp_path / f"{node}.duckdb").read() as store:
            assert store.scalar("SELECT node FROM sim_runs") == node
            assert store.scalar("SELECT epoch_ts_s FROM sim_runs") == epoch_ts_s
            assert store.scalar("SELECT count(*) FROM rack_samples") == 0
            assert store.scalar("SELECT count(DISTINCT node) FROM gpu_samples") == 1
