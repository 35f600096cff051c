"""Issue 27 item 7: the console showed the twin's clock and the wall clock side by side, unlabelled. Each page
now shows the times of one clock and says which: on the demo workspace (a twin on the simulator's clock, from
2026-01-01) the incident pages show data times only, labelled as the twin's, and the audit log and the reports
the wall clock, labelled so; a twin the service ran on wall time shows the proposals' times beside the data's."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from html import unescape
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from aiops.store import Workspace
from tests.console_helpers import client, fresh_demo, make_demo, sign_in

TIME = re.compile(r"\b(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})\b")
CLOCK = re.compile(r'<p class="clock" id="clock">Times on this page: ([^<]*)</p>')


@pytest.fixture(scope="module")
def demo_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("console-clock"))


@pytest.fixture
def demo(demo_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fresh_demo(demo_source, tmp_path, monkeypatch)


def _page(c: TestClient, path: str) -> tuple[str, list[float]]:
    """The page's one clock label and every time it shows (seconds since the epoch)."""
    response = c.get(path)
    assert response.status_code == 200, (path, response.status_code)
    labels = CLOCK.findall(response.text)
    assert len(labels) == 1, (path, labels)
    times = [datetime.fromisoformat(t).replace(tzinfo=UTC).timestamp() for t in TIME.findall(response.text)]
    return unescape(labels[0]), times


def test_each_page_shows_one_clock_and_names_it(demo: Path) -> None:
    with Workspace(demo).read() as store:
        first, last = store.query("SELECT min(ts_s) AS a, max(ts_s) AS b FROM gpu_samples")[0].values()
        recorded = float(store.scalar("SELECT min(ts_s) FROM audit_log"))
    assert recorded - last > 86400  # the twin's day is long before the wall clock: mixing them shows
    with client(demo) as c:
        sign_in(c, "alice")
        for path in ("/", "/incidents/INC-0001", "/collectors"):
            label, times = _page(c, path)
            assert label.startswith("data time: the twin's simulated clock") and "not the wall clock" in label
            assert times, path
            outside = [t for t in times if not first - 3600 <= t <= last + 3600]
            assert outside == [], (path, outside)  # no wall-clock time on a page of data times
        incident = c.get("/incidents/INC-0001").text
        assert "dated on the wall clock, not the twin's: see the audit log" in incident
        label, times = _page(c, "/audit")
        assert label == "wall clock (when each was recorded), UTC." and times
        assert all(t >= recorded - 1 for t in times)
        assert _page(c, "/reports")[0].startswith("wall clock")
        assert _page(c, "/chat")[0].startswith("data time: the twin's simulated clock")


def test_a_twin_on_wall_time_shows_the_proposals_times_with_the_data(demo: Path) -> None:
    with Workspace(demo).write() as store:
        store.conn.execute("UPDATE sim_runs SET epoch_ts_s = 1767225600.0")
    with client(demo) as c:
        sign_in(c, "alice")
        label, _ = _page(c, "/incidents/INC-0001")
        assert label == "data time: the twin's clock, on wall time, UTC."
        page = c.get("/incidents/INC-0001").text
        assert "see the audit log" not in page
        assert re.search(r"proposed by \S+ at \d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} UTC", page)
