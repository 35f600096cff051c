"""Issue 38 item 3, the console for on-call, on the demo's workspace (a hot GPU, node3/gpu5): the incident page plots
the series its evidence cites (the GPU's temperature from gpu_samples, as stored) with a link to the Grafana panel,
its timeline reads as words with the throttle mask decoded, cited values carry units, and the topology is
coloured by the open incidents' severity. Times sit in <time> elements the page's script puts in the viewer's
zone: the last test checks that script in Chromium."""

from __future__ import annotations

import html
import json
import re
import urllib.parse
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from aiops.console.oncall import SERIES, grafana_link, value_text
from aiops.store import Workspace
from tests.console_helpers import client, fresh_demo, make_demo, sign_in
from tests.report_browser import chromium

GRAFANA = "http://grafana.example:3000"
FIGURE = re.compile(r'<figure class="plot" data-table="([^"]+)" data-column="([^"]+)">(.*?)</figure>', re.S)


@pytest.fixture(scope="module")
def demo_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("console-oncall"))


@pytest.fixture
def demo(demo_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fresh_demo(demo_source, tmp_path, monkeypatch)


def _incident(demo: Path) -> tuple[str, str, float]:
    with Workspace(demo).read() as store:
        row = store.query("SELECT incident_id, components, opened_ts_s FROM incidents")[0]
    gpu = next(c for c in row["components"] if "/gpu" in c)
    return str(row["incident_id"]), gpu, float(row["opened_ts_s"])


def test_the_incident_page_plots_the_cited_series_and_reads_as_words_with_units(demo: Path) -> None:
    """The cited GPU's temperature plotted as stored, with its Grafana panel; the timeline and the cited values
    as words: the throttle mask decoded, units on numbers, no JSON."""
    incident, gpu, opened_ts_s = _incident(demo)
    with Workspace(demo).read() as store:
        symptoms = json.loads(
            store.query("SELECT symptoms FROM incidents WHERE incident_id = ?", [incident])[0]["symptoms"]
        )
        raw = store.query(
            "SELECT min(temp_c) AS lo, max(temp_c) AS hi FROM gpu_samples WHERE gpu = ? AND ts_s >= ?",
            [gpu, opened_ts_s - 600],
        )[0]
        normal = store.query(
            "SELECT max(temp_c) AS hi FROM gpu_samples WHERE gpu <> ? AND ts_s >= ?", [gpu, opened_ts_s - 600]
        )[0]["hi"]
    with client(demo, grafana_url=GRAFANA) as c:
        sign_in(c, "alice")
        page = c.get(f"/incidents/{incident}").text
    figures = {(t, col): body for t, col, body in FIGURE.findall(page)}
    body = figures[("gpu_samples", "temp_c")]
    assert f"GPU temperature of {gpu} (°C)" in html.unescape(body)
    low, high = (
        float(v) for v in re.findall(r"([\d.]+) °C", html.unescape(body.split("</figcaption>")[0]))[:2]
    )
    assert raw["lo"] - 0.01 <= low < high <= raw["hi"] + 0.01
    assert high > normal  # the plot shows the fault: above every other GPU's hottest sample
    points = [tuple(map(float, p.split(","))) for p in re.search(r'points="([^"]+)"', body)[1].split()]  # type: ignore[index]
    xs = [x for x, _ in points]
    assert len(points) > 20 and xs == sorted(xs) and xs[0] == 0 and xs[-1] == 320
    hottest = min(points, key=lambda p: p[1])  # SVG's y grows downwards
    opened_x = float(re.search(r'class="plot-opened" x1="([\d.]+)"', body)[1])  # type: ignore[index]
    assert hottest[0] > opened_x  # hottest after the incident opened
    link = html.unescape(re.search(r'class="grafana" href="([^"]+)"', body)[1])  # type: ignore[index]
    parsed = urllib.parse.urlsplit(link)
    query = dict(urllib.parse.parse_qsl(parsed.query))
    assert (parsed.netloc, parsed.path) == ("grafana.example:3000", "/d/aiops-node/")
    assert query["var-node"] == gpu.split("/")[0] and query["viewPanel"] == "3"
    assert int(query["from"]) <= opened_ts_s * 1000 <= int(query["to"])
    throttle = next(s for s in symptoms if s["kind"] == "gpu_throttle")
    mask = int(throttle["detail"]["mask"])
    page = html.unescape(page)
    timeline = page[page.index('id="timeline"') :]
    assert '{"' not in timeline  # no JSON left
    names = ", ".join(throttle["detail"]["reasons"])
    assert f"throttle reasons {mask} = {names}; temp {throttle['detail']['temp_c']:g} °C" in timeline
    assert re.search(r"<td>\d+ = [A-Za-z]+(, [A-Za-z]+)*</td>", page)  # the evidence's bitmask column decoded
    assert re.search(r"<td>\d+(\.\d+)? W</td>", page) and re.search(r"<td>\d+(\.\d+)? °C</td>", page)
    assert value_text("reasons", 0.5) == "0.5" and value_text("samples", 12) == "12"  # no mask, no unit


def test_proposals_filter_and_group_by_incident_and_step_and_the_topology_shows_health(demo: Path) -> None:
    """The incidents page's proposals: filtered by status and incident, each row naming its incident and plan
    step; an unknown filter value is ignored, never echoed. The topology coloured by the open incidents."""
    incident, gpu, _ = _incident(demo)
    with Workspace(demo).read() as store:
        filed = store.query("SELECT proposal_id, status, incident_id, step_id FROM proposals")
    pending = {r["proposal_id"] for r in filed if r["status"] == "pending" and r["incident_id"] == incident}
    assert pending and any(r["step_id"] for r in filed)
    with client(demo) as c:
        sign_in(c, "alice")
        page = c.get("/", params={"status": "pending", "incident": incident}).text
        table = page[page.index('id="proposals"') :]
        rows = re.findall(
            r"<tr><td><a href=\"/incidents/([^\"]+)\">[^<]*</a></td><td>([^<]*)</td>\s*<td>(P-[^<]+)</td>",
            table,
        )
        assert {r[2] for r in rows} == pending and {r[0] for r in rows} == {incident}
        steps = {r["proposal_id"]: r["step_id"] or "-" for r in filed}
        assert all(steps[pid] == step for _, step, pid in rows)
        assert "matches the filter" in c.get("/", params={"status": "rejected", "incident": incident}).text
        hostile = c.get("/", params={"incident": "<script>x</script>", "status": "<b>"}).text
        assert "<script>x" not in hostile and "&lt;script&gt;x" not in hostile
        assert set(re.findall(r"<td>(P-[^<]+)</td>", hostile)) == {r["proposal_id"] for r in filed}

    with Workspace(demo).read() as store:
        severity = store.query("SELECT severity FROM incidents WHERE incident_id = ?", [incident])[0][
            "severity"
        ]
    node = gpu.split("/")[0]

    def health(page: str, name: str) -> str:
        found = re.search(rf'data-health="(\w+)" title="{re.escape(name)}: \w+"', page) or re.search(
            rf'<li class="node health-\w+" data-health="(\w+)">{re.escape(name)} ', page
        )
        assert found, name
        return found[1]

    with client(demo) as c:
        sign_in(c, "alice")
        page = c.get("/topology").text
        assert health(page, gpu) == severity and health(page, node) == severity
        other = next(g for g in re.findall(r'title="(node\d+/gpu\d+): ok"', page) if g != gpu)
        assert health(page, other) == "ok"
        with Workspace(demo).write() as store:
            store.conn.execute("UPDATE incidents SET resolved_ts_s = last_ts_s")
        page = c.get("/topology").text
        assert health(page, gpu) == "ok" and health(page, node) == "ok"


def test_a_grafana_link_encodes_a_hostile_name_and_is_absent_without_a_grafana() -> None:
    series = SERIES[0]
    link = grafana_link(GRAFANA, series, 'node"><script>x</script>&var-x=1', 0.0, 60.0)
    query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(link).query))
    assert query["var-node"] == 'node"><script>x</script>&var-x=1' and "var-x" not in query
    assert "<" not in link and '"' not in link
    assert grafana_link("", series, "node0", 0.0, 60.0) == ""


def test_in_chromium_times_show_the_viewers_zone_beside_utc_and_the_plots_are_drawn(demo: Path) -> None:
    """Debian's headless Chromium (Playwright, `executable_path`) in Asia/Kolkata (UTC+05:30) loads the incident
    page, every request answered by the console's app itself (its CSP included): the console's own script puts
    each time in the viewer's zone beside UTC, and the plot's line is drawn."""
    from playwright.sync_api import Route, sync_playwright

    path = chromium()
    incident, _, _ = _incident(demo)
    origin = "http://console.test"
    with client(demo) as c, sync_playwright() as pw:
        sign_in(c, "alice")

        def answer(route: Route) -> None:
            url = urllib.parse.urlsplit(route.request.url)
            if f"{url.scheme}://{url.netloc}" != origin:
                route.abort()
                return
            reply = c.get(url.path + (f"?{url.query}" if url.query else ""))
            route.fulfill(status=reply.status_code, headers=dict(reply.headers), body=reply.content)

        browser = pw.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            page = browser.new_context(timezone_id="Asia/Kolkata", locale="en-GB").new_page()
            page.route("**/*", answer)
            page.goto(f"{origin}/incidents/{incident}")
            page.wait_for_selector(".local-time", timeout=15_000)
            pairs = page.eval_on_selector_all(
                "time[datetime]",
                "els => els.map(e => [e.getAttribute('datetime'), e.nextElementSibling?.textContent ?? ''])",
            )
            line = page.locator(".plot-line").first
            box = line.bounding_box()
            points = line.get_attribute("points") or ""
        finally:
            browser.close()
    assert len(pairs) > 3
    for utc, local in pairs:
        there = datetime.fromisoformat(utc.replace("Z", "+00:00")) + timedelta(hours=5, minutes=30)
        assert there.strftime("%H:%M:%S") in local and "+5:30" in local, (utc, local)
    assert box is not None and box["width"] > 200 and box["height"] > 10
    assert len(points.split()) > 20
