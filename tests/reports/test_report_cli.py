"""`aiops report` on the demo workspace, on empty periods and stores, with hostile strings in the store, and
with bad arguments (exit 2 naming the option)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.report.build import build_report
from aiops.report.period import Period
from aiops.report.render_html import render_html
from aiops.report.render_md import md_escape, render_md
from aiops.store import Store
from tests.demo_template import demo_copy

EPOCH_S = 1767225600.0  # 2026-01-01, the simulator's clock
HOSTILE = "<script>alert(1)</script>\x1b[31m[x](http://evil.example)\u202e|*_"


@pytest.fixture(scope="module")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return demo_copy(tmp_path_factory.mktemp("demo"))


def _report(db: Path, out: Path, *extra: str) -> int:
    return main(["report", "--db", str(db), "--out", str(out), *extra])


def test_demo_report_has_its_sections_and_numbers(demo_db: Path, tmp_path: Path) -> None:
    assert _report(demo_db, tmp_path, "--since", "24h", "--end", "latest", "--format", "html,md") == 0
    html = next(tmp_path.glob("report-*.html")).read_text()
    md = next(tmp_path.glob("report-*.md")).read_text()
    for title in (
        "Fleet health summary",
        "Incidents",
        "Temperature, headroom",
        "Power",
        "Network",
        "Data coverage",
    ):
        assert title in html
        assert md_escape(title) in md
    assert "thermal_throttle" in html and "node3/gpu5" in html  # the demo's diagnosis
    assert "GPU-hours lost" in html and "kWh" in html
    assert "healthy" not in html.lower().replace("fleet health summary", "").replace("health report", "")
    assert html.count("<svg") >= 5
    assert "http://" not in html.replace('http-equiv="', "") and "https://" not in html


@pytest.mark.parametrize(
    "window",
    [["--start", "2020-01-01T00:00", "--end", "2020-01-02T00:00"], ["--since", "1h", "--end", "now"]],
)
def test_empty_period_says_so_and_where_the_data_is(demo_db: Path, tmp_path: Path, window: list[str]) -> None:
    assert _report(demo_db, tmp_path, *window, "--format", "md,html") == 0
    md = next(tmp_path.glob("report-*.md")).read_text()
    html = next(tmp_path.glob("report-*.html")).read_text()
    assert "No telemetry in this period" in md.replace("\\", "")
    assert "No telemetry in this period" in html
    # where the data is and how to ask for it: the demo's simulated day (2026-01-01)
    assert "holds GPU telemetry from 2026-01-01" in html and "--end latest" in html
    assert "healthy" not in md.lower() and "no incidents" not in md.lower()
    assert "Data coverage" in html


def test_no_period_asked_on_a_recorded_workspace_reports_its_newest_data(
    demo_db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's data is not in the last 24 h: with no --start/--end the report covers the 24 h up to its newest
    sample, and says so (before: an empty report)."""
    assert _report(demo_db, tmp_path, "--format", "html") == 0
    assert "reporting the same length up to the newest GPU sample" in capsys.readouterr().out
    html = next(tmp_path.glob("report-*.html")).read_text()
    assert "No telemetry in this period" not in html
    assert "thermal_throttle" in html and "node3/gpu5" in html


def test_store_without_telemetry(tmp_path: Path) -> None:
    with Store(tmp_path / "empty.duckdb") as store:
        report = build_report(store, Period(EPOCH_S, EPOCH_S + 86400), now_ts_s=EPOCH_S)
    assert not report.has_telemetry
    assert report.headline.startswith("No telemetry in this period")
    assert [s.key for s in report.sections] == ["actions", "coverage"]


def _hostile_store(path: Path) -> Store:
    store = Store(path)
    n = 20
    store.ingest(
        "gpu_samples",
        {
            "ts_s": [EPOCH_S + i * 10 for i in range(n)],
            "gpu": [f"node0/gpu0{HOSTILE}"] * n,
            "node": [f"node0{HOSTILE}"] * n,
            "temp_c": [60.0 + i for i in range(n)],
            "slowdown_temp_c": [87.0] * n,
            "power_w": [300.0] * n,
            "power_limit_w": [400.0] * n,
            "util_pct": [90.0] * n,
            "clocks_event_reasons": [0x20] * n,
            "ecc_dbe_total": list(range(n)),
        },
    )
    store.ingest(
        "incidents",
        {
            "incident_id": [f"INC-1{HOSTILE}"],
            "opened_ts_s": [EPOCH_S + 20],
            "last_ts_s": [EPOCH_S + 150],
            "title": [HOSTILE],
            "severity": ["warning"],
            "components": [[f"job:{HOSTILE}"]],
            "symptoms": [json.dumps([])],
        },
    )
    return store


def test_hostile_strings_are_escaped(tmp_path: Path) -> None:
    with _hostile_store(tmp_path / "hostile.duckdb") as store:
        report = build_report(store, Period(EPOCH_S, EPOCH_S + 3600), now_ts_s=EPOCH_S)
    html, md = render_html(report), render_md(report)
    assert HOSTILE.split("\x1b")[0] not in html and "&lt;script&gt;" in html
    assert "<script" not in html
    for text in (html, md):
        assert "\x1b" not in text and "\u202e" not in text
    assert "<script>" not in md and "](http" not in md and "\\<script\\>" in md
    assert "GPUs to drain" in html  # the DBE total rose: the drain table names the hostile GPU, escaped


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--format", "html,docx"], "--format"),
        (["--since", "yesterday"], "--since"),
        (["--start", "soon", "--end", "now"], "--start"),
        (["--start", "2026-01-02", "--end", "2026-01-01"], "--start"),
    ],
)
def test_bad_arguments_exit_2(
    demo_db: Path, tmp_path: Path, args: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _report(demo_db, tmp_path, *args) == 2
    assert field in capsys.readouterr().err
    assert not list(tmp_path.glob("report-*"))


def test_coverage_shows_fleet_gaps_and_silent_gpus(tmp_path: Path) -> None:
    times = [EPOCH_S + i * 10 for i in range(60)]
    times = [t for t in times if not (EPOCH_S + 200 <= t < EPOCH_S + 400)]  # nobody reported for 200 s
    with Store(tmp_path / "gaps.duckdb") as store:
        for gpu, kept in (("node0/gpu0", times), ("node0/gpu1", times[:10])):  # gpu1 went silent early
            store.ingest(
                "gpu_samples",
                {
                    "ts_s": kept,
                    "gpu": [gpu] * len(kept),
                    "node": ["node0"] * len(kept),
                    "temp_c": [50.0] * len(kept),
                },
            )
        report = build_report(store, Period(EPOCH_S, EPOCH_S + 3600), now_ts_s=EPOCH_S)
    coverage = report.section("coverage")
    assert coverage is not None
    tables = {t.caption: t.rows for t in coverage.tables}
    gaps = tables["Gaps in GPU telemetry: no GPU reported (longest first)"]
    assert gaps == (("2026-01-01 00:03:10 UTC", "3.5 min"),)
    silent = tables["GPUs that reported at fewer than 95 % of the sample times"]
    assert silent == (("node0/gpu1", "10", "40", "0"),)


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        ("[x](http://evil.example)", "\\[x\\]\\(http\\:\\/\\/evil.example\\)"),
        ("see www.evil.example", "see www\\.evil.example"),
        ("<b>&amp;", "\\<b\\>\\&amp;"),
        ("a|b*c_d~e`f", "a\\|b\\*c\\_d\\~e\\`f"),
        ("- item", "\\- item"),
        ("1. item", "1\\. item"),
        ("# heading", "\\# heading"),
        (
            "3.5 min at 2026-01-01 00:04:40 UTC",
            "3.5 min at 2026-01-01 00:04:40 UTC",
        ),  # plain text stays readable
        ("tab\there\x1b[31m", "tab here \\[31m"),
    ],
)
def test_markdown_escape(raw: str, escaped: str) -> None:
    assert md_escape(raw) == escaped


def test_commands_and_the_service_do_not_load_matplotlib() -> None:
    """Only a report draws: the CLI's parser and the service import neither matplotlib nor Jinja2."""
    import subprocess
    import sys

    code = (
        "import sys, aiops.cli.main as m, aiops.service.service\n"
        "m.build_parser()\n"
        "print(sorted(n for n in ('matplotlib', 'jinja2') if n in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]"
