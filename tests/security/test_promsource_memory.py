"""`aiops analyze --prometheus` in bounded memory (issue 13: 1024 GPUs x 6 h under 500 MB peak RSS, measured by
bench/prometheus_source.py): the pivot of the staged samples runs in time slices and gives exactly the rows one
pivot gives; the fetch holds one parsed answer at a time; every DuckDB connection it uses is under the limit."""

from __future__ import annotations

import json
import os
import random
import threading
import tracemalloc
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import duckdb
import pytest

from aiops.cli import analyze_prometheus
from aiops.cli.main import main
from aiops.sources import mapping
from aiops.sources.mapping import MAX_THREADS, STAGING_MEMORY_LIMIT_MB, Staging
from aiops.sources.names import XID
from aiops.sources.prometheus import PrometheusClient, fetch_into
from aiops.store import Store

TABLES = ("topology", "gpu_samples", "gpu_events", "nic_samples")


def _matrices(seed: int) -> dict[str, list[dict[str, Any]]]:
    """Three hosts x 4 GPUs, one NIC each, 200 samples a series on an uneven 15 s grid with gaps, an XID."""
    rng = random.Random(seed)
    stamps = [1_000.0 + 15 * i + (0.5 if i % 7 == 0 else 0.0) for i in range(200) if i % 13 != 5]
    out: dict[str, list[dict[str, Any]]] = {}
    for name in ("DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_CLOCKS_EVENT_REASONS", XID):
        out[name] = [
            {
                "metric": {"Hostname": f"host-{h}", "gpu": str(g), "UUID": f"GPU-{h}{g}"},
                "values": [[ts, str(_value(name, rng, i))] for i, ts in enumerate(stamps)],
            }
            for h in range(3)
            for g in range(4)
        ]
    out["node_network_transmit_bytes_total"] = [
        {
            "metric": {"instance": f"host-{h}:9100", "device": "eth0"},
            "values": [[ts, str(1e9 * i)] for i, ts in enumerate(stamps)],
        }
        for h in range(3)
    ]
    return out


def _value(name: str, rng: random.Random, i: int) -> float:
    if name == XID:
        return 79.0 if i in (120, 121) else 0.0
    if name == "DCGM_FI_DEV_CLOCKS_EVENT_REASONS":
        return 64.0 if i > 150 else 0.0
    return round(rng.uniform(40.0, 90.0), 3)


def _pivoted(
    path: Path, pivot_rows: int, monkeypatch: pytest.MonkeyPatch
) -> dict[str, list[tuple[Any, ...]]]:
    monkeypatch.setattr(mapping, "PIVOT_ROWS", pivot_rows)
    with Store(path) as store:
        staging = Staging(store)
        for name, matrix in _matrices(seed=3).items():
            staging.add(name, matrix)
        slices = len(mapping._time_slices(store.conn))
        staging.finish({})
        out = {t: store.conn.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in TABLES}
    out["slices"] = [(slices,)]
    return out


def test_the_pivot_in_time_slices_gives_exactly_the_rows_of_one_pivot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    whole = _pivoted(tmp_path / "whole.duckdb", 10**9, monkeypatch)
    sliced = _pivoted(tmp_path / "sliced.duckdb", 97, monkeypatch)  # ~65 slices, edges between samples
    assert whole.pop("slices") == [(1,)] and sliced.pop("slices")[0][0] > 50
    assert len(whole["gpu_samples"]) == 12 * 185  # every (time, GPU) once: none lost or doubled at an edge
    assert len(whole["gpu_events"]) == 12 and whole["nic_samples"]
    assert sliced == whole


class _Answers(BaseHTTPRequestHandler):
    bodies: ClassVar[list[bytes]] = []

    def do_GET(self) -> None:
        body = type(self).bodies.pop(0) if type(self).bodies else b""
        if not body:
            body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": []}}).encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def answers() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_fetch_holds_one_parsed_answer_at_a_time(answers: str) -> None:
    """Python's side of the fetch (tracemalloc; DuckDB's and Arrow's memory is bounded by the memory limit): the
    peak stays well under two parsed answers, so the previous answer is freed before the next one is read."""
    series = [
        {
            "metric": {"Hostname": f"h{i // 8}", "gpu": str(i % 8), "UUID": f"GPU-{i}"},
            "values": [[1_000 + 15 * j, f"{60 + j % 9}.125"] for j in range(100)],
        }
        for i in range(400)
    ]
    body = json.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}}).encode()
    del series
    tracemalloc.start()
    try:
        parsed = json.loads(body)
        one_answer_bytes = tracemalloc.get_traced_memory()[0]
        del parsed
        _Answers.bodies = [body] * 6
        with Store(":memory:") as store:
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            report = fetch_into(store, PrometheusClient(answers), start_s=1_000.0, end_s=2_485.0, step_s=15.0)
            peak_bytes = tracemalloc.get_traced_memory()[1] - before
    finally:
        tracemalloc.stop()
    assert report.samples == 6 * 400 * 100
    assert peak_bytes < 2 * one_answer_bytes, (peak_bytes, one_answer_bytes)


def _limits(conn: duckdb.DuckDBPyConnection) -> tuple[Any, ...]:
    row = conn.execute("SELECT current_setting('memory_limit'), current_setting('threads')").fetchone()
    assert row is not None
    return tuple(row)


def test_staging_and_analysis_connections_are_under_the_memory_limit(
    answers: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reference = duckdb.connect()
    reference.execute(f"SET memory_limit = '{STAGING_MEMORY_LIMIT_MB}MB'")
    reference.execute(f"SET threads = {min(MAX_THREADS, os.cpu_count() or 1)}")
    expected = _limits(reference)
    assert expected != _limits(duckdb.connect())  # the defaults (80 % of RAM) differ: the check can fail
    with Store(tmp_path / "staging.duckdb") as store:
        Staging(store)
        assert _limits(store.conn) == expected
    seen: list[tuple[Any, ...]] = []

    def analyze(store: Store) -> Any:
        seen.append(_limits(store.conn))
        raise SystemExit(0)

    monkeypatch.setattr(analyze_prometheus, "analyze", analyze)
    series = [{"metric": {"Hostname": "h", "gpu": "0"}, "values": [[1_000, "60"], [1_015, "61"]]}]
    _Answers.bodies = [
        json.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}}).encode()
    ]
    with pytest.raises(SystemExit):
        main(
            [
                "analyze",
                "--prometheus",
                answers,
                "--start",
                "1000",
                "--end",
                "1015",
                "--step",
                "15s",
                "--db",
                str(tmp_path / "kept.duckdb"),
            ]
        )
    assert seen == [expected]
