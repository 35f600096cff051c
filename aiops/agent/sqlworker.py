"""The agent's SQL runs here, in a child process, so that the time limit cancels every query.

DuckDB's `interrupt()` is checked between vectors; a query whose work is one huge value computed inside one
vector (`SELECT list(range(30000000))` ran 22.7 s against a 5 s limit) does not see it. The parent
(`aiops.agent.sqltool.ReadOnlySQL`) therefore sends each query, after its own checks and under its own
read lease (or, in the service, the service's hold set down), to this worker and kills the worker when the limit passes; the next query starts a new one.

Protocol: one JSON request per line on stdin (`path`, `sql`, `params`, `max_rows`, `max_bytes`), one JSON
answer per line on stdout. The worker imports nothing of aiops (it runs as a script) and opens the database
read-only with external access off, for one query at a time. It ends when stdin closes.
"""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import sys
import uuid
from typing import Any

FETCH_BATCH_ROWS = 64


def jsonable(value: Any) -> Any:
    """A value as JSON can carry it (DuckDB hands back decimals, dates, UUIDs, lists, structs)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, decimal.Decimal):
        return float(value) if value.is_finite() else None
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return str(value)


def fetch_bounded(result: Any, max_rows: int, max_bytes: int) -> dict[str, Any]:
    """{"columns", "rows", "truncated", "limit", "bytes"}: rows until `max_rows` or `max_bytes` of JSON."""
    names = [d[0] for d in result.description or []]
    rows: list[dict[str, Any]] = []
    size_bytes, limit = 2, ""
    while not limit:
        batch = result.fetchmany(FETCH_BATCH_ROWS)
        if not batch:
            break
        for raw in batch:
            if len(rows) >= max_rows:
                limit = "rows"
                break
            row = {n: jsonable(v) for n, v in zip(names, raw, strict=True)}
            row_bytes = len(json.dumps(row).encode()) + 1
            if size_bytes + row_bytes > max_bytes:
                limit = "bytes"
                break
            rows.append(row)
            size_bytes += row_bytes
    return {"columns": names, "rows": rows, "truncated": bool(limit), "limit": limit, "bytes": size_bytes}


def run_request(request: dict[str, Any]) -> dict[str, Any]:
    import duckdb

    try:
        conn = duckdb.connect(str(request["path"]), read_only=True)
    except duckdb.Error as exc:
        return {"ok": False, "error": f"cannot open the database: {exc}"}
    try:
        conn.execute("SET enable_external_access = false")
        result = conn.execute(str(request["sql"]), list(request.get("params") or []))
        answer = fetch_bounded(result, int(request["max_rows"]), int(request["max_bytes"]))
        return {"ok": True, **answer}
    except duckdb.Error as exc:
        return {"ok": False, "error": f"query failed: {exc}"}
    finally:
        conn.close()


def main() -> int:
    import duckdb  # noqa: F401 - loaded before "ready", so the parent's clock counts queries only

    sys.stdout.write("ready\n")
    sys.stdout.flush()
    for line in sys.stdin:
        try:
            answer = run_request(json.loads(line))
        except Exception as exc:  # the parent shows it; the worker keeps serving
            answer = {"ok": False, "error": f"query failed: {type(exc).__name__}: {exc}"}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
