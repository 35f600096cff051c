"""The report schedule's pure parts: cron parsing and due times, the [report] config's errors, is_due with
and without a recorded run, keep_last pruning."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from aiops.config import ReportConfig, parse_config
from aiops.cron import parse_cron
from aiops.errors import ConfigError
from aiops.report.schedule import is_due, prune


def _ts(*parts: int) -> float:
    return datetime(*parts, tzinfo=UTC).timestamp()  # type: ignore[misc]


@pytest.mark.parametrize(
    ("expr", "due"),
    [
        ("* * * * *", (2026, 12, 3, 12, 10)),
        ("0 6 * * *", (2026, 12, 3, 6, 0)),
        ("*/15 * * * *", (2026, 12, 3, 12, 0)),
        ("0 0 1 * *", (2026, 12, 1, 0, 0)),
        ("30 8 * * 1-5", (2026, 12, 3, 8, 30)),  # a Thursday
        ("0 9 * * 0", (2026, 11, 29, 9, 0)),  # Sunday as 0
        ("0 9 * * 7", (2026, 11, 29, 9, 0)),  # and as 7
        ("0 0 29 2 *", (2024, 2, 29, 0, 0)),
        ("0 12 1,15 * 1", (2026, 12, 1, 12, 0)),  # both day fields restricted: either matches (the 1st)
        ("0 12 15 * 1", (2026, 11, 30, 12, 0)),  # a Monday, not the 15th
    ],
)
def test_previous_due(expr: str, due: tuple[int, ...]) -> None:
    assert parse_cron(expr).previous_due_ts_s(_ts(2026, 12, 3, 12, 10, 30)) == _ts(*due)


@pytest.mark.parametrize(
    ("expr", "words"),
    [
        ("* * *", "has 3 fields"),
        ("61 * * * *", "out of range"),
        ("a * * * *", "not a cron field"),
        ("0 0 31 2 *", "no day that exists"),
        ("*/0 * * * *", "out of range"),
        ("0 24 * * *", "hour"),
    ],
)
def test_bad_cron_names_file_key_and_allowed(expr: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"report": {"cron": expr}}, "aiops.toml")
    message = str(caught.value)
    assert message.startswith("aiops.toml: field 'report.cron'") and words in message and "allowed" in message


@pytest.mark.parametrize(
    ("key", "value", "words"),
    [
        ("formats", "html,docx", "html, md, pdf"),
        ("since", "yesterday", "not a duration"),
        ("keep_last", 0, "greater than or equal to 1"),
        ("colour", "x", "unknown key"),
    ],
)
def test_bad_report_keys(key: str, value: object, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config({"report": {key: value}}, "aiops.toml")
    assert f"'report.{key}'" in str(caught.value) and words in str(caught.value)


def test_is_due() -> None:
    config = ReportConfig(enabled=True, cron="0 6 * * *")
    now = _ts(2026, 12, 3, 12, 0)
    assert not is_due(config, now, None)  # nothing recorded: nothing missed
    assert is_due(config, now, _ts(2026, 12, 2, 6, 0))  # today's 06:00 was missed
    assert not is_due(config, now, _ts(2026, 12, 3, 6, 0, 5))  # today's ran


def test_prune_keeps_the_newest_stems(tmp_path: Path) -> None:
    for day in range(1, 5):
        for suffix in (".html", ".md"):
            (tmp_path / f"report-2026010{day}T000000Z{suffix}").write_text("x")
    (tmp_path / "notes.txt").write_text("not a report")
    removed = prune(tmp_path, 2)
    assert len(removed) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "notes.txt",
        "report-20260103T000000Z.html",
        "report-20260103T000000Z.md",
        "report-20260104T000000Z.html",
        "report-20260104T000000Z.md",
    ]
