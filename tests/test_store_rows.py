"""Rows (a collector's `RowBatch`: tuples in column order) are ingested without pyarrow, and store exactly what
the same batch stores as an Arrow table: the same values and types, the same key check (first row per key, a
replay writes nothing, NULL matches NULL), the same errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiops.errors import IngestError
from aiops.store import Store
from collectors.base import RowBatch, RowBuffer, to_table
from collectors.schema import columns

GPU_COLUMNS = ("ts_s", "gpu", "node", "temp_c", "clocks_event_reasons", "ecc_dbe_total", "nvml_error")


def _stored(store: Store, table: str) -> list[tuple[Any, ...]]:
    return [tuple(r.values()) for r in store.query(f'SELECT * FROM "{table}" ORDER BY ALL')]


@settings(max_examples=6, derandomize=True, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.integers(0, 4),
                st.sampled_from(["node0/gpu0", "node0/gpu1", "node1/gpu0"]),
                st.one_of(st.none(), st.floats(20.0, 95.0)),
                st.one_of(st.none(), st.integers(0, 2**64 - 1)),  # a uint64 bit mask: the top bit too
                st.one_of(st.none(), st.integers(0, 2**40)),
                st.sampled_from([None, "", "NVML_ERROR_GPU_IS_LOST"]),
            ),
            max_size=12,
        ),
        max_size=4,
    )
)
def test_rows_store_what_the_same_arrow_batch_stores(batches: list[list[tuple[Any, ...]]]) -> None:
    with Store() as by_rows, Store() as by_arrow:
        for batch in batches:
            rows = [(float(ts), gpu, gpu.split("/")[0], *rest) for ts, gpu, *rest in batch]
            given_rows = RowBatch(GPU_COLUMNS, rows)
            written = by_rows.ingest_many({"gpu_samples": given_rows})
            assert written == by_arrow.ingest_many({"gpu_samples": to_table("gpu_samples", given_rows)})
        assert _stored(by_rows, "gpu_samples") == _stored(by_arrow, "gpu_samples")


def test_a_replayed_batch_writes_nothing_and_null_matches_null() -> None:
    errors = RowBatch(
        ("ts_s", "collector", "component", "error", "detail"), [(5.0, "nvml", None, "NVMLError", "x")]
    )
    xid = RowBatch(("ts_s", "gpu", "node", "kind"), [(5.0, "node0/gpu0", "node0", "xid")])  # xid: NULL
    with Store() as store:
        assert store.ingest_all([("collector_errors", errors), ("gpu_events", xid)]) == 2
        assert store.ingest_all([("collector_errors", errors), ("gpu_events", xid)]) == 0
        twice = RowBatch((*xid.columns, "xid"), [(5.0, "node0/gpu0", "node0", "xid", None)] * 2)
        assert store.ingest("gpu_events", twice) == 0  # NULL xid is the absent xid stored above
        other = RowBatch(twice.columns, [(5.0, "node0/gpu0", "node0", "xid", 79)])
        assert store.ingest("gpu_events", other) == 1  # another Xid at the same instant is another event


def test_an_all_null_column_keeps_its_type_and_a_bad_value_is_an_ingest_error() -> None:
    with Store() as store:
        rack = RowBatch(columns("rack_samples"), [(1.0, "rack0", None, None, None, None, None, None)])
        assert store.ingest("rack_samples", rack) == 1
        assert store.scalar("SELECT typeof(inlet_temp_c) FROM rack_samples") == "DOUBLE"
        with pytest.raises(IngestError, match="rack_samples"):
            store.ingest("rack_samples", RowBatch(("ts_s", "rack", "inlet_temp_c"), [(2.0, "rack0", "hot")]))
        with pytest.raises(IngestError, match="no column"):
            store.ingest("rack_samples", RowBatch(("ts_s", "rack", "inlet_temp_f"), [(2.0, "rack0", 80.0)]))
        with pytest.raises(IngestError, match="named twice"):
            store.ingest("rack_samples", RowBatch(("ts_s", "rack", "rack"), [(2.0, "rack0", "rack0")]))
        assert store.scalar("SELECT count(*) FROM rack_samples") == 1


def test_a_failed_table_rolls_back_the_whole_flush() -> None:
    good = RowBatch(("ts_s", "rack", "inlet_temp_c"), [(1.0, "rack0", 25.0)])
    bad = RowBatch(("ts_s", "gpu", "node", "temp_c"), [(1.0, "node0/gpu0", "node0", "hot")])
    with Store() as store:
        with pytest.raises(IngestError):
            store.ingest_all([("rack_samples", good), ("gpu_samples", bad)])
        assert store.scalar("SELECT count(*) FROM rack_samples") == 0


def test_the_buffer_hands_back_each_column_set_as_its_own_batch() -> None:
    buffer = RowBuffer()
    short = RowBatch(("ts_s", "rack", "inlet_temp_c"), [(1.0, "rack0", 25.0)])
    long = RowBatch(("ts_s", "rack", "inlet_temp_c", "outlet_temp_c"), [(2.0, "rack0", 26.0, 30.0)])
    buffer.add({"rack_samples": short})
    buffer.add({"rack_samples": RowBatch(short.columns, [(3.0, "rack0", 27.0)])})
    buffer.add({"rack_samples": long})
    buffer.add_tables({"host_samples": pa.table({"ts_s": [1.0], "node": ["node0"]})})
    assert len(buffer) == 4
    batches = buffer.drain_batches()
    assert [(name, type(b).__name__) for name, b in batches] == [
        ("rack_samples", "RowBatch"),
        ("rack_samples", "RowBatch"),
        ("host_samples", "Table"),
    ]
    assert [len(b.rows) for _, b in batches[:2] if isinstance(b, RowBatch)] == [2, 1]
    assert len(buffer) == 0
    with Store() as store:
        assert store.ingest_all(batches) == 4
        assert store.scalar("SELECT count(outlet_temp_c) FROM rack_samples") == 1


FILING = """
import json, sys
from aiops.control.dcim_signals import DcimSignal, record_signal
from aiops.detect import save_incidents
from aiops.models import Diagnosis, Hypothesis, Incident, Symptom
from aiops.pipeline import save_hypotheses, stored_diagnoses
from aiops.store import Store
store = Store(sys.argv[1])
symptom = Symptom(kind="gpu_throttle", component="node0/gpu1", ts_s=10.0, detail={"temp_c": 91.0})
incident = Incident(incident_id="INC-node0-0001", opened_ts_s=10.0, last_ts_s=20.0, title="hot GPU",
                    severity="warning", components=["node0/gpu1", "job:llm"], symptoms=[symptom], impact="2 GPUs")
top = Hypothesis(root_cause="thermal_throttle", component="node0/gpu1", confidence=0.9, summary="hot")
save_incidents(store, [incident], replace_all=False)
save_hypotheses(store, [Diagnosis(incident=incident, hypotheses=[top])], replace_all=False)
record_signal(store, DcimSignal(scope="rack0", kind="cap", budget_kw=40.0, ts_s=12.0))
found = stored_diagnoses(store)
print(json.dumps({"pyarrow": any(m == "pyarrow" or m.startswith("pyarrow.") for m in sys.modules),
                  "incident": found[0].incident.model_dump(), "top": found[0].hypotheses[0].model_dump(),
                  "signals": store.query("SELECT scope, kind, budget_kw FROM dcim_signals")}))
"""


def test_filing_an_incident_stores_it_without_pyarrow(tmp_path: Path) -> None:
    """What a node agent stores as it files an incident (the incident, its hypotheses, a DCIM signal: columns of
    Python lists) takes the rows path: pyarrow (~50 MB of the agent's resident set) stays unloaded, and what is
    stored reads back as it was given."""
    done = subprocess.run(
        [sys.executable, "-c", FILING, str(tmp_path / "agent.duckdb")],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    found = json.loads(done.stdout)
    assert found["pyarrow"] is False
    assert found["incident"]["components"] == ["node0/gpu1", "job:llm"]
    assert found["incident"]["symptoms"] == [
        {"kind": "gpu_throttle", "component": "node0/gpu1", "ts_s": 10.0, "detail": {"temp_c": 91.0}}
    ]
    assert found["incident"]["impact"] == "2 GPUs"
    assert (found["top"]["root_cause"], found["top"]["confidence"]) == ("thermal_throttle", 0.9)
    assert found["signals"] == [{"scope": "rack0", "kind": "cap", "budget_kw": 40.0}]


def test_columns_of_lists_store_what_the_arrow_path_stores() -> None:
    batch = {
        "ts_s": [1.0, 2.0, 2.0],
        "gpu": ["node0/gpu0", "node0/gpu0", "node0/gpu0"],
        "node": ["node0"] * 3,
    }
    with Store(":memory:") as rows, Store(":memory:") as arrow:
        assert rows.ingest("gpu_samples", batch) == 2  # the key check: (2.0, node0/gpu0) once
        assert arrow.ingest("gpu_samples", pa.table(batch)) == 2
        assert _stored(rows, "gpu_samples") == _stored(arrow, "gpu_samples")
        with pytest.raises(IngestError, match="different lengths"):
            rows.ingest("gpu_samples", {"ts_s": [1.0], "gpu": ["a", "b"], "node": ["n"]})
