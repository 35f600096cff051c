"""Issue 27 item 7: ~50 GPUs that each gained 1-3 corrected ECC errors (routine for HBM) are one summary line
of the health section, not 50 rows; a GPU over the threshold, one with an uncorrected error and one with a
row-remapping XID are still listed, and the report's HTML and Markdown show the same."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiops.report import queries_health as qh
from aiops.report.build import build_report
from aiops.report.period import Period
from aiops.report.render_html import render_html
from aiops.report.render_md import render_md
from aiops.store import Store

EPOCH_S = 1767225600.0
PERIOD = Period(EPOCH_S, EPOCH_S + 600)
MINOR = [f"node{n}/gpu{g}" for n in range(7) for g in range(8)][:52]  # 1-3 corrected errors each
LISTED = {"node9/gpu0": "sbe", "node9/gpu1": "dbe", "node9/gpu2": "xid63"}


def _workspace(path: Path) -> Store:
    columns = ("ts_s", "gpu", "node", "util_pct", "temp_c", "power_w", "ecc_sbe_total", "ecc_dbe_total")
    rows: dict[str, list[Any]] = {k: [] for k in columns}
    for i in range(10):
        for n, gpu in enumerate([*MINOR, *LISTED]):
            sbe = 100 + (min(i, 1 + n % 3) if gpu in MINOR else (12 * i if LISTED[gpu] == "sbe" else 0))
            values = (EPOCH_S + 60 * i, gpu, gpu.split("/")[0], 90.0, 60.0, 500.0, sbe)
            for key, value in zip(columns, values, strict=False):
                rows[key].append(value)
            rows["ecc_dbe_total"].append(2 + (i >= 5) if LISTED.get(gpu) == "dbe" else 0)
    store = Store(path)
    store.ingest("gpu_samples", rows)
    store.conn.execute(
        "INSERT INTO gpu_events (ts_s, gpu, node, kind, xid, message) VALUES (?, 'node9/gpu2', 'node9', 'xid', "
        "63, 'row remapping recorded')",
        [EPOCH_S + 120],
    )
    return store


def test_tiny_corrected_ecc_counts_are_summarised_not_listed(tmp_path: Path) -> None:
    store = _workspace(tmp_path / "w.duckdb")
    found = qh.gpu_counters(store, PERIOD)
    assert [r["gpu"] for r in found.rows] == ["node9/gpu1", "node9/gpu0", "node9/gpu2"], found.rows
    expected_sbe = sum(1 + n % 3 for n in range(len(MINOR)))
    assert (found.minor_gpus, found.minor_sbe) == (len(MINOR), expected_sbe)
    assert found.rows[2]["memory_xids"] == [63] and found.rows[1]["sbe"] == 108

    report = build_report(store, PERIOD, now_ts_s=EPOCH_S + 700)
    section = report.section("health")
    assert section is not None
    summary = [line for line in section.lines if "corrected ECC" in line]
    assert summary == [
        f"{len(MINOR)} GPUs gained 1-3 corrected ECC errors each ({expected_sbe} in all) and nothing else: "
        "routine for HBM, summarised here, not listed (a GPU is listed from 4 corrected errors, or with any "
        "uncorrected error or memory XID)."
    ]
    table = next(t for t in section.tables if t.caption.startswith("GPUs whose counters rose"))
    assert [row[0] for row in table.rows] == ["node9/gpu1", "node9/gpu0", "node9/gpu2"]
    assert table.rows[2][-1] == "63"
    html = render_html(report).split('<section id="section-health">')[1].split("</section>")[0]
    markdown = render_md(report).split("## GPU health counters")[1].split("\n## ")[0]
    for text in (html, markdown):
        assert f"{len(MINOR)} GPUs gained 1-3 corrected ECC errors" in text
        assert not any(f">{gpu}<" in text or f"| {gpu} |" in text for gpu in MINOR)
        assert "node9/gpu0" in text and "node9/gpu2" in text
    assert "1 GPU to drain" in report.headline  # the DBE; the summarised GPUs call for nothing


def test_only_minor_corrected_errors_still_make_a_section(tmp_path: Path) -> None:
    store = _workspace(tmp_path / "w.duckdb")
    store.conn.execute("DELETE FROM gpu_samples WHERE node = 'node9'")
    store.conn.execute("DELETE FROM gpu_events")
    found = qh.gpu_counters(store, PERIOD)
    assert found.rows == [] and found.minor_gpus == len(MINOR)
    section = build_report(store, PERIOD, now_ts_s=EPOCH_S + 700).section("health")
    assert section is not None and not section.tables
    assert any("corrected ECC" in line for line in section.lines)
    assert "No GPU's counters call for draining it." in section.lines
