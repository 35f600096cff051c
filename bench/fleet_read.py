"""One `aiops fleet` read cycle's CPU at the live tests' size: the twin's node agents and its facility agent
(`aiops run --sim S --node nodeK`, one shared epoch; aiops/lab/loopback.py, as tests/agent_cluster.py starts
them) scraped by a real Prometheus every `--scrape-s`, read by a `FleetCollector` in this process, ticked every
second as the fleet service ticks it (aiops/fleet/source.py `fleet_sources`: tick_s 1). The first read (the
look-back) is left out; every later tick is measured: a step's read (`collect` with a whole step passed) and the
rank-timing reads between steps, apart.

Printed (one JSON object): per step read the median and p90 CPU seconds (`time.process_time`: this process
only, so Prometheus's and the agents' CPU are not counted), HTTP requests, DuckDB statements (`execute` calls on
the collector's connection, counted by cProfile) and bytes; the same per step for the reads between steps; with
`--profile PATH` the cProfile stats of the steady ticks (`python -m pstats PATH`).

    nice -n 10 .venv/bin/python bench/fleet_read.py --agents 4 --reads 12 --profile /tmp/fleet_read.prof
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from aiops.config import FacilityConfig, FleetConfig
from aiops.fleet.source import FleetCollector, FleetSetup
from aiops.lab.loopback import (
    Lab,
    agent_groups,
    fleet_argv,
    free_port,
    prometheus_argv,
    prometheus_config,
    start_agents,
    wait_http,
    write_targets,
)
from aiops.store import Store


def scenario(agents: int) -> str:
    """The fleet live test's cluster (tests/test_fleet_live.py): two racks, two GPUs and a NIC a node, a GPU's
    cooling failing from the start."""
    return f"""\
name: fleet-read
seed: 11
duration_s: 3600
cluster: {{racks: 2, nodes_per_rack: {max(1, agents // 2)}, gpus_per_node: 2, nics_per_node: 1}}
faults:
  - {{kind: thermal_throttle, target: node{agents - 1}/gpu1, start_s: 5, severity: 0.9}}
"""


class Counted:
    """A DuckDB connection whose `execute` calls are counted, and timed (CPU) by statement (its first words)."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.calls = 0
        self.cpu_s: dict[str, list[float]] = {}

    def execute(self, sql: str, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        started_s = time.process_time()
        try:
            return self.conn.execute(sql, *args, **kwargs)
        finally:
            key = " ".join(sql.split())[:70]
            spent = self.cpu_s.setdefault(key, [0, 0.0])
            spent[0] += 1
            spent[1] += time.process_time() - started_s

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def measure(
    url: str, folder: Path, dcim: str, step_s: float, reads: int, profile: Path | None, prom_pid: int
) -> dict[str, Any]:
    store = Store(folder / "fleet.duckdb")
    config = FleetConfig(prometheus=url, step_s=step_s, delay_s=2.0, lookback_s=60.0)
    collector = FleetCollector(store, FleetSetup(config, facility=FacilityConfig(dcim=dcim)))
    store.ingest_many(collector.collect(collector.data_ts_s))  # the look-back: not measured
    prom_cpu_s, started_s = _cpu_of(prom_pid), time.monotonic()
    counted = Counted(collector.scratch.conn)
    collector.scratch.conn = counted  # type: ignore[assignment]
    steps: list[dict[str, float]] = []
    between: dict[str, float] = {"cpu_s": 0.0, "requests": 0, "executes": 0, "ticks": 0}
    whole = cProfile.Profile()
    next_tick = time.monotonic()
    while len(steps) < reads:
        next_tick += 1.0
        time.sleep(max(0.0, next_tick - time.monotonic()))
        calls = counted.calls
        horizon_s, requests, fetched = (
            collector.horizon_ts_s,
            collector.client.requests,
            collector.client.bytes_fetched,
        )
        cpu_s = time.process_time()
        whole.enable()
        out = collector.collect(collector.data_ts_s)
        whole.disable()
        cpu_s = time.process_time() - cpu_s
        store.ingest_many(out)
        executes = counted.calls - calls
        if collector.horizon_ts_s > horizon_s:
            steps.append(
                {
                    "cpu_s": cpu_s,
                    "requests": collector.client.requests - requests,
                    "executes": executes,
                    "bytes": collector.client.bytes_fetched - fetched,
                    "steps": round((collector.horizon_ts_s - horizon_s) / step_s),
                }
            )
        else:
            between["cpu_s"] += cpu_s
            between["requests"] += collector.client.requests - requests
            between["executes"] += executes
            between["ticks"] += 1
    prom_cpu_s, wall_s = _cpu_of(prom_pid) - prom_cpu_s, time.monotonic() - started_s
    collector.close()
    store.close()
    if profile is not None:
        whole.dump_stats(str(profile))
    cpu = sorted(s["cpu_s"] for s in steps)
    heaviest = sorted(counted.cpu_s.items(), key=lambda kv: -kv[1][1])[:15]
    return {
        "step_reads": len(steps),
        "step_read_cpu_s": {
            "median": round(statistics.median(cpu), 4),
            "p90": round(cpu[int(0.9 * (len(cpu) - 1))], 4),
        },
        "step_read_requests": statistics.median(s["requests"] for s in steps),
        "step_read_duckdb_statements": statistics.median(s["executes"] for s in steps),
        "step_read_bytes": statistics.median(s["bytes"] for s in steps),
        "steps_per_read": statistics.median(s["steps"] for s in steps),
        "between_per_step": {k: round(v / len(steps), 4) for k, v in between.items()},
        "cpu_s_per_step_all_reads": round((sum(cpu) + between["cpu_s"]) / len(steps), 4),
        "duckdb_cpu_s_per_step": round(sum(v[1] for v in counted.cpu_s.values()) / len(steps), 4),
        "prometheus_cpu_s": prom_cpu_s,
        "wall_s": wall_s,
        "heaviest_statements": {k: [int(v[0]), round(v[1], 3)] for k, v in heaviest},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument(
        "--scrape-s", type=float, default=2.0, help="Prometheus's scrape interval, the fleet's step"
    )
    parser.add_argument("--speed", default="5", help="simulated seconds per wall second")
    parser.add_argument("--warm-s", type=float, default=20.0, help="scraped before the fleet's first read")
    parser.add_argument("--reads", type=int, default=12, help="steady step reads measured")
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument(
        "--process-s", type=float, default=0.0, help="then `aiops fleet` itself this long: its CPU per step"
    )
    parser.add_argument("--process-profile", type=Path, default=None, help="cProfile of `aiops fleet` there")
    args = parser.parse_args()
    nodes = tuple(f"node{n}" for n in range(args.agents))
    with tempfile.TemporaryDirectory(prefix="fleet-read-") as tmp, Lab(Path(tmp)) as lab:
        folder = Path(tmp)
        (folder / "aiops.toml").write_text("")
        path = folder / "fleet-read.yaml"
        path.write_text(scenario(args.agents))
        env = {k: v for k, v in os.environ.items() if not k.startswith(("AIOPS_", "OPENAI_"))}
        env.update(AIOPS_CONFIG=str(folder / "aiops.toml"), HOME=tmp, AIOPS_TWIN_TAG=folder.name)
        port = free_port()
        prom = lab.start(
            "prometheus",
            prometheus_argv(prometheus_config(folder, args.scrape_s, ["aiops"]), folder / "tsdb", port),
        )
        ports = start_agents(lab, path, time.time(), (*nodes, "facility"), args.speed, env)
        url = f"http://127.0.0.1:{port}"
        wait_http(prom, f"{url}/-/ready")
        write_targets(folder / "aiops.json", agent_groups(ports))
        idle_cpu_s = _cpu_of(prom.pid)
        agents_cpu_s = sum(_cpu_of(p.pid) for p in lab.procs[1:])
        time.sleep(args.warm_s)  # Prometheus scraping, nobody asking: its CPU a second then
        idle_cpu_s = (_cpu_of(prom.pid) - idle_cpu_s) / args.warm_s
        agents_cpu_s = (sum(_cpu_of(p.pid) for p in lab.procs[1:]) - agents_cpu_s) / args.warm_s
        result = measure(
            url,
            folder,
            f"http://127.0.0.1:{ports['facility']}/api/dcim",
            args.scrape_s,
            args.reads,
            args.profile,
            prom.pid,
        )
        asked_s = result.pop("prometheus_cpu_s") - idle_cpu_s * result.pop("wall_s")
        result["prometheus_cpu_s_per_step_answering"] = round(asked_s / result["step_reads"], 4)
        result["prometheus_cpu_s_per_s_scraping"] = round(idle_cpu_s, 4)
        result["agents_cpu_s_per_s"] = round(agents_cpu_s, 4)  # the node and facility agents together
        if args.process_s:
            result["process"] = whole_fleet(
                lab, folder, url, env, args.scrape_s, args.process_s, args.process_profile
            )
    print(json.dumps({"agents": args.agents, "scrape_s": args.scrape_s, **result}, indent=1))


def whole_fleet(
    lab: Lab,
    folder: Path,
    url: str,
    env: dict[str, str],
    step_s: float,
    run_s: float,
    profile: Path | None = None,
) -> dict[str, Any]:
    """`aiops fleet` itself (a child process: the reads and everything the service does with them) for `run_s`
    once ready: its CPU seconds (/proc/PID/stat) per step, the start-up left out."""
    argv = fleet_argv(url, folder / "fleet-whole.duckdb", step_s=step_s, lookback_s=60.0)
    if profile is not None:  # the whole process under cProfile (written as it exits)
        argv[1:1] = ["-m", "cProfile", "-o", str(profile)]
    fleet = lab.start("fleet", argv, env)
    wait_http(fleet, f"http://127.0.0.1:{fleet.port()}/readyz", 120)
    time.sleep(2 * step_s)  # the look-back read and its flush behind it
    started_cpu_s, started_s = _cpu_of(fleet.pid), time.monotonic()
    time.sleep(run_s)
    cpu_s, wall_s = _cpu_of(fleet.pid) - started_cpu_s, time.monotonic() - started_s
    fleet.stop()
    return {
        "cpu_s": round(cpu_s, 2),
        "wall_s": round(wall_s, 1),
        "cpu_s_per_step": round(cpu_s / wall_s * step_s, 4),
    }


def _cpu_of(pid: int) -> float:
    """User + system CPU seconds of process `pid` (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
