"""The issue's must-show checks of the report in real headless Chromium: the demo database's report and the
report of a simulated day with three different incidents render to a page that is not blank, every plot has
content, every image has a title or alt text, the page makes no external request, and the PDF (Chromium's
print-to-PDF) converts with pdftoppm into pages that are not blank. Needs `chromium` and `pdftoppm`: skipped
without them, failed under AIOPS_REQUIRE_EBPF=1. One Chromium serves the module's three tests (a page each),
as in the console's tests (tests/report_browser.py `one_browser`).

The simulated day (aiops/data/report-day.yaml, 24 h at a 60 s sample interval, 120 s detection windows) is
made once per module: about 20 s on this machine (tests/report_helpers.py)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.report.build import build_report
from aiops.report.period import Period
from aiops.store import Store
from tests.demo_template import demo_copy
from tests.report_browser import MIN_VARIANCE, chromium, load, one_browser, pdf_pages, variance  # noqa: F401
from tests.report_helpers import simulate_day

EPOCH_S = 1767225600.0
DAY_S = 86400.0


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_copy(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="module")
def day_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    chromium()  # fail or skip before spending 20 s on the simulation
    started = time.monotonic()
    path = simulate_day(tmp_path_factory.mktemp("day") / "day.duckdb")
    print(f"simulated day made in {time.monotonic() - started:.0f} s")
    return path


def _write(db: Path, out: Path, *period: str) -> dict[str, Path]:
    """`aiops report ... --format html,md,pdf`: in a thread of its own, as the product's print-to-PDF starts its
    own Chromium through Playwright's sync API, which refuses to run in a thread where the module's browser runs
    its event loop."""
    args = ["report", "--db", str(db), "--out", str(out), *period, "--format", "html,md,pdf"]
    with ThreadPoolExecutor(1) as pool:
        assert pool.submit(main, args).result() == 0
    return {kind: next(out.glob(f"report-*.{kind}")) for kind in ("html", "md", "pdf")}


def _check_in_browser(instance: object, html: Path, min_plots: int) -> None:
    for scheme in ("light", "dark"):
        loaded = load(instance, html, color_scheme=scheme)
        assert loaded.external == [], f"external requests: {loaded.external}"
        assert variance(loaded.page_png) > MIN_VARIANCE, f"{scheme} page is blank"
        assert len(loaded.plots) >= min_plots, sorted(loaded.plots)
        blank = {key: variance(png) for key, png in loaded.plots.items() if variance(png) <= MIN_VARIANCE}
        assert not blank, f"blank plots: {blank}"
        assert loaded.images >= len(loaded.plots)
        assert loaded.unlabelled == [], f"images without title or alt: {loaded.unlabelled}"


def _check_pdf(pdf: Path, out: Path) -> None:
    assert pdf.read_bytes().startswith(b"%PDF")
    pages = pdf_pages(pdf, out)
    assert len(pages) >= 2
    assert all(variance(page) > MIN_VARIANCE for page in pages), [round(variance(p)) for p in pages]


def test_demo_report_in_chromium(
    one_browser: object,  # noqa: F811
    demo_db: Path,
    tmp_path: Path,
) -> None:
    files = _write(demo_db, tmp_path, "--since", "24h", "--end", "latest")
    _check_in_browser(one_browser, files["html"], min_plots=7)
    _check_pdf(files["pdf"], tmp_path)


def test_day_report_with_three_incidents_in_chromium(
    one_browser: object,  # noqa: F811
    day_db: Path,
    tmp_path: Path,
) -> None:
    with Store(day_db, read_only=True) as store:
        report = build_report(store, Period(EPOCH_S, EPOCH_S + DAY_S), now_ts_s=EPOCH_S + DAY_S)
        causes = {
            r[0] for r in store.conn.execute("SELECT root_cause FROM hypotheses WHERE rank = 1").fetchall()
        }
    incidents = report.section("incidents")
    assert incidents is not None and len(incidents.tables[0].rows) >= 3
    assert len(causes) >= 3, causes
    assert report.section("thermal") and report.section("power") and report.section("network")
    files = _write(day_db, tmp_path, "--start", str(EPOCH_S), "--end", str(EPOCH_S + DAY_S))
    html = files["html"].read_text()
    for cause in causes:
        assert cause in html
    _check_in_browser(one_browser, files["html"], min_plots=8)
    _check_pdf(files["pdf"], tmp_path)


def test_the_guard_sees_external_requests_and_blank_plots(
    one_browser: object,  # noqa: F811
    tmp_path: Path,
) -> None:
    """The checks above can fail: a page that fetches an image is caught, an empty plot is blank."""
    page = tmp_path / "bad.html"
    page.write_text(
        '<!DOCTYPE html><html><body><img src="https://example.invalid/x.png">'
        '<svg class="plot" id="plot-empty" width="200" height="100"></svg></body></html>'
    )
    loaded = load(one_browser, page)
    assert loaded.external == ["https://example.invalid/x.png"]
    assert variance(loaded.plots["plot-empty"]) <= MIN_VARIANCE
    assert set(loaded.unlabelled) == {"IMG", "plot-empty"}
