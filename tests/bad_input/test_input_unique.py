"""Each (ts, entity) key of a time-series table is stored once (issue 11, item 5): `Store.ingest_many` drops
rows whose key the batch already had or the table already holds, so a batch ingested twice, overlapping
batches, and a restarted service that replays a window write each key once, and the first row stored wins.
Before: a repeated batch doubled every row (tests/test_store.py asserted 2 rows for one key ingested twice)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from aiops.config import parse_config
from aiops.scenarios import parse_scenario
from aiops.service.service import Service, SimSetup
from aiops.store import Store
from aiops.store.keys import UNIQUE_KEYS, first_per_key
from aiops.store.migrations import TIME_SERIES_TABLES
from collectors.base import RowBatch
from tests.service_helpers import TINY_SCENARIO

GPUS = [f"node{n}/gpu{g}" for n in range(2) for g in range(4)]


def _gpu_batch(first_s: int, seconds: int, temp_c: float) -> pa.Table:
    rows = [(float(ts), gpu) for ts in range(first_s, first_s + seconds) for gpu in GPUS]
    return pa.table(
        {
            "ts_s": [r[0] for r in rows],
            "gpu": [r[1] for r in rows],
            "node": [r[1].split("/")[0] for r in rows],
            "temp_c": [temp_c] * len(rows),
        }
    )


def _counts(store: Store, table: str) -> tuple[int, int]:
    key = ", ".join(f'"{c}"' for c in UNIQUE_KEYS[table])
    row = store.query(f'SELECT count(*) AS n, count(DISTINCT ({key})) AS d FROM "{table}"')[0]
    return int(row["n"]), int(row["d"])


def test_every_time_series_table_has_a_key_of_its_own_columns() -> None:
    with Store() as store:
        for table in TIME_SERIES_TABLES:
            assert table in UNIQUE_KEYS, table
            assert UNIQUE_KEYS[table][0] == "ts_s"
            missing = set(UNIQUE_KEYS[table]) - set(store.columns(table))
            assert not missing, (table, missing)


def test_the_same_batch_twice_is_stored_once() -> None:
    with Store() as store:
        batch = {
            "gpu_samples": _gpu_batch(0, 10, 60.0),
            "rack_samples": {"ts_s": [0.0, 1.0], "rack": ["rack0"] * 2},
        }
        assert store.ingest_many(batch) == 80 + 2
        assert store.ingest_many(batch) == 0  # a replay is not an error and writes nothing
        assert _counts(store, "gpu_samples") == (80, 80)
        assert _counts(store, "rack_samples") == (2, 2)


def test_overlapping_batches_keep_the_first_row_of_each_key() -> None:
    with Store() as store:
        store.ingest_many({"gpu_samples": _gpu_batch(0, 10, 60.0)})
        assert store.ingest_many({"gpu_samples": _gpu_batch(5, 10, 70.0)}) == 5 * len(GPUS)
        assert _counts(store, "gpu_samples") == (15 * len(GPUS), 15 * len(GPUS))
        temps = store.query(
            "SELECT ts_s, min(temp_c) AS lo, max(temp_c) AS hi FROM gpu_samples GROUP BY ts_s"
        )
        assert {r["ts_s"]: (r["lo"], r["hi"]) for r in temps} == {
            float(ts): (60.0, 60.0) if ts < 10 else (70.0, 70.0) for ts in range(15)
        }


@pytest.mark.parametrize("seconds", [2, 20])  # 32 rows: compared as tuples; 320: as dictionary codes
def test_a_batch_that_repeats_a_key_keeps_its_first_row(seconds: int) -> None:
    with Store() as store:
        batch = pa.concat_tables([_gpu_batch(0, seconds, 60.0), _gpu_batch(1, seconds, 80.0)])  # ts 1.. twice
        assert store.ingest("gpu_samples", batch) == (seconds + 1) * len(GPUS)
        rows = store.query("SELECT temp_c FROM gpu_samples WHERE ts_s = 1 ORDER BY gpu")
        assert [r["temp_c"] for r in rows] == [60.0] * len(GPUS)


def test_a_key_of_five_wide_columns_is_not_confused_by_overflow() -> None:
    # 5 columns of 7,000 distinct values: the combined code passes 2**62, so it is renumbered on the way.
    n = 7_000
    names = [f"v{i}" for i in range(n)]
    flows = pa.table(
        {
            "ts_s": [float(i) for i in range(n)],
            "nic": names,
            "node": ["node0"] * n,
            "traffic_class": names,
            "rule_id": names,
            "lane": names,
            "interval_s": [1.0] * n,
            "tx_bytes": list(range(n)),
        }
    )
    shifted = flows.set_column(1, "nic", pa.array(names[1:] + names[:1]))  # same ts, other NICs: new keys
    with Store() as store:
        assert store.ingest("flow_class_samples", pa.concat_tables([flows, flows, shifted])) == 2 * n
        assert _counts(store, "flow_class_samples") == (2 * n, 2 * n)


@settings(max_examples=200, derandomize=True, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.sampled_from(["a", "b", None]), st.integers(0, 2)), max_size=150)
)
def test_first_per_key_matches_a_plain_loop(rows: list[tuple[int, str | None, int]]) -> None:
    batch = pa.table(
        {
            "ts_s": pa.array([float(r[0]) for r in rows], pa.float64()),
            "component": pa.array([r[1] for r in rows], pa.string()),
            "row": pa.array([r[2] for r in rows], pa.int64()),
        }
    )
    expected: dict[tuple[float, str | None], int] = {}
    for index, (ts, component, _) in enumerate(rows):
        expected.setdefault((float(ts), component), index)
    kept = first_per_key(
        batch.append_column("i", pa.array(range(len(rows)), pa.int64())), ("ts_s", "component")
    )
    assert kept["i"].to_pylist() == sorted(expected.values())


def test_null_and_absent_key_columns_match_each_other() -> None:
    error = {
        "ts_s": [5.0],
        "collector": ["nvml"],
        "component": [None],
        "error": ["NVMLError"],
        "detail": ["x"],
    }
    xid: dict[str, list[Any]] = {"ts_s": [5.0], "gpu": ["node0/gpu0"], "node": ["node0"], "kind": ["xid"]}
    with Store() as store:
        for _ in range(2):
            store.ingest_many({"collector_errors": error, "gpu_events": xid})  # gpu_events.xid absent: NULL
        store.ingest("gpu_events", {**xid, "xid": [None]})
        assert _counts(store, "collector_errors") == (1, 1)
        assert store.scalar("SELECT count(*) FROM gpu_events") == 1
        store.ingest("gpu_events", {**xid, "xid": [79]})  # another Xid at the same instant is another event
        assert store.scalar("SELECT count(*) FROM gpu_events") == 2


def _service(db: Path, monkeypatch: pytest.MonkeyPatch) -> Service:
    config = parse_config({"store": {"path": str(db)}, "http": {"listen": ""}}, "test")
    ticks = itertools.count(0.0, 0.5)
    return Service(
        config,
        sim=SimSetup(parse_scenario(yaml.safe_load(TINY_SCENARIO))),
        clock=lambda: next(ticks),
        sleep=lambda _s: None,
    )


def test_a_restarted_service_that_replays_a_window_stores_each_key_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "served.duckdb"
    first = _service(db, monkeypatch)
    flushed: list[list[tuple[str, RowBatch | pa.Table]]] = []
    drain = first.buffer.drain_batches

    def keep() -> list[tuple[str, RowBatch | pa.Table]]:
        batches = drain()
        flushed.append(batches)
        return batches

    monkeypatch.setattr(first.buffer, "drain_batches", keep)
    assert first.run(duration_s=12.0) == 0
    with Store(db) as store:
        before = {t: _counts(store, t) for t in ("gpu_samples", "nic_samples", "rack_samples", "job_steps")}
    assert before["gpu_samples"][0] >= 8 * 3 and all(n == d for n, d in before.values())
    second = _service(db, monkeypatch)
    for batches in flushed:  # the window the first run wrote, replayed by the restarted service's first flush
        for name, batch in batches:
            if name in TIME_SERIES_TABLES:
                assert isinstance(batch, RowBatch)  # the service buffers its collectors' rows as tuples
                second.buffer.add({name: batch})
    assert second.run(duration_s=2.0) == 0
    with Store(db) as store:
        for table, (rows, _) in before.items():
            after_rows, after_distinct = _counts(store, table)
            assert after_rows == after_distinct >= rows, table
        replayed = store.scalar(
            "SELECT count(*) FROM gpu_samples WHERE ts_s <= ?",
            [
                max(
                    float(row[batch.columns.index("ts_s")])
                    for batches in flushed
                    for name, batch in batches
                    if name == "gpu_samples" and isinstance(batch, RowBatch)
                    for row in batch.rows
                )
            ],
        )
        assert replayed == before["gpu_samples"][0]
