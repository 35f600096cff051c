"""Reading a question without an LLM (issue 16, item 4): the components it names and the time it asks about;
and the text helpers the chat shows counts, times and effects with."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from aiops.agent.scope import asks_about_gpus, components_in, intent_of, time_scope
from aiops.errors import ScopeError
from aiops.text import fields_text, plural, when

NEWEST_S = datetime(2026, 1, 1, 10, 30, tzinfo=UTC).timestamp()


@pytest.mark.parametrize(
    ("question", "expected"),
    [
        ("what about node5/gpu2?", ["node5/gpu2"]),
        ("what about Node5/GPU2 and node5", ["node5/gpu2", "node5"]),
        ("is node1/nic0 dropping, and rack1?", ["node1/nic0", "rack1"]),
        ("how is job llm doing", ["job:llm"]),
        ("how is job:other doing", ["job:other"]),
        ("the job is slow", []),  # "job is": not a job of the workspace
        ("node3 node3 node3/gpu5", ["node3", "node3/gpu5"]),
        ("mynode3 or node3x or /node3", []),
        ("INC-0001 on gpu5", []),
    ],
)
def test_components_are_read_from_the_question(question: str, expected: list[str]) -> None:
    assert components_in(question, frozenset({"llm"})) == expected


def test_a_clock_time_is_local_on_the_day_of_the_newest_telemetry() -> None:
    scope = time_scope("what happened since 10:00?", NEWEST_S, UTC)
    assert scope is not None
    assert scope.start_ts_s == datetime(2026, 1, 1, 10, 0, tzinfo=UTC).timestamp() and scope.end_ts_s is None
    plus_one = timezone(timedelta(hours=1))
    local = time_scope("since 11:00", NEWEST_S, plus_one)  # 11:00 at +01:00 is 10:00 UTC
    assert local is not None and local.start_ts_s == datetime(2026, 1, 1, 10, 0, tzinfo=UTC).timestamp()


def test_a_clock_time_after_the_newest_row_is_the_day_before() -> None:
    scope = time_scope("since 23:00", NEWEST_S, UTC)
    assert scope is not None and scope.start_ts_s == datetime(2025, 12, 31, 23, 0, tzinfo=UTC).timestamp()


def test_windows_dates_and_durations() -> None:
    both = time_scope("node3 from 10:00 to 10:10", NEWEST_S, UTC)
    assert both is not None and both.end_ts_s is not None and both.start_ts_s is not None
    assert both.end_ts_s - both.start_ts_s == 600
    iso = time_scope("since 2026-01-01T09:00Z", NEWEST_S, UTC)
    assert iso is not None and iso.start_ts_s == datetime(2026, 1, 1, 9, 0, tzinfo=UTC).timestamp()
    last = time_scope("rack1 in the last 5 min", NEWEST_S, UTC)
    assert last is not None and (last.start_ts_s, last.end_ts_s) == (NEWEST_S - 300, NEWEST_S)
    assert time_scope("how is node3 since the job started", NEWEST_S, UTC) is None
    assert time_scope("what happened to node3", NEWEST_S, UTC) is None


@pytest.mark.parametrize(
    ("question", "words"),
    [
        ("since 25:00", "'25:00' is not a clock time"),
        ("since 2026-13-01", "'2026-13-01' is not a time"),
        ("from 10:10 to 10:00", "the end is not after the start"),
    ],
)
def test_a_time_that_cannot_be_read_says_so(question: str, words: str) -> None:
    with pytest.raises(ScopeError, match=words):
        time_scope(question, NEWEST_S, UTC)


def test_a_clock_time_needs_telemetry_to_date_it() -> None:
    with pytest.raises(ScopeError, match="no telemetry"):
        time_scope("since 10:00", None, UTC)


def test_counts_times_and_effects_read_as_text() -> None:
    assert [plural(1, "rack"), plural(2, "rack"), plural(0, "row"), plural(1200, "sample")] == [
        "1 rack",
        "2 racks",
        "0 rows",
        "1,200 samples",
    ]
    assert when(NEWEST_S, local_tz=UTC) == "2026-01-01T10:30:00Z"
    assert when(NEWEST_S, local_tz=timezone(timedelta(hours=1))) == (
        "2026-01-01T10:30:00Z (local 2026-01-01T11:30:00+01:00)"
    )
    assert when(None) == "-"
    assert fields_text({"to": "node7", "changed": {"temp_c": [90.0, 61.25]}}) == (
        "to=node7, changed={temp_c=[90, 61.25]}"
    )


def test_days_are_the_days_of_the_newest_telemetry() -> None:
    """Issue 27: "since yesterday" was refused; days count from the data's newest row, not today's wall clock."""
    day = datetime(2026, 1, 1, tzinfo=UTC)
    cases = {
        "what happened since yesterday?": (day - timedelta(days=1), NEWEST_S),
        "what happened yesterday": (day - timedelta(days=1), day.timestamp()),
        "node3 today": (day, NEWEST_S),
        "anything last night?": (day - timedelta(hours=6), day + timedelta(hours=6)),
        "rack1 overnight": (day - timedelta(hours=6), day + timedelta(hours=6)),
    }
    for question, (start, end) in cases.items():
        scope = time_scope(question, NEWEST_S, UTC)
        expected = [t if isinstance(t, float) else t.timestamp() for t in (start, end)]
        assert scope is not None and [scope.start_ts_s, scope.end_ts_s] == expected, question
    described = time_scope("since yesterday", NEWEST_S, UTC)
    assert described is not None
    assert described.describe() == (
        "since yesterday, by the data's clock (from 2025-12-31T00:00:00Z to 2026-01-01T10:30:00Z)"
    )
    plus_one = timezone(timedelta(hours=1))  # local midnight: 23:00 UTC the day before
    local = time_scope("yesterday", NEWEST_S, plus_one)
    assert local is not None and local.start_ts_s == datetime(2025, 12, 30, 23, 0, tzinfo=UTC).timestamp()
    early = datetime(2026, 1, 1, 3, 0, tzinfo=UTC).timestamp()  # a night still going: it ends at the data
    night = time_scope("last night", early, UTC)
    assert night is not None and night.end_ts_s == early
    with pytest.raises(ScopeError, match="no telemetry"):
        time_scope("since yesterday", None, UTC)


def test_a_question_about_gpus_is_told_from_one_about_what_holds_them() -> None:
    assert asks_about_gpus("GPU temps on rack0") and asks_about_gpus("how hot are the gpus in node3")
    assert not asks_about_gpus("rack0 inlet") and not asks_about_gpus("what about node3/gpu5")


@pytest.mark.parametrize(
    ("question", "start", "end"),
    [  # issue 38: periods and clock times in words, back from the newest telemetry (10:30 UTC)
        ("what changed in the last hour", NEWEST_S - 3600, NEWEST_S),
        ("what changed in the last 60 min", NEWEST_S - 3600, NEWEST_S),
        ("anything in the past hour?", NEWEST_S - 3600, NEWEST_S),
        ("the last half hour", NEWEST_S - 1800, NEWEST_S),
        ("last 2 hrs", NEWEST_S - 7200, NEWEST_S),
        ("past day", NEWEST_S - 86400, NEWEST_S),
        ("last week", NEWEST_S - 604800, NEWEST_S),
        ("since an hour ago", NEWEST_S - 3600, NEWEST_S),
        ("what happened since 9am", NEWEST_S - 5400, None),
        ("since 9 am", NEWEST_S - 5400, None),
        ("since 9:15 pm", NEWEST_S - 13 * 3600 - 900, None),  # after 10:30: the day before
        ("since noon", NEWEST_S - 22 * 3600 - 1800, None),
        ("since midnight", NEWEST_S - 10 * 3600 - 1800, None),
        ("since 12am", NEWEST_S - 10 * 3600 - 1800, None),
        ("this morning", NEWEST_S - 4 * 3600 - 1800, NEWEST_S),
    ],
)
def test_periods_and_clock_times_in_words(question: str, start: float, end: float | None) -> None:
    scope = time_scope(question, NEWEST_S, UTC)
    assert scope is not None and (scope.start_ts_s, scope.end_ts_s) == (start, end), question


def test_an_hour_without_am_or_pm_or_minutes_is_refused() -> None:
    with pytest.raises(ScopeError, match="'9' is not a clock time"):
        time_scope("since 9", NEWEST_S, UTC)
    with pytest.raises(ScopeError, match="'13pm' is not a clock time"):
        time_scope("since 13pm", NEWEST_S, UTC)
    assert time_scope("what should I do", NEWEST_S, UTC) is None  # "to do" is no bound


@pytest.mark.parametrize(
    ("question", "intent"),
    [
        ("what should I do", "todo"),
        ("what now?", "todo"),
        ("what needs my approval", "todo"),
        ("anything pending for me?", "todo"),
        ("what's waiting on us", "todo"),
        ("what to approve", "todo"),
        ("what needs approving?", "todo"),
        ("which jobs are affected", "jobs"),
        ("affected ranks?", "jobs"),
        ("what changed in the last hour", "changes"),
        ("anything new today", "changes"),
        ("what's wrong", "wrong"),
        ("what\u2019s wrong", "wrong"),
        ("whats wrong", "wrong"),
        ("is the cluster ok", "wrong"),
        ("status", "wrong"),
        ("is rack1 ok", None),
        ("why is the job slow", None),
    ],
)
def test_on_calls_first_questions_are_recognised(question: str, intent: str | None) -> None:
    assert intent_of(question) == intent
