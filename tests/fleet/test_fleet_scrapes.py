"""Issue 35 "a killed node agent -> its incident within two scrape intervals of its last sample": the scraper's own
word on each target (aiops/fleet/scrapes.py `ScrapeWatch`), read from a real Prometheus and a real
VictoriaMetrics (`-promscrape.config`) scraping two loopback exporters every 1.5 s with a 0.7 s timeout (the
watch polled every 0.2 s: each scrape seen, as the product's poll every tenth of a step sees each at its steps):

- one scrape that times out (the exporter answers after the timeout once) is one late scrape: no verdict; the next
  scrape that goes through clears it;
- the exporter's socket closed (nothing listens: "connection refused"): lost at the first refused scrape, one
  scrape interval after its last good one (data times: the scrapes' own);
- two timeouts in a row: lost (not refused); an exporter answering again on the same port clears both.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from aiops.fleet.scrapes import RETRY_S, ScrapeWatch, Verdict, parse_targets
from aiops.sources.prometheus import PrometheusClient
from tests.agent_cluster import stop
from tests.prometheus_process import prometheus_running
from tests.service_helpers import free_port, get, require_binary, wait_for

SCRAPE_S = 1.5
# a timed-out scrape shows in the targets API from its timeout to the next scrape's end: SCRAPE_S - TIMEOUT_S,
# several polls (Prometheus 2.42 lets a scrape run past a timeout equal to the interval)
TIMEOUT_S = 0.7
POLL_S = 0.2  # the watch's poll here, so that no scrape goes unseen


class Exporter:
    """A loopback /metrics that can be made to answer late (`slow` scrapes past the timeout) or go away."""

    def __init__(self, port: int) -> None:
        self.port, self.slow, self.served = port, 0, 0
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if owner.slow > 0:
                    owner.slow -= 1
                    time.sleep(TIMEOUT_S + 0.5)
                body = b'aiops_node_info{node="n"} 1\n'
                try:
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)
                except OSError:
                    return  # the scraper gave up on the late answer
                owner.served += 1

            def log_message(self, *_: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        """The listening socket first, as a killed process's: no scrape is accepted and then left unanswered."""
        self.server.socket.close()
        self.server.shutdown()


class EveryPoll(ScrapeWatch):
    """The product's watch, due at every poll the test makes (POLL_S): at a 1 s scrape the product's own 1 s
    poll could see only the second of two scrapes (docs/FLEET.md), which this test is not about."""

    @property
    def poll_s(self) -> float:
        return 0.0


def config(ports: list[int]) -> str:
    targets = ", ".join(f'"127.0.0.1:{p}"' for p in ports)
    return (
        f"global: {{scrape_interval: {SCRAPE_S * 1000:.0f}ms, scrape_timeout: {TIMEOUT_S * 1000:.0f}ms}}\n"
        f"scrape_configs:\n- job_name: aiops\n  static_configs: [{{targets: [{targets}]}}]\n"
    )


@contextmanager
def victoria_scraping(folder: Path, config_file: Path) -> Iterator[int]:
    binary = require_binary("victoria-metrics")
    port = free_port()
    with (folder / "vm.log").open("ab") as log:
        proc = subprocess.Popen(
            [
                binary,
                f"-promscrape.config={config_file}",
                f"-storageDataPath={folder / 'vm'}",
                f"-httpListenAddr=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=log,
        )
        try:
            wait_for(
                lambda: get(f"http://127.0.0.1:{port}/health", 2)[0] == 200, 60, "victoria-metrics ready"
            )
            yield port
        finally:
            stop(proc)


@pytest.mark.parametrize("store", ["prometheus", "victoria-metrics"])
def test_one_timeout_is_no_verdict_a_refused_scrape_is_lost_at_once_two_timeouts_are_lost(
    tmp_path: Path, store: str
) -> None:
    ports = [free_port(), free_port()]
    gone, late = (f"127.0.0.1:{p}" for p in ports)
    exporters = {gone: Exporter(ports[0]), late: Exporter(ports[1])}
    config_file = tmp_path / "scrape.yml"
    config_file.write_text(config(ports))
    running = (
        prometheus_running(config_file, tmp_path)
        if store == "prometheus"
        else victoria_scraping(tmp_path, config_file)
    )
    try:
        with running as port:
            watch = EveryPoll(PrometheusClient(f"http://127.0.0.1:{port}", timeout_s=5.0), SCRAPE_S)
            watched = {gone, late}

            def until(check: Callable[[], Any], what: str, within_s: float = 16.0) -> Any:
                def polled() -> Any:
                    watch.poll(watched)
                    return check()

                return wait_for(polled, within_s, what, interval_s=POLL_S)

            until(
                lambda: all(watch.targets.get(t) and watch.targets[t].last_up_s for t in watched), "both up"
            )
            assert watch.answered and watch.lost() == {}

            # one scrape past the timeout: a late scrape, no verdict; the next good one clears it
            exporters[late].slow = 1
            until(lambda: watch.targets[late].failed == 1, "the late scrape seen")
            assert watch.lost() == {}, watch.lost()
            error = watch.targets[late].error
            # the scraper's words for a scrape cut at its timeout: Prometheus says the deadline, VictoriaMetrics
            # a timeout or, when it closes the connection mid-answer under load, an unexpected EOF
            assert any(w in error for w in ("deadline", "timeout", "EOF")) and "refused" not in error, error
            until(lambda: watch.targets[late].failed == 0, "the next scrape through")
            assert watch.lost() == {}

            # nothing listens: lost at the first refused scrape, one interval after its last good one (closed just
            # after a scrape, not while the next one connects: a connection the kernel queued before the socket
            # closed is reset, not refused, as a kill -9 in the middle of a scrape would have it)
            scraped_s = watch.targets[gone].at_s
            until(lambda: watch.targets[gone].at_s > scraped_s, "a fresh scrape of the one to go")
            exporters.pop(gone).close()
            verdicts: dict[str, Verdict] = until(lambda: watch.lost(), "the refused scrape's verdict")
            assert list(verdicts) == [gone], verdicts
            refused = verdicts[gone]
            assert refused.refused and refused.failed == 1 and "connection refused" in refused.error, refused
            assert refused.last_up_s is not None
            assert refused.lost_at_s - refused.last_up_s <= 1.5 * SCRAPE_S, refused
            assert "nothing listens" in refused.reason

            # two timeouts in a row: lost, not refused
            exporters[late].slow = 2
            until(lambda: late in watch.lost(), "two late scrapes' verdict")
            two = watch.lost()[late]
            assert not two.refused and two.failed == 2 and two.lost_at_s > two.first_failed_s, two

            # back on the same port, and the late one answering in time: both cleared
            exporters[gone] = Exporter(ports[0])
            until(lambda: watch.lost() == {}, "both back")
    finally:
        for exporter in exporters.values():
            exporter.close()


def test_the_targets_answer_is_hostile_data_a_target_gone_is_forgotten_a_store_without_it_leaves_presence_alone(
    tmp_path: Path,
) -> None:
    """What does not parse is skipped, entry by entry; a target never scraped yet (Go's zero time) or `unknown`
    gives no verdict; a target no longer listed is forgotten; a store down keeps its verdicts; one that answers 404 (Thanos Query, Mimir: no targets API) gives none either, is logged
    once and asked again only every RETRY_S."""
    answer = {
        "activeTargets": [
            "not a target",
            {
                "labels": {"instance": "a:9484"},
                "health": "up",
                "lastScrape": "2026-12-05T20:58:40.255517547Z",
            },
            {"labels": {"instance": "b:9484"}, "health": "down", "lastScrape": "0001-01-01T00:00:00Z"},
            {"labels": {"instance": "c:9484"}, "health": "sideways", "lastScrape": "2026-12-05T20:58:40Z"},
            {"labels": {"instance": 7}, "health": "down", "lastScrape": "2026-12-05T20:58:40Z"},
            {"labels": {"instance": "d:9484"}, "health": "down", "lastScrape": "yesterday", "lastError": "x"},
            {
                "labels": {"instance": "e:9484"},
                "health": "down",
                "lastScrape": "2026-12-05T20:58:39.573Z",
                "lastError": "dial tcp4 10.0.0.5:9484: connect: connection refused" + "!" * 500,
            },
        ]
    }
    found = parse_targets(answer)
    assert [(s.instance, s.health) for s in found] == [("a:9484", "up"), ("e:9484", "down")], found
    assert found[0].at_s == pytest.approx(1796504320.255517) and len(found[1].error) == 200
    assert parse_targets(None) == [] and parse_targets({"activeTargets": "x"}) == []
    # a target the scraper lists no more (its pod deleted) takes its verdict with it: presence decides then
    listing = ScrapeWatch(PrometheusClient("http://127.0.0.1:9"), 15.0)
    listing.answered = True  # as after a poll that answered
    listing.take(found, {"e:9484"})
    assert list(listing.lost()) == ["e:9484"] and listing.lost()["e:9484"].refused
    listing.take(found[:1], {"e:9484"})
    assert listing.lost() == {} and "e:9484" not in listing.targets
    # the store itself gone (nothing listens at its port): its last answer's verdicts stand, nothing seen since
    # says the agent is back (its incident stays open while the fleet's sight says the store is down)
    down = ScrapeWatch(PrometheusClient(f"http://127.0.0.1:{free_port()}", timeout_s=2.0), 15.0)
    down.answered = True
    down.take(found, {"e:9484"})
    down.poll({"e:9484"})
    assert down.polls == 1 and list(down.lost()) == ["e:9484"] and not down.unsupported, down

    class NotFound(BaseHTTPRequestHandler):
        asked = 0

        def do_GET(self) -> None:
            NotFound.asked += 1
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *_: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), NotFound)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    now = [1000.0]
    try:
        client = PrometheusClient(f"http://127.0.0.1:{server.server_address[1]}", timeout_s=5.0)
        watch = ScrapeWatch(client, 15.0, lambda: now[0])
        watch.take(found, {"e:9484"})  # a verdict from an answer before the store stopped answering
        assert watch.unsupported is False and watch.lost() == {}  # no poll has answered yet: no verdict
        watch.poll({"e:9484"})
        assert watch.unsupported and not watch.answered and watch.lost() == {} and NotFound.asked == 1
        now[0] += RETRY_S - 1
        watch.poll({"e:9484"})
        assert NotFound.asked == 1  # not asked again before RETRY_S
        now[0] += 1
        watch.poll({"e:9484"})
        assert NotFound.asked == 2
    finally:
        server.shutdown()
        server.server_close()
