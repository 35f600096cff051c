"""When the service's loop flushes on wall time (`aiops run`, `aiops fleet`: no sleep injected): its first tick's
rows are flushed at once, so /readyz answers about a tick after start, not a flush interval after; the flushes then
keep their cadence from the start (the second comes a whole `flush_interval_s` after it), and a loop on a clock a
test or a bench holds keeps its cadence whole (no early flush)."""

from __future__ import annotations

import time
from pathlib import Path

from aiops.config import parse_config
from aiops.service.http_stack import ready
from aiops.service.service import Service
from aiops.service.sources import Sources


def _service(tmp_path: Path, **seams: object) -> Service:
    document = {
        "store": {"path": str(tmp_path / "n.duckdb"), "flush_interval_s": 300.0},
        "http": {"listen": ""},
    }
    return Service(
        parse_config(document, "test config"),
        sources=lambda _: Sources([], time.time, tick_s=0.01, declares_inventory=False),
        **seams,  # type: ignore[arg-type]
    )


def _close(service: Service) -> None:
    """What `Service.run` closes after its loop."""
    service.profiles.close()
    service.outbox.stop()
    service.owner.close()


def test_on_wall_time_the_first_tick_flushes_and_the_service_is_ready(tmp_path: Path) -> None:
    service = _service(tmp_path)
    service.start()
    try:
        started_s = service.last_flush
        assert ready(service) == (False, "starting: no flush yet")
        service.tick()
        assert service.flushes == 1 and ready(service) == (True, "ready")
        assert service.last_flush == started_s  # the cadence from the start: the next in 300 s, not 300 s on
        service.tick()
        assert service.flushes == 1
    finally:
        _close(service)


def test_on_a_held_clock_the_first_tick_waits_for_the_flush_interval(tmp_path: Path) -> None:
    now = [0.0]
    service = _service(tmp_path, clock=lambda: now[0], sleep=lambda _s: None)
    service.start()
    try:
        service.tick()
        assert service.flushes == 0 and not service.ready
        now[0] = 300.0
        service.tick()
        assert service.flushes == 1 and service.ready
    finally:
        _close(service)
