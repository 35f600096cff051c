"""Issue 35 item 4, "blind <= 2 scrape intervals": how soon the fleet says it lost sight, and what keeps one late
read or one missed scrape from paging (aiops/fleet/sight.py, aiops/fleet/source.py `urgent`).

- The source (`SourceSight`, on a clock the test holds, judged every tick as the loop judges it): one step read
  that fails and is retried every tick until the next step's read goes through is not blindness; two step reads
  in a row without data are, at exactly two scrape intervals after the last data (not two plus a slack).
- The fleet's `Service` on a real Prometheus holding two node agents' exports (bulk-imported with promtool, every
  step known), with a flush interval longer than the test (300 s), ticked once a held second: node b's agent
  stops, and `node_agent_lost` opens in the very tick that reads its second missed step (the service flushes
  when a read finds an agent lost, not at its flush interval); node a's single missed scrape opens nothing. Then the
  store goes away (a port nobody listens on): `source_blind` opens in the tick two intervals after the last read
  that brought data, and resolves in the tick a read brings data again.
"""

from __future__ import annotations

import json
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from aiops.cli.fleet import FLEET_NAME
from aiops.config import NodeConfig, parse_config
from aiops.fleet.sight import SourceSight
from aiops.fleet.source import FleetCollector, FleetSetup, fleet_sources
from aiops.service.service import Service
from aiops.store.conditions import NODE_AGENT_LOST, SOURCE_BLIND
from tests.prometheus_process import backfilled

T0 = 1_767_225_600.0
STEP_S = 15.0
STEPS = 16  # scrapes 0..15
OUTAGE = 12  # the store goes away after the read of step 12; back two steps and a tick later
B_UNTIL = 6  # b's agent answers scrapes 0..6, none after (killed)
A_MISSED = 3  # a's scrape 3 went missing (up 0 once): one late scrape, not a lost agent


class Clock:
    def __init__(self, now_s: float) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def test_one_failed_step_read_is_not_blindness_two_are_at_exactly_two_intervals() -> None:
    clock = Clock(1_000_000.0)
    seen = SourceSight("http://prom:9090", STEP_S, clock, started_s=clock())
    seen.begin()
    seen.read(samples=40, behind_s=0.0)
    last_data_s = clock()
    # the next step's read fails; the loop tries again every tick, until the one after goes through
    for tick in range(1, 2 * int(STEP_S)):
        clock.now_s = last_data_s + tick
        if tick >= STEP_S:
            seen.begin()
            seen.failed("no answer: [Errno 111] Connection refused")
        assert seen.blind() is None, f"one failed step read made the fleet blind {tick} s after its last data"
    clock.now_s = last_data_s + 2 * STEP_S
    seen.begin()
    seen.read(samples=40, behind_s=0.0)  # that step's read went through
    assert seen.blind() is None
    # then the store goes away: the reads of the next two steps fail
    last_data_s = clock()
    for tick in range(int(STEP_S), 2 * int(STEP_S)):
        clock.now_s = last_data_s + tick
        seen.begin()
        seen.failed("no answer: [Errno 111] Connection refused")
        assert seen.blind() is None, f"blind after one step read, {tick} s after the last data"
    clock.now_s = last_data_s + 2 * STEP_S
    seen.begin()
    seen.failed("no answer: [Errno 111] Connection refused")
    assert seen.blind() == "cannot read http://prom:9090: no answer: [Errno 111] Connection refused"


def at(k: int) -> float:
    return T0 + STEP_S * k


def _exposition() -> str:
    lines = ["# TYPE aiops_node_info gauge"]
    ups = ["# TYPE up gauge"]
    for k in range(STEPS):
        for node in ("a", "b"):
            instance = f"10.0.0.{ord(node)}:9484"
            answered = not (node == "b" and k > B_UNTIL) and not (node == "a" and k == A_MISSED)
            if answered:
                lines.append(f'aiops_node_info{{node="{node}",rack="rack0",instance="{instance}"}} 1 {at(k)}')
            ups.append(f'up{{job="aiops",instance="{instance}"}} {int(answered)} {at(k)}')
    return "\n".join([*lines, *ups, "# EOF", ""])


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with backfilled(tmp_path_factory.mktemp("blind-timing"), _exposition()) as url:
        yield url


def _refused_url() -> str:
    """A loopback port nobody listens on: the store is down (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def _fleet(prometheus: str, path: Path, clock: Clock, **fleet: Any) -> Service:
    document: dict[str, Any] = {
        "store": {"path": str(path), "flush_interval_s": 300.0},
        "http": {"listen": ""},
        # reads on multiples of the step, as soon as the step is past: the tick a condition opens in is known
        "fleet": {
            "prometheus": prometheus,
            "step_s": STEP_S,
            "delay_s": 0.0,
            "read_after_scrapes": False,
            "lookback_s": 2 * STEP_S,
            "rank_reads": 1,
            "timeout_s": 5.0,
            **fleet,
        },
    }
    config = parse_config(document, "<fleet>")
    node = NodeConfig.model_construct(name=FLEET_NAME, rack="", hosts=config.node.hosts)
    config = config.model_copy(update={"node": node})
    setup = FleetSetup(config.fleet)
    return Service(
        config,
        sources=lambda store: fleet_sources(store, setup, clock=clock),
        clock=clock,
        sleep=lambda _s: None,
    )


def test_a_lost_agent_and_a_lost_store_open_in_the_tick_that_sees_them(
    prometheus: str, tmp_path: Path
) -> None:
    clock = Clock(at(2))  # the look-back reads scrapes 0..2 at the first tick
    service = _fleet(prometheus, tmp_path / "fleet.duckdb", clock)
    service.start()
    service.outbox.stop(timeout_s=5.0)
    opened: dict[tuple[str, str], float] = {}
    try:
        assert service.sources is not None
        collector = service.sources.sources[0].collector
        assert isinstance(collector, FleetCollector)

        def tick_until(end_s: float) -> None:
            while clock.now_s < end_s:
                clock.now_s += 1.0
                service.tick()
                for key, incident in service.conditions.open.items():
                    opened.setdefault(key, clock.now_s)
                    assert incident.opened_ts_s <= clock.now_s

        tick_until(at(OUTAGE))
        # b's scrapes 7 and 8 missed: lost in the tick that reads step 8, not at the 300 s flush interval
        assert (NODE_AGENT_LOST, "a") not in opened, "one missed scrape made node a's agent lost"
        assert opened.get((NODE_AGENT_LOST, "b")) == at(B_UNTIL + 2), opened
        lost = service.conditions.open[(NODE_AGENT_LOST, "b")]
        assert lost.symptoms[0].ts_s == at(B_UNTIL)  # its last sample
        # b's alone: otherwise the fleet flushes no more often than its interval (300 s) says
        assert service.flushes == 1, service.flushes

        last_read_s = collector.sight.last_data_s
        assert last_read_s == at(OUTAGE)
        collector.client.url = _refused_url()  # the store goes away
        tick_until(last_read_s + 2 * STEP_S - 1)
        assert (SOURCE_BLIND, "fleet") not in opened, "blind before two scrape intervals without data"
        tick_until(last_read_s + 2 * STEP_S)
        assert opened.get((SOURCE_BLIND, "fleet")) == last_read_s + 2 * STEP_S, opened
        assert service.sources.blind is not None and service.sources.blind() is not None  # /readyz 503

        collector.client.url = prometheus  # back: the next tick reads (the steps it missed are in the store)
        tick_until(clock.now_s + 1.0)
        assert (SOURCE_BLIND, "fleet") not in service.conditions.open, "not resolved in the tick it saw again"
    finally:
        service.flush()
        if service.sources is not None:
            service.sources.close()
        service.owner.close()


def _scraper_view(now_s: float) -> dict[str, Any]:
    """The targets API of the scraper that took the history above, as it answers at `now_s`: each target's newest
    scrape, b's refused after B_UNTIL (killed: nothing listens), a's scrape A_MISSED timed out (one late scrape)."""
    k = min(STEPS - 1, int((now_s - T0) // STEP_S))
    targets = []
    for node in ("a", "b"):
        instance = f"10.0.0.{ord(node)}:9484"
        error = ""
        if node == "b" and k > B_UNTIL:
            error = f'Get "http://{instance}/metrics": dial tcp {instance}: connect: connection refused'
        elif node == "a" and k == A_MISSED:
            error = f'Get "http://{instance}/metrics": context deadline exceeded'
        stamp = datetime.fromtimestamp(at(k), UTC).isoformat().replace("+00:00", "Z")
        labels = {"job": "aiops", "instance": instance}
        health = "down" if error else "up"
        targets.append({"labels": labels, "health": health, "lastScrape": stamp, "lastError": error})
    return {"status": "success", "data": {"activeTargets": targets, "droppedTargets": []}}


@pytest.fixture
def scraper_at(request: pytest.FixtureRequest) -> Iterator[tuple[str, Clock]]:
    """A loopback targets API answering `_scraper_view` on the test's clock (the scraper's word is what the test
    holds fixed; tests/fleet/test_fleet_scrapes.py reads the real ones)."""
    clock = Clock(at(2))

    class Targets(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = json.dumps(_scraper_view(clock.now_s)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Targets)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", clock
    finally:
        server.shutdown()
        server.server_close()


def test_a_refused_scrape_opens_at_the_poll_after_it_and_one_timed_out_scrape_opens_nothing(
    prometheus: str, scraper_at: tuple[str, Clock], tmp_path: Path
) -> None:
    """The fleet at its default read delay (5 s after each step) with the scraper's targets API: b's first refused
    scrape (step B_UNTIL + 1) opens `node_agent_lost` at the poll after it (a tenth of the step: within 2 ticks),
    before the step read would (5 s) and a whole step before presence's second missed step; a's single timed-out
    scrape opens nothing; the fleet flushed for b alone (its flush interval is 300 s)."""
    url, clock = scraper_at
    service = _fleet(prometheus, tmp_path / "fleet.duckdb", clock, delay_s=5.0, targets_url=url)
    service.start()
    service.outbox.stop(timeout_s=5.0)
    opened: dict[tuple[str, str], float] = {}
    try:
        while clock.now_s < at(B_UNTIL + 3):
            clock.now_s += 1.0
            service.tick()
            for key in service.conditions.open:
                opened.setdefault(key, clock.now_s)
        assert (NODE_AGENT_LOST, "a") not in opened, "one timed-out scrape made node a's agent lost"
        refused_s = at(B_UNTIL + 1)
        assert refused_s <= opened.get((NODE_AGENT_LOST, "b"), 0.0) <= refused_s + 2.0, (opened, refused_s)
        lost = service.conditions.open[(NODE_AGENT_LOST, "b")]
        assert lost.opened_ts_s == refused_s and lost.symptoms[0].ts_s == at(B_UNTIL), lost
        detail = lost.symptoms[0].detail
        assert detail["scrape"]["refused"] and "nothing listens at 10.0.0.98:9484" in detail["reason"], detail
        assert service.flushes == 1, service.flushes
    finally:
        service.flush()
        if service.sources is not None:
            service.sources.close()
        service.owner.close()
