"""The false-alarm run: a healthy fleet with benign churn for a thousand node-days or more, read at the fleet's
scrape interval by the same detection, diagnosis, filing and paging code the fleet runs; every page and every
proposal that would change the cluster is a false one (there is no fault).

Path taken (docs/BENCHMARKS.md says why): 1,000 node-days through node agents and a TSDB would be billions of
samples (1,000 x ~430 series x 5,760 scrapes), beyond this 2-core machine. Instead the twin (128 nodes x 8 GPUs,
16 racks, 16 jobs of 7 nodes, 16 idle spares, benign churn at its default rates, no fault) is stepped every
simulated second with its usual physics, and `aiops.sim.fleet_view.FleetView` hands the fleet's `Service` one
row per entity per 15 s scrape, the rows the fleet would have read through Prometheus (checked row for row against
that path: tests/test_sim_fleet_view.py). The fleet's `Service` (aiops/service/service.py: ingest, live detection,
diagnosis, filing, notifications through its PagerDuty sink to a loopback PagerDuty, retention) runs on them
on a simulated clock, its Prometheus source replaced by the view. Not measured here: the node agents' own
detection at 1 Hz (the operator's day measures it over its 16 node-days) and anything the network between them
would add (the day again).
"""

from __future__ import annotations

import json
import math
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiops.config import NodeConfig, parse_config
from aiops.scenarios import ChurnSpec, ClusterSpec, JobSpec, Scenario
from aiops.service.service import Service
from aiops.service.sources import Source, Sources
from aiops.sim.fleet_view import FleetView
from aiops.sim.world import SIM_EPOCH_TS_S, World
from aiops.store import Store
from bench.oncall_people import PagerDuty, Receivers, announce_maintenance

ROUTING_KEY = "R0UTINGKEY0123456789abcdef012345"
NOT_ACTIONABLE = ("open_ticket", "ack_alert", "rerun_check")
RACKS, PER_RACK, JOB_NODES = 16, 8, 7


def quiet_scenario(seed: int, racks: int = RACKS, churn_rate: float = 1.0) -> Scenario:
    """Each rack: a job on 7 of its 8 nodes, one idle spare; a few PCIe nodes (no NVLink) and spare HCA ports."""
    cluster = ClusterSpec(racks=racks, nodes_per_rack=PER_RACK)
    jobs = [
        JobSpec(
            name=f"train-{r:02d}",
            nodes=[f"node{r * PER_RACK + n}" for n in range(JOB_NODES)],
            checkpoint_every_s=1800,
            checkpoint_gb=40,
        )
        for r in range(racks)
    ]
    spares = [f"node{r * PER_RACK + JOB_NODES}" for r in range(racks)]
    churn = ChurnSpec(
        rate=churn_rate,
        pcie_nodes=spares[: max(1, racks // 4)],
        unused_ports=[f"node{r * PER_RACK}" for r in range(0, racks, 2)],
    )
    return Scenario(name="quiet-fleet", seed=seed, duration_s=86_400, cluster=cluster, jobs=jobs, churn=churn)


def run_quiet(
    node_days: float,
    seed: int,
    scrape_s: float,
    *,
    progress: bool = False,
    racks: int = RACKS,
    wall_budget_s: float | None = None,
    churn_rate: float = 1.0,
    stop: Callable[[], bool] = lambda: False,
    store_threads: int = 1,
    progress_every_s: float = 60.0,
) -> dict[str, Any]:
    """`node_days` of the healthy fleet; with `wall_budget_s`, the run stops at the first scrape past that much
    wall time (or when `stop()` says so) and its figures are those of the node-days it measured (`stopped_early`). `churn_rate`: times the
    churn's default rates (above 1: a stress run, as many churn events as `churn_rate` times its node-days).
    `store_threads`: DuckDB's workers in the fleet's store (1: a fleet per core, as the shards run; the answers
    are the same at any count). Every `progress_every_s` of wall: `partial.json` in the workspace (and a line on
    stderr with `progress`) with the CPU-s per node-day since the last one."""
    import time_machine

    started, cpu_started = time.perf_counter(), time.process_time()
    scenario = quiet_scenario(seed, racks, churn_rate)
    nodes = scenario.cluster.nodes
    duration_s = math.ceil(node_days / nodes * 86_400.0 / scrape_s) * scrape_s
    work = Path(tempfile.mkdtemp(prefix="aiops-oncall-quiet-"))
    print(f"the false-alarm run's workspace: {work}", file=sys.stderr, flush=True)
    (work / "routing_key").write_text(ROUTING_KEY + "\n")
    traveller = time_machine.travel(SIM_EPOCH_TS_S, tick=False)
    clock = traveller.start()
    world = World(scenario)
    view = FleetView(world, scrape_s)
    pagerduty = PagerDuty(ROUTING_KEY)
    receivers = Receivers(pagerduty, dict)
    receivers.start()
    document = {
        "store": {
            "path": str(work / "fleet.duckdb"),
            "flush_interval_s": scrape_s,
            "retention_days": 1.0,
            "threads": store_threads,
        },
        "http": {"listen": ""},
        "detection": {"window_s": max(10.0, scrape_s)},
        "notify": {
            "webhooks": [
                {
                    "kind": "pagerduty",
                    "url": receivers.url + "/v2/enqueue",
                    "routing_key_file": str(work / "routing_key"),
                }
            ],
            "console_url": "http://console.example/",
        },
    }
    config = parse_config(document, "<quiet fleet>")
    config = config.model_copy(update={"node": NodeConfig.model_construct(name="fleet", rack="", hosts={})})

    def sources(store: Store) -> Sources:
        return Sources(
            [Source(view.name, view, 0.0)], lambda: float(world.now_ts_s), tick_s=1.0, describe="twin view"
        )

    service = Service(config, sources=sources, clock=lambda: float(world.elapsed_s), sleep=lambda _s: None)
    step = round(scrape_s)
    try:
        service.start()
        service.outbox.stop(timeout_s=5.0)
        announced: set[tuple[float, str]] = set()
        _announce(service, world, announced)
        last_report, last = time.perf_counter(), (0.0, time.process_time() - cpu_started)
        seen, stopped = 0, False
        for second in range(1, round(duration_s) + 1):
            if second % 86_400 == 1 and world.churn is not None:
                world.churn.extend(world, second + 86_400.0)
                _announce(service, world, announced)
            clock.move_to(world.now_ts_s + 1.0)
            world.step(1.0)
            view.observe()
            if second % step:
                continue
            service.tick()
            if service.flushes != seen:
                seen = service.flushes
                service.outbox.pump_once(service.workspace)
            if stop() or (wall_budget_s is not None and time.perf_counter() - started > wall_budget_s):
                stopped = True
                break
            if time.perf_counter() - last_report > progress_every_s:
                last_report = time.perf_counter()
                done = nodes * world.elapsed_s / 86_400.0
                cpu_s = time.process_time() - cpu_started
                partial = {
                    "node_days": round(done, 2),
                    "pages": len(pagerduty.alerts),
                    "incidents": service.live.tracker.next_number - 1,
                    "wall_s": round(time.perf_counter() - started),
                    "cpu_s": round(cpu_s),
                    # since the last line: flat over the run when nothing grows with the history
                    "cpu_s_per_node_day_recent": round((cpu_s - last[1]) / max(done - last[0], 1e-9), 2),
                }
                last = (done, cpu_s)
                (work / "partial.json").write_text(json.dumps(partial))  # what a run stopped early measured
                if progress:
                    print(
                        f"quiet (seed {seed}): {done:.1f} of {node_days:g} node-days, {partial['wall_s']} s, "
                        f"{partial['cpu_s']} CPU-s ({partial['cpu_s_per_node_day_recent']} per node-day "
                        f"since the last line), incidents {partial['incidents']}, "
                        f"pages {len(pagerduty.alerts)}",
                        file=sys.stderr,
                        flush=True,
                    )
        service.flush()
        service.outbox.pump_once(service.workspace)
    finally:
        if service.sources is not None:
            service.sources.close()
        service.owner.close()
        receivers.close()
        traveller.stop()
    found = _figures(work, pagerduty, nodes, world.elapsed_s, scrape_s, time.perf_counter() - started)
    found["cpu_s"] = round(
        time.process_time() - cpu_started, 1
    )  # this process's user + sys: survives the load
    found["cpu_s_per_node_day"] = round(found["cpu_s"] / max(found["node_days"], 1e-9), 2)
    events = world.churn.events if world.churn is not None else []
    churned: dict[str, int] = {}
    for e in events:
        if e.start_s <= world.elapsed_s:
            churned[e.kind] = churned.get(e.kind, 0) + 1
    return {
        **found,
        "churn_rate": churn_rate,
        "churn_events": churned,
        "node_days_asked": node_days,
        "stopped_early": stopped,
    }


def _announce(service: Service, world: World, announced: set[tuple[float, str]]) -> None:
    """The churn's maintenance windows, announced on the fleet once each (`announce_maintenance`, as
    bench/oncall.py does)."""
    events = [e for e in (world.churn.events if world.churn else []) if e.kind == "maintenance"]
    for e in events:
        if (e.start_s, e.component) in announced:
            continue
        announced.add((e.start_s, e.component))
        with service.owner.store() as store:
            announce_maintenance(store, world.epoch_ts_s, e)


def _figures(
    work: Path, pagerduty: PagerDuty, nodes: int, elapsed_s: float, scrape_s: float, wall_s: float
) -> dict[str, Any]:
    node_days = nodes * elapsed_s / 86_400.0
    with Store(work / "fleet.duckdb", read_only=True) as store:
        incidents = store.query(
            "SELECT i.incident_id, i.opened_ts_s, i.title, i.severity, i.impact, h.root_cause, h.component "
            "FROM incidents i LEFT JOIN hypotheses h ON h.incident_id = i.incident_id AND h.rank = 1 "
            "ORDER BY i.opened_ts_s"
        )
        proposals = store.query(
            "SELECT proposal_id, kind, target, status, incident_id, created_ts_s FROM proposals ORDER BY created_ts_s"
        )
    actionable = [p for p in proposals if p["kind"] not in NOT_ACTIONABLE and p["status"] != "denied"]
    per_1000 = 1000.0 / node_days if node_days else 0.0
    by_cause: dict[str, int] = {}
    by_severity: dict[str, int] = {}
    for i in incidents:
        key = str(i["root_cause"] or "(no diagnosis)")
        by_cause[key] = by_cause.get(key, 0) + 1
        by_severity[str(i["severity"])] = by_severity.get(str(i["severity"]), 0) + 1
    return {
        "path": "twin stepped every second; FleetView rows at the scrape interval into the fleet's Service",
        "nodes": nodes,
        "gpus": nodes * 8,
        "simulated_days": round(elapsed_s / 86_400.0, 3),
        "node_days": round(node_days, 2),  # as the day's (bench/oncall_records.py); a test-size run is 0.02
        "scrape_s": scrape_s,
        "wall_s": round(wall_s, 1),
        "pages": len(pagerduty.alerts),
        "false_pages_per_1000_node_days": round(len(pagerduty.alerts) * per_1000, 2),
        "incidents": len(incidents),
        "incidents_by_top_cause": by_cause,
        "incidents_by_severity": by_severity,
        # no false page seen in N node-days: the rate is below 3 / N with 95 % confidence (the rule of three)
        "false_pages_upper_95_per_1000_node_days": round(3.0 * per_1000, 2) if not pagerduty.alerts else None,
        "incidents_seen": [
            {
                "at_s": round(float(i["opened_ts_s"]) - SIM_EPOCH_TS_S, 1),
                "title": str(i["title"])[:100],
                "severity": i["severity"],
                "impact": str(i["impact"] or "")[:100],
                "top_cause": i["root_cause"],
            }
            for i in incidents[:40]
        ],
        "proposals": len(proposals),
        "false_actionable": len(actionable),
        "false_actionable_per_1000_node_days": round(len(actionable) * per_1000, 2),
        "first_pages": [
            {"at_s": round(a.opened_ts_s - SIM_EPOCH_TS_S, 1), "summary": a.summary[:160]}
            for a in pagerduty.alerts[:20]
        ],
        "actionable_kinds": sorted({str(p["kind"]) for p in actionable}),
        "workspace": str(work),
    }


def main() -> int:
    import argparse

    parser = argparse.ArgumentParser(
        description="the false-alarm run alone (bench/oncall.py --skip-day runs it too)"
    )
    parser.add_argument("--node-days", type=float, default=1000.0)
    parser.add_argument("--racks", type=int, default=RACKS, help="racks of 8 nodes")
    parser.add_argument("--seed", type=int, default=2027)
    parser.add_argument("--churn-rate", type=float, default=1.0, help="times the churn's default event rates")
    parser.add_argument("--wall-budget-s", type=float, default=None)
    parser.add_argument("--progress", action="store_true")
    parser.add_argument(
        "--progress-every-s", type=float, default=60.0, help="wall seconds between progress lines"
    )
    parser.add_argument("--out", default="", help="also write the JSON here")
    args = parser.parse_args()
    result = run_quiet(
        args.node_days,
        args.seed,
        15.0,
        progress=args.progress,
        racks=args.racks,
        wall_budget_s=args.wall_budget_s,
        churn_rate=args.churn_rate,
        progress_every_s=args.progress_every_s,
    )
    emit(result, args.out)
    return 0


def emit(result: dict[str, Any], out: str) -> None:
    """The figures with the command and the load at the end, printed (and written to `out`)."""
    import os

    result["command"] = " ".join(sys.argv)
    result["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    text = json.dumps(result)
    if out:
        Path(out).write_text(text + "\n")
    print(text)


if __name__ == "__main__":
    sys.exit(main())
