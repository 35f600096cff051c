"""`aiops analyze --prometheus` in bounded memory (issue 13: 1024 GPUs x 6 h under 500 MB peak RSS, measured by
bench/prometheus_source.py): the pivot of the staged samples runs in time slices and gives exactly the rows one
pivot gives; the fetch holds one parsed answer at a time; every DuckDB connection it uses is under the limit."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
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
from aiops.store import Store

ROOT = Path(__file__).resolve().parents[2]
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
    """Serves `bodies[prefix]` in order to requests under /<prefix>/, then empty matrices."""

    bodies: ClassVar[dict[str, list[bytes]]] = {}

    def do_GET(self) -> None:
        queue = type(self).bodies.get(self.path.split("/")[1], [])
        body = queue.pop(0) if queue else b""
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
    _Answers.bodies = {}


def _matrix(series: int, points: int) -> bytes:
    result = [
        {
            "metric": {"Hostname": f"h{i // 8}", "gpu": str(i % 8), "UUID": f"GPU-{i}"},
            "values": [[1_000 + 15 * j, f"{60 + j % 9}.125"] for j in range(points)],
        }
        for i in range(series)
    ]
    return json.dumps({"status": "success", "data": {"resultType": "matrix", "result": result}}).encode()


# Runs in a child process: warms up on a small fetch through the same code (imports, DuckDB, Arrow resident),
# resets the process's peak RSS (/proc/self/clear_refs: 5), then either holds one answer as the client parses
# it ("one") or runs the whole fetch ("fetch"); prints the peak RSS above the warm process in kB, for the fetch
# as the staging's pivot begins (the fetch proper; with what DuckDB holds then: the staged samples, bounded by
# its memory limit) and at its end.
CHILD = """
import json, sys
from aiops.sources import mapping
from aiops.sources.prometheus import PrometheusClient, fetch_into
from aiops.store import Store

def kb(field):
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(field + ":"))

mode, url = sys.argv[1:]
span = dict(start_s=1_000.0, end_s=2_485.0, step_s=15.0)
with Store(":memory:") as warm:
    fetch_into(warm, PrometheusClient(url + "/warm"), **span)
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")
base = kb("VmRSS")
out = {}
if mode == "one":
    held = next(PrometheusClient(url + "/one").query_range("x", span["start_s"], span["end_s"], span["step_s"]))
    out["samples"] = sum(len(s["values"]) for s in held)
else:
    finish = mapping.Staging.finish
    def measured(self, *args, **kwargs):
        out["fetch_kb"] = kb("VmHWM") - base
        sql = "SELECT sum(memory_usage_bytes) // 1024 FROM duckdb_memory()"
        out["duckdb_kb"] = int(self.store.conn.execute(sql).fetchone()[0])
        return finish(self, *args, **kwargs)
    mapping.Staging.finish = measured
    with Store(":memory:") as store:
        out["samples"] = fetch_into(store, PrometheusClient(url + "/fetch"), **span).samples
out["peak_kb"] = kb("VmHWM") - base
print(json.dumps(out))
"""


def _child(mode: str, url: str) -> dict[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, mode, url], capture_output=True, text=True, timeout=120, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def test_the_fetch_holds_one_parsed_answer_at_a_time(answers: str) -> None:
    """The process's memory (peak RSS of a child that does only this, above its warmed-up self): fetching six
    answers instead of one adds, besides the samples DuckDB stages, less than one parsed answer, so each answer
    is freed before the next one is read. Holding them all would add five."""
    body, small = _matrix(600, 100), _matrix(8, 100)
    _Answers.bodies = {"warm": [small] * 6, "one": [body]}
    one = _child("one", answers)
    fetched = {}
    for n in (1, 6):
        _Answers.bodies = {"warm": [small] * 6, "fetch": [body] * n}
        fetched[n] = _child("fetch", answers)
        assert fetched[n]["samples"] == n * 600 * 100
    assert one["samples"] == 600 * 100
    assert one["peak_kb"] > 10_000, one  # an answer big enough to stand out of the allocator's noise
    more_kb = (fetched[6]["fetch_kb"] - fetched[6]["duckdb_kb"]) - (
        fetched[1]["fetch_kb"] - fetched[1]["duckdb_kb"]
    )
    assert more_kb < one["peak_kb"], (more_kb, one, fetched)


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
    _Answers.bodies = {
        "limits": [
            json.dumps({"status": "success", "data": {"resultType": "matrix", "result": series}}).encode()
        ]
    }
    with pytest.raises(SystemExit):
        main(
            [
                "analyze",
                "--prometheus",
                answers + "/limits",
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
