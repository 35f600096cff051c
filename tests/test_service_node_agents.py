"""The twin as a cluster of node agents, end to end (issue 24 item 5): three `aiops run --sim S --node nodeK`
processes of one faulted scenario, sharing the twin's epoch, each on its own loopback port, and a real Prometheus
(started beside them, its targets written to a file it watches once they listen) scraping all three every second
with `honor_labels: true`. Through Prometheus' HTTP API: every GPU series comes from exactly one agent, labelled
with that agent's node and rack; the job series come from each job's home (the node of its rank 0) only; the
faulted GPU's node shows the fault in its own series (thermal clocks-event samples, the hottest GPU, the open
incident) and the others do not; no flush step failed on a slice without rack sensors or DCIM signals."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from aiops.store import Workspace
from tests.service_helpers import (
    aiops_cmd,
    free_port,
    get,
    get_json,
    listening_ports,
    require_binary,
    service_env,
    wait_for,
)

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


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


@contextmanager
def _agents(tmp_path: Path, scenario: Path, epoch_ts_s: float) -> Iterator[dict[str, int]]:
    """One agent per node, started together (not one after another's readiness), each on a port the kernel
    chose; node -> port once all are ready; all stopped by PID after."""
    procs: dict[str, subprocess.Popen[bytes]] = {}
    logs = []
    try:
        for node in NODES:
            log = (tmp_path / f"{node}.log").open("ab")
            logs.append(log)
            procs[node] = subprocess.Popen(
                aiops_cmd(
                    "run",
                    "--sim",
                    str(scenario),
                    "--node",
                    node,
                    "--speed",
                    SPEED,
                    "--epoch-ts-s",
                    repr(epoch_ts_s),
                    "--db",
                    str(tmp_path / f"{node}.duckdb"),
                    "--listen",
                    "127.0.0.1:0",
                ),
                stdout=log,
                stderr=log,
                env=service_env(tmp_path),
            )
        ports: dict[str, int] = {}
        for node, proc in procs.items():

            def bound(proc: subprocess.Popen[bytes] = proc) -> int | None:
                if proc.poll() is not None:
                    return -1
                found = listening_ports(proc.pid)
                return min(found) if found else None

            port = int(wait_for(bound, 60, f"{node}'s agent to listen", interval_s=0.1))
            assert port > 0, (tmp_path / f"{node}.log").read_text()[-3000:]
            ports[node] = port
        for node, port in ports.items():
            wait_for(
                lambda port=port: get(f"http://127.0.0.1:{port}/readyz", 2.0)[0] == 200, 60, f"{node} ready"
            )
        yield ports
    finally:
        for proc in procs.values():
            _stop(proc)
        for log in logs:
            log.close()


@contextmanager
def _prometheus(tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """A real Prometheus scraping every second the targets of a file (`file_sd_configs`, watched: the test
    writes the agents' ports there once they listen), started while the agents start."""
    binary = require_binary("prometheus")
    port = free_port()
    targets = tmp_path / "targets.json"
    targets.write_text("[]")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        f"  - job_name: aiops\n    honor_labels: true\n    file_sd_configs: [{{files: ['{targets}']}}]\n"
    )
    log = (tmp_path / "prometheus.log").open("ab")
    proc = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={tmp_path / 'tsdb'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=log,
    )
    try:
        yield port, targets
    finally:
        _stop(proc)
        log.close()


def _scrape(prom: int, targets: Path, ports: dict[str, int]) -> None:
    wait_for(lambda: get(f"http://127.0.0.1:{prom}/-/ready", 2)[0] == 200, 60, "prometheus ready")
    tmp = targets.with_suffix(".tmp")
    tmp.write_text(json.dumps([{"targets": [f"127.0.0.1:{p}" for p in ports.values()]}]))
    tmp.rename(targets)  # whole, at once: Prometheus reads the file when it changes


def _query(port: int, promql: str) -> list[dict[str, dict[str, str] | list[object]]]:
    body = get_json(f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def _labels(port: int, promql: str) -> list[dict[str, str]]:
    return [dict(r["metric"]) for r in _query(port, promql)]  # type: ignore[arg-type]


def test_three_node_agents_scraped_by_one_prometheus_each_export_their_own_slice(tmp_path: Path) -> None:
    scenario = tmp_path / "three-agents.yaml"
    scenario.write_text(SCENARIO)
    epoch_ts_s = time.time()
    with _prometheus(tmp_path) as (prom, targets), _agents(tmp_path, scenario, epoch_ts_s) as ports:
        _scrape(prom, targets, ports)
        node_of = {f"127.0.0.1:{port}": node for node, port in ports.items()}
        wait_for(
            lambda: len(_query(prom, 'count_over_time(up{job="aiops"}[1m]) >= 2')) == 3, 30, "2 scrapes each"
        )

        # every GPU series from exactly one agent: the one of the GPU's node, in its rack
        temps = _labels(prom, "aiops_gpu_temperature_celsius")
        assert sorted(t["gpu"] for t in temps) == [f"{n}/gpu{g}" for n in NODES for g in (0, 1)]
        for t in temps:
            assert t["node"] == node_of[t["instance"]] and t["gpu"].startswith(t["node"] + "/"), t
        infos = _labels(prom, "aiops_gpu_info")
        assert len(infos) == 6
        for i in infos:
            node = node_of[i["instance"]]
            assert (i["node"], i["rack"]) == (node, "rack" + node.removeprefix("node")), i
            assert i["gpu"] == f"{node}/gpu{i['index']}" and i["uuid"].startswith("GPU-"), i
        assert {(i["node"], i["rack"]) for i in _labels(prom, "aiops_node_info")} == {
            (n, "rack" + n.removeprefix("node")) for n in NODES
        }
        for family in ("aiops_nic_link_up", "aiops_host_loader_wait_seconds", "aiops_thermal_zone_celsius"):
            series = _labels(prom, family)
            assert {s["node"] for s in series} == set(NODES), family
            assert all(s["node"] == node_of[s["instance"]] for s in series), family

        # job series: from each job's home only (llm: node0, aux: node2), never from node1
        def homes() -> set[tuple[str, str, str]]:
            steps = _labels(prom, "aiops_job_last_step_timestamp_seconds")
            return {(s["job"], s["node"], node_of[s["instance"]]) for s in steps}

        wait_for(lambda: homes() == {("llm", "node0", "node0"), ("aux", "node2", "node2")}, 20, "job series")
        collectives = _labels(prom, "aiops_collective_operations_total")
        assert collectives and {(c["job"], node_of[c["instance"]]) for c in collectives} <= {
            ("llm", "node0"),
            ("aux", "node2"),
        }
        ranks = _labels(prom, "aiops_job_rank_info")
        assert {(r["job"], r["rank"], node_of[r["instance"]]) for r in ranks} == {
            *{("llm", str(k), "node0") for k in range(4)},  # the home knows every rank of its job
            ("llm", "2", "node1"),  # node1 knows its own ranks
            ("llm", "3", "node1"),
            ("aux", "0", "node2"),
            ("aux", "1", "node2"),
        }

        # the fault (node2/gpu1 from 30 simulated s): node2's own series show it, nobody else's
        thermal = 'aiops_gpu_clocks_event_samples_total{reason="SwThermalSlowdown"} > 0'
        found = wait_for(lambda: _labels(prom, thermal), 30, "node2/gpu1 thermally throttled")
        assert [(f["gpu"], f["node"], node_of[f["instance"]]) for f in found] == [
            ("node2/gpu1", "node2", "node2")
        ]
        hottest = _labels(prom, "topk(1, aiops_gpu_temperature_celsius)")
        assert [(h["gpu"], node_of[h["instance"]]) for h in hottest] == [("node2/gpu1", "node2")]
        incident = wait_for(lambda: _labels(prom, "aiops_incident_open == 1"), 30, "the open incident")
        assert {node_of[i["instance"]] for i in incident} == {"node2"}, incident
        assert incident[0]["root_cause"] == "thermal_throttle" and incident[0]["component"].startswith(
            "node2"
        )
        assert not _query(prom, "aiops_loop_errors_total > 0")  # no flush step failed on a slice
        # each agent's own API: the incident is node2's alone
        api = {n: get_json(f"http://127.0.0.1:{p}/api/incidents")["incidents"] for n, p in ports.items()}
        assert not api["node0"] and not api["node1"] and api["node2"], api
    for node in NODES:
        with Workspace(tmp_path / f"{node}.duckdb").read() as store:
            assert store.scalar("SELECT node FROM sim_runs") == node
            assert store.scalar("SELECT epoch_ts_s FROM sim_runs") == epoch_ts_s
            assert store.scalar("SELECT count(*) FROM rack_samples") == 0
            assert store.scalar("SELECT count(DISTINCT node) FROM gpu_samples") == 1
