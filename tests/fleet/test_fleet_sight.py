"""Issue 35 item 4: how the fleet judges its source, read by read (aiops/fleet/sight.py, on a clock the test
holds), and the fleet's source against a loopback server that answers garbage (what a proxy's error page, a
wrong URL or a half-broken store gives): the read fails, one collector_errors row says why (not one per tick),
and once two scrape intervals have passed without data the fleet is blind, for that reason, until a read brings
data again."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from aiops.config import FleetConfig
from aiops.fleet.sight import SourceSight
from aiops.fleet.source import FleetCollector, FleetSetup
from aiops.store import Store
from aiops.store.conditions import SOURCE_BLIND

STEP_S = 15.0
GRACE_S = 2 * STEP_S


class Clock:
    def __init__(self, now_s: float = 1_000_000.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def sight(clock: Clock) -> SourceSight:
    return SourceSight("http://prom:9090", STEP_S, clock, started_s=clock())


def test_a_source_is_blind_after_two_intervals_without_data_and_says_why() -> None:
    clock = Clock()
    seen = sight(clock)
    assert seen.blind() is None  # starting, within the grace
    assert seen.unready() == "starting: no read of http://prom:9090 has brought data yet"
    seen.begin()
    seen.read(samples=120, behind_s=0.0)
    assert seen.unready() is None
    clock.now_s += GRACE_S - 1
    seen.begin()
    seen.failed("http://prom:9090/api/v1/query_range: no answer: [Errno 111] Connection refused")
    assert seen.blind() is None  # one failed read is not blindness yet
    clock.now_s += 2
    assert seen.blind() == (
        "cannot read http://prom:9090: http://prom:9090/api/v1/query_range: no answer: [Errno 111] Connection refused"
    )
    assert seen.unready() == f"blind: {seen.blind()}"
    condition = seen.condition(since_ts_s=123.0)
    assert condition is not None and condition.kind == SOURCE_BLIND and condition.since_ts_s == 123.0
    seen.begin()
    seen.read(samples=120, behind_s=0.0)  # back
    assert seen.blind() is None and seen.condition(0.0) is None


def test_blind_after_s_sets_the_grace_where_the_fleets_host_falls_behind() -> None:
    """`[fleet] blind_after_s`: a fleet on a host known to fall behind (a loaded test runner, a small VM) says
    blind after that long, not after two scrape intervals; unset, two intervals (at least 10 s)."""
    clock = Clock()
    seen = SourceSight("http://prom:9090", 2.0, clock, started_s=clock(), blind_after_s=60.0)
    seen.begin()
    seen.read(samples=120, behind_s=0.0)
    clock.now_s += 30
    seen.begin()
    seen.read(samples=120, behind_s=30.0)  # a starved fleet's read, 30 s behind: fifteen steps
    assert seen.blind() is None
    seen.begin()
    seen.read(samples=120, behind_s=61.0)
    assert seen.blind() is not None and "behind" in str(seen.blind())
    assert SourceSight("u", 2.0, clock).grace_s == 10.0 and SourceSight("u", 15.0, clock).grace_s == 30.0


def test_empty_slow_and_hung_reads_are_blindness_too() -> None:
    clock = Clock()
    empty = sight(clock)
    empty.begin()
    empty.read(samples=120, behind_s=0.0)
    for _ in range(3):
        clock.now_s += STEP_S
        empty.begin()
        empty.read(samples=0, behind_s=0.0)  # Prometheus answers, with nothing of any node agent
    assert empty.blind() == "http://prom:9090 answers but holds no sample of any node agent"
    slow = sight(clock)
    slow.begin()
    clock.now_s += 29.0
    # the look-back took 29 s and left it 60 s behind: starting, not blind; it answers from what it read
    slow.read(samples=120, behind_s=60.0)
    assert slow.blind() is None and slow.unready() is None
    slow.begin()
    clock.now_s += 3.0
    slow.read(samples=120, behind_s=2.0)  # caught up
    slow.begin()
    clock.now_s += 40.0
    # then a read took 40 s, and the data is 55 s behind: falling behind
    slow.read(samples=120, behind_s=55.0)
    assert slow.blind() == "reads of http://prom:9090 fall 55 s behind (the last took 40.0 s: slow)"
    hung = sight(clock)
    hung.begin()
    hung.read(samples=120, behind_s=0.0)
    hung.begin()
    clock.now_s += GRACE_S + 1  # a read still waiting on the store (the loop is held; /readyz is not)
    assert hung.blind() == f"a read of http://prom:9090 has been waiting {GRACE_S + 1:.0f} s (slow)"


@contextmanager
def garbage_server() -> Iterator[str]:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b"<html><body>502 Bad Gateway</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


def test_a_store_answering_garbage_blinds_the_fleet_with_one_row_per_reason(tmp_path: Path) -> None:
    clock = Clock()
    with garbage_server() as url, Store(tmp_path / "fleet.duckdb") as store:
        config = FleetConfig(prometheus=url, step_s=STEP_S, lookback_s=60.0, delay_s=0.0, timeout_s=5.0)
        collector = FleetCollector(store, FleetSetup(config), clock=clock)
        rows = []
        for _ in range(4):  # ticks: every one tries again, one row says why
            errors = collector.collect(clock()).get("collector_errors")
            rows.extend(errors.to_pylist() if errors is not None else [])
            clock.now_s += 1.0
        assert [(r["error"], "not JSON" in r["detail"]) for r in rows] == [("read_failed", True)], rows
        assert collector.conditions().raised == []  # not yet two intervals
        clock.now_s += GRACE_S
        collector.collect(clock())
        raised = collector.conditions().raised
        assert [c.kind for c in raised] == [SOURCE_BLIND] and "not JSON" in raised[0].reason, raised
        assert collector.sight.unready() is not None and "not JSON" in str(collector.sight.unready())
        collector.close()
