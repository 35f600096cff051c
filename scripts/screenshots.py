"""Remake the two screenshots of issue 27 in docs/img/ with Debian's Chromium through Playwright (nothing is
downloaded; every request outside file:/data: or the console's own origin is aborted):

    .venv/bin/python scripts/screenshots.py [--out docs/img] [--keep DIR]

1. `report-demo.png`: the HTML report `aiops report` writes of the demo workspace (`aiops demo`), the whole
   page at 1100 px wide (light scheme).
2. `fleet-console.png`: the fleet's view. There is no Grafana server here (not packaged), so the picture is the
   aiops console's incidents page over a *fleet* workspace: the scenario `evals/scenarios/two-rack-cooling-then-
   ecc-wide.yaml` (3 racks, 6 nodes, 24 GPUs: rack0's coolant fails, then a GPU of node5 reports uncorrectable
   ECC errors) simulated by the twin; every node agent's exports over the run written as OpenMetrics, imported
   into a real Prometheus with promtool, read back by the fleet analyst (`read_cycle`, what `aiops fleet` does
   each step) into a workspace of its own, analysed there (detect, rank, file proposals), then served by the
   console (as `aiops fleet` serves it: approvals dispatched to the node agents) and signed in as a viewer.
   This is the path `aiops eval --via prometheus` scores (evals/harness.py).

Needs chromium, prometheus and promtool on PATH (or AIOPS_CHROMIUM, AIOPS_PROMETHEUS, AIOPS_PROMTOOL). Takes
about a minute. Each PNG is quantised to a palette and kept under 300 KB.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import socket
import sys
import tempfile
from pathlib import Path

from playwright.sync_api import Route, sync_playwright

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # evals/ (the fleet path's harness pieces) when run as a script

from aiops.cli.main import main  # noqa: E402
from aiops.console.accounts import Accounts, accounts_path  # noqa: E402
from aiops.console.app import ConsoleOptions, create_app  # noqa: E402
from aiops.console.server import ConsoleServer  # noqa: E402
from aiops.control.dcim_signals import parse_dcim_signals  # noqa: E402
from aiops.control.dcim_source import dcim_document, record_changes  # noqa: E402
from aiops.fleet.backfill import backfill, serving  # noqa: E402
from aiops.fleet.cycle import read_cycle  # noqa: E402
from aiops.fleet.history import replay, write  # noqa: E402
from aiops.report.pdf import chromium_path  # noqa: E402
from aiops.runtime.analysis import analyze, simulate_into  # noqa: E402
from aiops.scenarios import load_scenario  # noqa: E402
from aiops.sources.facility import facility_rows, render_facility_history  # noqa: E402
from aiops.sources.prometheus import PrometheusClient  # noqa: E402
from aiops.store import Store, Workspace  # noqa: E402
from scripts.pngs import save_png  # noqa: E402

FLEET_SCENARIO = ROOT / "evals/scenarios/two-rack-cooling-then-ecc-wide.yaml"
STEP_S = 15.0
VIEWER, PASSWORD = "dana", "screenshots only, thrown away"


def report_html(work: Path) -> Path:
    db = work / "demo.duckdb"
    with contextlib.redirect_stdout(io.StringIO()):  # the demo's own summary: not what this script shows
        assert main(["demo", "--db", str(db)]) == 0
    assert main(["report", "--db", str(db), "--out", str(work / "report"), "--format", "html"]) == 0
    return next((work / "report").glob("report-*.html"))


def fleet_workspace(work: Path) -> Path:
    """The scenario's node exports through a real Prometheus into a fleet workspace, analysed (see above)."""
    scenario = load_scenario(str(FLEET_SCENARIO))
    history = work / "history.om"
    with Store(":memory:") as twin_store:
        simulate_into(twin_store, scenario)
        first_s = float(twin_store.scalar("SELECT min(ts_s) FROM gpu_samples"))
        last_s = float(twin_store.scalar("SELECT max(ts_s) FROM gpu_samples"))
        with history.open("w") as out:
            write(replay(twin_store, STEP_S), out, openmetrics=True, end=False)
            render_facility_history(facility_rows(twin_store), out, step_s=STEP_S, openmetrics=True)
        grid = [first_s + STEP_S * (k + 1) for k in range(int((last_s - first_s) // STEP_S) + 1)]
        documents = [(t, dcim_document(twin_store, t)) for t in grid]
    backfill(history, work / "tsdb")
    db = work / "fleet.duckdb"
    with serving(work / "tsdb", work) as url, Store(db) as fleet:
        read_cycle(
            fleet,
            PrometheusClient(url, timeout_s=60.0),
            start_s=first_s - STEP_S,
            end_s=last_s + STEP_S,
            step_s=STEP_S,
        )
        racks = [
            str(r["component"]) for r in fleet.query("SELECT component FROM topology WHERE kind = 'rack'")
        ]
        for t, document in documents:
            record_changes(fleet, parse_dcim_signals(document, "dcim", t, racks), t, "http:dcim")
        newest_s = float(fleet.scalar("SELECT max(ts_s) FROM gpu_samples") or 0.0)
        analyze(fleet, origin="fleet", clock=lambda: newest_s)
    Accounts(accounts_path(str(db))).add(VIEWER, "viewer", PASSWORD)
    return db


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def shoot(report: Path, fleet_db: Path, out_dir: Path) -> None:
    server = ConsoleServer(
        create_app(Workspace(fleet_db), ConsoleOptions(dispatch=True)), f"127.0.0.1:{_free_port()}"
    )
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox"])
            try:
                page = browser.new_page(viewport={"width": 1100, "height": 1400})

                def local_only(route: Route) -> None:
                    url = route.request.url
                    if url.startswith(("file:", "data:", base + "/")):
                        route.continue_()
                    else:
                        raise SystemExit(f"a page asked for {url}")

                page.route("**/*", local_only)
                page.goto(report.resolve().as_uri(), wait_until="load")
                save_png(page.screenshot(full_page=True), out_dir / "report-demo.png")
                page.set_viewport_size({"width": 1280, "height": 760})
                page.goto(base + "/", wait_until="load")
                page.fill("input[name=name]", VIEWER)
                page.fill("input[name=password]", PASSWORD)
                page.click("form.login button")
                page.wait_for_url(base + "/")
                save_png(page.screenshot(full_page=True), out_dir / "fleet-console.png")
            finally:
                browser.close()
    finally:
        server.close()


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "docs/img"))
    parser.add_argument("--keep", default=None, help="make the workspaces here and keep them")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="aiops-screenshots-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        shoot(report_html(work), fleet_workspace(work), Path(args.out))


if __name__ == "__main__":
    run()
