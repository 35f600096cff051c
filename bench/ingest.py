"""Ingest throughput: GPU-sample rows per second through `Store.ingest` next to a raw DuckDB
`INSERT INTO gpu_samples SELECT * FROM arrow_table` of the same Arrow table, in the same run (fresh in-memory
database for each, best of `--repeats`). Prints `{"rows_per_s", "raw_rows_per_s", "ratio"}`."""

from __future__ import annotations

import argparse
import json
import sys
import time

import duckdb
import numpy as np
import pyarrow as pa

from aiops.store import Store
from collectors.schema import SCHEMAS


def batch(rows: int) -> pa.Table:
    rng = np.random.default_rng(0)
    gpus = np.array([f"node{n}/gpu{g}" for n in range(8) for g in range(8)])
    index = np.arange(rows) % gpus.size
    columns: dict[str, object] = {}
    for field in SCHEMAS["gpu_samples"]:
        if field.name == "ts_s":
            columns[field.name] = 1_767_225_600.0 + np.arange(rows) // gpus.size
        elif field.name == "gpu":
            columns[field.name] = gpus[index]
        elif field.name == "node":
            columns[field.name] = np.array([g.split("/")[0] for g in gpus])[index]
        elif field.name in ("uuid", "nvml_error"):
            columns[field.name] = pa.nulls(rows, pa.string())
        elif pa.types.is_floating(field.type):
            columns[field.name] = rng.uniform(0, 700, rows)
        else:
            columns[field.name] = rng.integers(0, 100, rows)
    return pa.table(columns, schema=SCHEMAS["gpu_samples"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    table = batch(args.rows)
    ours = raw = 0.0
    for i in range(args.repeats):
        with Store(":memory:") as store:
            start = time.perf_counter()
            store.ingest("gpu_samples", table)
            ours = max(ours, args.rows / (time.perf_counter() - start))
        with Store(":memory:") as schema_only:  # the same schema, written by a plain DuckDB statement
            conn: duckdb.DuckDBPyConnection = schema_only.conn
            conn.register("arrow_table", table)
            names = ", ".join(table.column_names)
            start = time.perf_counter()
            conn.execute(f"INSERT INTO gpu_samples ({names}) SELECT * FROM arrow_table")
            raw = max(raw, args.rows / (time.perf_counter() - start))
        print(f"run {i + 1}/{args.repeats}: store {ours:,.0f} rows/s, raw {raw:,.0f} rows/s", file=sys.stderr)
    print(
        json.dumps({"rows_per_s": round(ours), "raw_rows_per_s": round(raw), "ratio": round(ours / raw, 3)})
    )


if __name__ == "__main__":
    main()
