"""The health report's "Host code during GPU idle" section from stored profile rows (no eBPF): present only
when the period has runs, the top stacks per view with shares over the period's runs, the runs table, and
hostile frame names escaped in HTML and Markdown."""

from __future__ import annotations

import re

import pytest

from aiops.profile.folded import StackRecord
from aiops.profile.session import ProfileResult
from aiops.profile.store_rows import record_profile
from aiops.report.build import build_report
from aiops.report.period import Period
from aiops.report.render_html import render_html
from aiops.report.render_md import render_md
from aiops.report.sections_profile import short_stack
from aiops.store import Store

EPOCH_S = 1767225600.0
PERIOD = Period(EPOCH_S, EPOCH_S + 3600)
HOSTILE = "<img src=x onerror=alert(1)>[click](http://evil)"


def result(pid: int, decode: int, hostile: int, launches: int, blocked_ns: int) -> ProfileResult:
    records = [
        StackRecord(("main", "loader", "decode"), "cpu", "cpu", decode, 0, "idle"),
        StackRecord(("main", HOSTILE), "cpu", "cpu", hostile, 0, "idle"),
        StackRecord(("main", "step", "cudaLaunchKernel"), "cudaLaunchKernel", "launch", launches, 0, "busy"),
        StackRecord(
            ("main", "wait", "cudaDeviceSynchronize"), "cudaDeviceSynchronize", "sync", 10, blocked_ns, "busy"
        ),
        StackRecord(("main", "busy_on_cpu"), "cpu", "cpu", 99, 0, "busy"),  # GPU busy: not in the idle view
    ]
    return ProfileResult(
        pid=pid,
        duration_s=30.0,
        slice_s=0.1,
        probes=("cudaLaunchKernel",),
        libraries={"libcudart": "/x/libcudart.so.13"},
        records=records,
        util_pct=[80.0] * 200 + [2.0] * 100,
        idle_slices=100,
    )


@pytest.fixture()
def store() -> Store:
    s = Store()
    record_profile(
        s, result(41, decode=30, hostile=10, launches=300, blocked_ns=2_000_000), "node0", EPOCH_S + 60
    )
    record_profile(
        s, result(42, decode=50, hostile=10, launches=100, blocked_ns=1_000_000), "node1", EPOCH_S + 600
    )
    # outside the period: not counted
    record_profile(
        s, result(43, decode=999, hostile=0, launches=999, blocked_ns=9_000_000), "node0", EPOCH_S - 60
    )
    return s


def test_section_has_top_stacks_per_view_with_shares_and_the_runs(store: Store) -> None:
    report = build_report(store, PERIOD, now_ts_s=EPOCH_S + 3600)
    section = report.section("profile")
    assert section is not None and section.title == "Host code during GPU idle"
    assert section.lines[0].startswith("2 profiling runs")
    idle, blocked, launch, runs = section.tables
    assert idle.headers == ("stack", "leaf", "samples", "share", "runs")
    # idle totals: run 41 has 40 samples, run 42 has 60: decode 80/100, the hostile frame 20/100
    assert [row[2:] for row in idle.rows] == [("80", "80.0%", "2"), ("20", "20.0%", "2")]
    assert idle.rows[0][:2] == ("main;loader;decode", "decode")
    assert [row[2:4] for row in blocked.rows] == [("3,000", "100.0%")]
    assert blocked.rows[0][1] == "cudaDeviceSynchronize"
    assert [row[2:4] for row in launch.rows] == [("400", "100.0%")]
    assert [row[1:3] for row in runs.rows] == [("node1", "42"), ("node0", "41")]  # newest first
    assert runs.rows[0][4:] == ("100/300", "54.0%", "110", "0.001 s", "100%")


def test_no_runs_in_the_period_no_section(store: Store) -> None:
    report = build_report(store, Period(EPOCH_S + 7200, EPOCH_S + 9000), now_ts_s=EPOCH_S + 9000)
    assert report.section("profile") is None


def test_markdown_and_html_escape_frame_names(store: Store) -> None:
    report = build_report(store, PERIOD, now_ts_s=EPOCH_S + 3600)
    markdown = render_md(report)
    assert "## Host code during GPU idle" in markdown
    assert "| main;loader;decode | decode | 80 | 80.0% | 2 |" in markdown
    assert "\\<img\\_src=x" in markdown  # the hostile frame is there, escaped
    assert not re.search(r"(?<!\\)<img", markdown) and not re.search(r"(?<!\\)\]\(http", markdown)
    html = render_html(report)
    assert "Host code during GPU idle" in html
    assert "<img" not in html and "&lt;img_src=x_onerror" in html


def test_long_stacks_keep_their_leaf_end() -> None:
    assert short_stack("a;b;c", frames=6) == "a;b;c"
    assert short_stack(";".join(f"f{i}" for i in range(10)), frames=3) == "...;f7;f8;f9"
