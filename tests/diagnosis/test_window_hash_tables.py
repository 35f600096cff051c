"""A window query builds one aggregate hash table (aiops/detect/windows.py): DuckDB plans a DISTINCT aggregate or
`mode()` beside other aggregates as a second aggregate joined back to the first (a CTE and a hash join), and each
hash table zeroes ~2 MB however few the rows: a node agent's flush peaked ~2 MB higher for each such query
(docs/BENCHMARKS.md "The node service", round ten). The NIC and step queries say the same in other words; these
tests hold their plans to one aggregate and their answers to the old ones (ties of the mode aside: by name now)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from aiops.detect import stragglers, windows
from aiops.service.owner import plan_lightly
from aiops.store import Store

QUERIES = {
    name: query
    for module in (windows, stragglers)
    for name, query in vars(module).items()
    if isinstance(query, windows.WindowQuery)
}


def _operators(node: dict[str, Any]) -> list[str]:
    return [
        str(node.get("name", "")),
        *(op for child in node.get("children", []) for op in _operators(child)),
    ]


@pytest.mark.parametrize("name", sorted(QUERIES))
@pytest.mark.parametrize("lean", [True, False], ids=["node", "fleet"])
def test_a_window_query_builds_no_second_aggregate_joined_back(tmp_path: Path, name: str, lean: bool) -> None:
    query = QUERIES[name]
    # a DISTINCT aggregate gets a hash table of its own inside the one aggregate too, where a node's planner does
    # not rewrite it into a join (its `distinct_aggregate_rewrite` is off)
    assert not re.search(r"\(\s*DISTINCT\b|(?<![\w'])mode\(", query.select, re.IGNORECASE), name
    with Store(str(tmp_path / "ws.duckdb")) as store:
        if lean:  # a node agent's planner (aiops/service/owner.py)
            plan_lightly(store.conn)
        for sql, params in ((query.sql, [1.0, 2.0]), (query.batched_sql, [[1.0, 2.0, 3.0], 2, 1.0])):
            plan = store.conn.execute(f"EXPLAIN (FORMAT json) {sql}", params).fetchall()[0][1]
            operators = _operators(json.loads(plan)[0])
            assert not [op for op in operators if "JOIN" in op or "CTE" in op], (name, operators)
            # the rank query aggregates twice on purpose (per process, then per rank); the others once
            assert operators.count("HASH_GROUP_BY") <= (2 if name == "RANK_WINDOW_SQL" else 1), (
                name,
                operators,
            )


def test_the_nic_querys_seconds_and_the_step_querys_slowest_gpu_are_the_aggregates_they_replace(
    tmp_path: Path,
) -> None:
    with Store(str(tmp_path / "ws.duckdb")) as store:
        store.conn.execute(
            """INSERT INTO nic_samples (ts_s, nic, node, lane, interval_s) VALUES
               (1.5, 'n0/nic0', 'n0', 'fifo', 1.0), (1.5, 'n0/nic0', 'n0', 'bulk', 1.0),
               (1.6, 'n0/nic0', 'n0', 'fifo', 1.0), (1.7, 'n0/nic0', 'n0', 'vip', 1.0),
               (1.5, 'n0/nic1', 'n0', 'fifo', 1.0), (1.5, 'n0/nic2', 'n0', 'bulk', 2.0)"""
        )
        seconds = {r["nic"]: r["seconds"] for r in store.query(windows.NIC_WINDOW_SQL.sql, [1.0, 2.0])}
        old = store.query(
            "SELECT nic, sum(interval_s) / count(DISTINCT lane) AS seconds FROM nic_samples GROUP BY nic"
        )
        assert seconds == {r["nic"]: r["seconds"] for r in old}
        assert seconds == {"n0/nic0": 4 / 3, "n0/nic1": 1.0, "n0/nic2": 2.0}
        steps = [  # job, slowest GPUs in stored order
            ("tie", ["gpu5", "gpu3", "gpu3", "gpu5"]),
            ("clear", ["gpu2", "gpu7", "gpu7", None, "gpu7", "gpu2"]),
            ("none", [None, None]),
        ]
        for job, slowest in steps:
            for i, gpu in enumerate(slowest):
                store.conn.execute(
                    "INSERT INTO job_steps (ts_s, job, step, step_time_s, slowest_gpu) VALUES (?, ?, ?, 1.0, ?)",
                    [1.1 + i / 100, job, i, gpu],
                )
        found = {r["job"]: r["slowest_gpu"] for r in store.query(windows.STEP_WINDOW_SQL.sql, [1.0, 2.0])}
        assert found == {"tie": "gpu3", "clear": "gpu7", "none": None}
        assert store.scalar("SELECT mode(slowest_gpu) FROM job_steps WHERE job = 'clear'") == "gpu7"
