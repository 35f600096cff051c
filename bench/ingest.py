"""Ingest through the service's real path next to a raw insert of the same Arrow data, in the same run.

The service's path: a 1024-GPU twin (16 racks x 8 nodes x 8 GPUs, 2 NICs per node) sampled at 1 Hz by the
collectors the service runs (`NvmlCollector` per node, the fabric adapter) for one flush interval (the
config's default `store.flush_interval_s`), the rows buffered as tuples (`RowBuffer`), then drained to Arrow
and written by `Store.ingest_many` (one transaction, every table) into a file database the service holds open
(aiops/service/owner.py: no open, close or checkpoint per flush). The raw path: the same drained Arrow tables,
each `INSERT INTO t SELECT * FROM arrow` into a second file database, no conversion, no transaction. Both
timed per flush, interleaved, median over `--flushes`. Prints
{"rows_per_flush": ..., "service_ms": ..., "raw_ms": ..., "ratio": raw/service} (target: ratio >= 0.8).

    .venv/bin/python bench/ingest.py [--flushes 15] [--flush-s 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import pyarrow as pa

from aiops.config import StoreConfig
from aiops.scenarios import parse_scenario
from aiops.sim.telemetry import SimFabricCollector, inventory
from aiops.sim.world import World
from aiops.store import Store
from collectors.base import RowBuffer
from collectors.nvml import NvmlCollector

CLUSTER = {"racks": 16, "nodes_per_rack": 8, "gpus_per_node": 8, "nics_per_node": 2}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--flushes", type=int, default=15)
    parser.add_argument(
        "--flush-s", type=int, default=int(StoreConfig.model_fields["flush_interval_s"].default)
    )
    args = parser.parse_args()
    world = World(parse_scenario({"name": "ingest-bench", "seed": 1, "duration_s": 3600, "cluster": CLUSTER}))
    nvml = [NvmlCollector(world.nvml(n), f"node{n}") for n in range(world.layout.nodes)]
    fabric = SimFabricCollector(world)
    service_ms: list[float] = []
    raw_ms: list[float] = []
    rows = 0
    with tempfile.TemporaryDirectory(prefix="aiops-ingest-") as tmp:
        service, raw = Store(Path(tmp) / "service.duckdb"), Store(Path(tmp) / "raw.duckdb")
        for store in (service, raw):
            store.ingest_many(inventory(world))
        for _ in range(args.flushes + 1):
            buffer = RowBuffer()
            for _ in range(args.flush_s):  # what one flush interval collects
                world.step(1.0)
                for collector in nvml:
                    buffer.add(collector.rows(world.now_ts_s))
                buffer.add(fabric.rows(world.now_ts_s))
            started = time.perf_counter()
            tables: dict[str, pa.Table] = buffer.drain()
            service.ingest_many(tables)
            service_ms.append((time.perf_counter() - started) * 1000.0)
            started = time.perf_counter()
            for name, table in tables.items():
                raw.conn.register("arrow_batch", table)
                columns = ", ".join(f'"{c}"' for c in table.column_names)
                raw.conn.execute(f'INSERT INTO "{name}" ({columns}) SELECT {columns} FROM arrow_batch')
                raw.conn.unregister("arrow_batch")
            raw_ms.append((time.perf_counter() - started) * 1000.0)
            rows = sum(int(t.num_rows) for t in tables.values())
        service.close()
        raw.close()
    service_med, raw_med = statistics.median(service_ms[1:]), statistics.median(raw_ms[1:])  # first: warm-up
    print(
        json.dumps(
            {
                "gpus": world.layout.gpu_count,
                "flush_s": args.flush_s,
                "rows_per_flush": rows,
                "service_ms": round(service_med, 2),
                "raw_ms": round(raw_med, 2),
                "ratio": round(raw_med / service_med, 3),
                "flushes": args.flushes,
            }
        )
    )


if __name__ == "__main__":
    main()
