"""What a question is about, read without an LLM: the components it names (`node5/gpu2`, `node3`,
`node1/nic0`, `rack1`, `job:llm` or `job llm`) and the time it asks about (`since 10:00`, `since
2026-01-01T00:05`, `until 00:08`, `last 5 min`). Pure functions over the question's text: the analyst
checks each name against the workspace's topology before it reads a row.

Clock times without a date are local times on the day of the newest telemetry (the day before when that would
be after the newest row): an operator asks about the run in front of them, not about today's wall clock. So are
days: `yesterday` is the day before the newest telemetry's (local midnight to midnight), `since yesterday` from
its start to now, `today` the newest telemetry's day so far, `last night` (or `overnight`) 18:00 the day before
to 06:00 on the newest telemetry's day.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from aiops.errors import ScopeError
from aiops.text import when

MAX_QUESTION_CHARS = 4000  # a question longer than this is read up to here only
_COMPONENT = re.compile(
    r"(?<![\w/:])(?:(?P<hw>node\d{1,6}(?:/(?:gpu|nic)\d{1,4})?|rack\d{1,6})"
    r"|job[: ](?P<job>[A-Za-z0-9][\w.-]{0,63}))(?![\w/])",
    re.IGNORECASE,
)
_UNITS_S = {
    "s": 1,
    "sec": 1,
    "second": 1,
    "m": 60,
    "min": 60,
    "minute": 60,
    "h": 3600,
    "hour": 3600,
    "d": 86400,
    "day": 86400,
}
_LAST = re.compile(
    r"\b(?:last|past)\s+(\d{1,5})\s*(s|sec|seconds?|m|mins?|minutes?|h|hours?|d|days?)\b", re.I
)
_BOUND = re.compile(
    r"\b(since|after|from|until|before|till|to)\s+(\S+(?:[ T]\d{1,2}:\d{2}(?::\d{2})?)?)", re.I
)
_DAYS = re.compile(r"\b(?P<since>since\s+)?(?P<day>yesterday|today|last\s+night|overnight)\b", re.I)
NIGHT_START_H, NIGHT_END_H = 18, 6  # "last night": 18:00 the day before to 06:00
# A question about GPUs (their temperatures, their state) rather than the rack or node named with them
_GPU_WORD = re.compile(r"(?<![\w/])gpus?\b", re.I)
_CLOCK = re.compile(r"^(\d{1,2}):(\d{2})(?::(\d{2}))?$")
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?(?:Z|[+-]\d{2}:?\d{2})?$")


@dataclass(frozen=True)
class TimeScope:
    start_ts_s: float | None
    end_ts_s: float | None
    said: str  # the words it came from, for the answer

    def describe(self) -> str:
        if self.start_ts_s is not None and self.end_ts_s is not None:
            times = f"from {when(self.start_ts_s)} to {when(self.end_ts_s)}"
            return f"{self.said}, by the data's clock ({times})" if _DAYS.fullmatch(self.said) else times
        if self.start_ts_s is not None:
            return f"since {when(self.start_ts_s)}"
        return f"until {when(self.end_ts_s)}"


# Any other name (a host's, `gpu-a100-017/gpu3`; a configured rack's): only one the store's topology knows
_NAMED = re.compile(r"(?<![\w/:.-])(?P<hw>[A-Za-z0-9][A-Za-z0-9.-]{0,252}(?:/(?:gpu|nic)\d{1,4})?)(?![\w/-])")


def components_in(
    question: str, jobs: frozenset[str] = frozenset(), known: frozenset[str] = frozenset()
) -> list[str]:
    """The component names a question mentions, in order, canonical (`Node5/GPU2` -> `node5/gpu2`, `job llm`
    -> `job:llm`), each once. `job NAME` counts only when NAME is one of `jobs` (so "job is slow" is not one).
    A host's or a configured rack's name (`gpu-a100-017/gpu3`, `row-b`) counts only when it is in `known`
    (the store's topology): free text cannot tell a host name from a word."""
    text = question[:MAX_QUESTION_CHARS]
    hits: list[tuple[int, str]] = []
    for match in _COMPONENT.finditer(text):
        hits.append((match.start(), match.group(0)))
    if known:
        for match in _NAMED.finditer(text):
            name = match.group("hw").lower().rstrip(".")
            if name in known:
                hits.append((match.start(), name))
    found: list[str] = []
    for _, said in sorted(hits):
        contract = _COMPONENT.fullmatch(said)
        if contract is None:
            name = said
        elif contract.group("hw"):
            name = contract.group("hw").lower()
        else:
            job = contract.group("job").rstrip(".")
            explicit = contract.group(0)[3] == ":"
            if not explicit and job not in jobs:
                continue
            name = f"job:{job}"
        if name not in found:
            found.append(name)
    return found


def asks_about_gpus(question: str) -> bool:
    """The question is about GPUs ("GPU temps on rack0"), not only about what it names (rack0's inlet)."""
    return bool(_GPU_WORD.search(question[:MAX_QUESTION_CHARS]))


def time_scope(question: str, newest_ts_s: float | None, local_tz: tzinfo | None = None) -> TimeScope | None:
    """The time window a question names, or None. Raises `ScopeError` for a bound it cannot read."""
    text = question[:MAX_QUESTION_CHARS]
    zone = local_tz or datetime.now().astimezone().tzinfo or UTC
    days = _DAYS.search(text)
    if days:
        return _day_scope(days, newest_ts_s, zone)
    last = _LAST.search(text)
    if last:
        if newest_ts_s is None:
            raise ScopeError(f"'{last.group(0)}': there is no telemetry to count back from")
        unit = last.group(2).lower().rstrip("s") or "s"
        seconds = int(last.group(1)) * _UNITS_S.get(unit, _UNITS_S.get(unit[:3], 1))
        return TimeScope(newest_ts_s - seconds, newest_ts_s, last.group(0))
    start = end = None
    said = []
    for match in _BOUND.finditer(text):
        word, value = match.group(1).lower(), match.group(2).rstrip("?.,;!)")
        if not (_CLOCK.match(value) or _DATE_TIME.match(value) or re.match(r"^\d", value)):
            continue  # "since the job started": not a time
        ts_s = _read_time(value, newest_ts_s, zone)
        said.append(f"{word} {value}")
        if word in ("since", "after", "from"):
            start = ts_s
        else:
            end = ts_s
    if start is None and end is None:
        return None
    if start is not None and end is not None and end <= start:
        raise ScopeError(f"'{' '.join(said)}': the end is not after the start")
    return TimeScope(start, end, " ".join(said))


def _read_time(value: str, newest_ts_s: float | None, zone: tzinfo) -> float:
    clock = _CLOCK.match(value)
    if clock:
        hour, minute, second = int(clock.group(1)), int(clock.group(2)), int(clock.group(3) or 0)
        if hour > 23 or minute > 59 or second > 59:
            raise ScopeError(f"'{value}' is not a clock time (HH:MM or HH:MM:SS, 00:00 to 23:59:59)")
        if newest_ts_s is None:
            raise ScopeError(f"'{value}': no telemetry to date it by (give a date: 2026-01-01T{value})")
        newest = datetime.fromtimestamp(newest_ts_s, tz=zone)
        at = newest.replace(hour=hour, minute=minute, second=second, microsecond=0)
        if at.timestamp() > newest_ts_s:
            at -= timedelta(days=1)
        return at.timestamp()
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ScopeError(
            f"'{value[:40]}' is not a time (HH:MM, an ISO 8601 date-time such as 2026-01-01T10:00Z, "
            "or 'last 10 min')"
        ) from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=zone)).timestamp()


def _day_scope(match: re.Match[str], newest_ts_s: float | None, zone: tzinfo) -> TimeScope:
    """`yesterday`, `since yesterday`, `today`, `last night` on the days of the newest telemetry (local time)."""
    said = " ".join(match.group(0).lower().split())
    if newest_ts_s is None:
        raise ScopeError(f"'{said}': there is no telemetry to count the days from")
    newest = datetime.fromtimestamp(newest_ts_s, tz=zone)
    midnight = newest.replace(hour=0, minute=0, second=0, microsecond=0)
    day = " ".join(match.group("day").lower().split())
    if day == "today":
        return TimeScope(midnight.timestamp(), newest_ts_s, said)
    if day in ("last night", "overnight"):
        evening = (midnight - timedelta(days=1)).replace(hour=NIGHT_START_H)
        morning = midnight.replace(hour=NIGHT_END_H)
        return TimeScope(evening.timestamp(), min(morning.timestamp(), newest_ts_s), said)
    day_before_s = (midnight - timedelta(days=1)).timestamp()
    if match.group("since"):
        return TimeScope(day_before_s, newest_ts_s, said)
    return TimeScope(day_before_s, midnight.timestamp(), said)
