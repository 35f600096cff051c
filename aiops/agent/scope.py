"""What a question is about, read without an LLM: the components it names (`node5/gpu2`, `node3`,
`node1/nic0`, `rack1`, `job:llm` or `job llm`) and the time it asks about, in numbers or in words:

- a bound: `since 10:00`, `since 9am`, `since 9:30 pm`, `since noon`, `since midnight`, `since
  2026-01-01T00:05`, `until 00:08`, `from 10:00 to 10:30`;
- a period back from now: `last 5 min`, `last 60 min`, `the last hour`, `past hour`, `last half hour`,
  `last 2 hours`, `past day`, `last 24 hours`, `last week`, `an hour ago`, `30 minutes ago` (from then to now);
- a day: `today`, `yesterday`, `since yesterday`, `last night`, `overnight`, `this morning`.

Pure functions over the question's text: the analyst checks each name against the workspace's topology before
it reads a row.

"Now" is the newest telemetry, and clock times without a date are local times on its day (the day before when
that would be after the newest row): an operator asks about the run in front of them, not about today's wall
clock (on a live workspace the two agree). So are days: `yesterday` is the day before the newest telemetry's
(local midnight to midnight), `since yesterday` from its start to now, `today` the newest telemetry's day so
far, `last night` (or `overnight`) 18:00 the day before to 06:00 on the newest telemetry's day, `this morning`
06:00 to noon (or now).
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
    "w": 604800,
    "week": 604800,
}
_UNIT = r"(s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?|w|weeks?)"
_COUNT = r"(\d{1,5}|an?|one|half\s+an?|a\s+half)"
_WORD_COUNTS = {"a": 1.0, "an": 1.0, "one": 1.0}
# "last 5 min", "the past hour" (no count: one), "last half hour"; "an hour ago", "30 minutes ago"
_LAST = re.compile(
    rf"\b(?:last|past|previous)\s+(?:(\d{{1,5}}|half(?=\s+an?\s+hour|\s+hour))\s*(?:an?\s+)?)?{_UNIT}\b", re.I
)
_AGO = re.compile(rf"\b{_COUNT}\s*{_UNIT}\s+ago\b", re.I)
# A clock time (10:00, 10:00:30, 9am, 9 am, 9:30pm, noon, midnight) or an ISO 8601 date(-time)
_WHEN = (
    r"\d{4}-\d{2}-\d{2}(?:[T ]\d{1,2}:\d{2}(?::\d{2})?)?(?:Z|[+-]\d{2}:?\d{2})?(?![\w:-])"
    r"|\d{1,2}(?::\d{2}(?::\d{2})?)?\s*(?:[ap]\.?m\b\.?)|\d{1,2}:\d{2}(?::\d{2})?(?![\d:])|noon\b|midnight\b"
    r"|\d\S*"  # anything else starting with a digit: read, and refused with what is accepted
)
_BOUND = re.compile(rf"\b(since|after|from|until|before|till|to)\s+({_WHEN})", re.I)
_DAYS = re.compile(
    r"\b(?P<since>since\s+)?(?P<day>yesterday|today|last\s+night|overnight|this\s+morning)\b", re.I
)
NIGHT_START_H, NIGHT_END_H = 18, 6  # "last night": 18:00 the day before to 06:00
MORNING_START_H, NOON_H = 6, 12  # "this morning": 06:00 to noon
# A question about GPUs (their temperatures, their state) rather than the rack or node named with them
_GPU_WORD = re.compile(r"(?<![\w/])gpus?\b", re.I)
_CLOCK = re.compile(r"^(\d{1,2})(?::(\d{2})(?::(\d{2}))?)?\s*(?:([ap])\.?m\.?)?$", re.I)


@dataclass(frozen=True)
class TimeScope:
    start_ts_s: float | None
    end_ts_s: float | None
    said: str  # the words it came from, for the answer

    def describe(self) -> str:
        if self.start_ts_s is not None and self.end_ts_s is not None:
            times = f"from {when(self.start_ts_s)} to {when(self.end_ts_s)}"
            if _DAYS.fullmatch(self.said):
                return f"{self.said}, by the data's clock ({times})"
            if _LAST.fullmatch(self.said) or _AGO.fullmatch(self.said):
                return f"{self.said}, back from the newest telemetry ({times})"
            return times
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


# What on-call asks first, in their words (checked in this order: "what should I do about the affected jobs"
# asks what to do). Anything else is about the components or the time it names, an incident, or free-form.
_INTENTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "todo",
        re.compile(
            r"\bwhat\s+(?:should|shall|do|must|can|could)\s+(?:i|we)\s+(?:do|approve)\b|\bwhat\s+now\b"
            r"|\bnext\s+steps?\b|\bto-?do\b|\bwhat\s+(?:is|'s|are)\s+(?:pending|waiting)\b"
            r"|\bwhat\s+(?:needs|waits\s+for)\s+(?:my|our|an?)?\s*(?:approval|attention|signature|me|us)\b"
            r"|\bpending\s+(?:actions?|approvals?|steps?|plans?|proposals?)\b|\banything\s+(?:pending|waiting)\b"
            r"|\b(?:pending|waiting)\s+(?:for|on)\s+(?:me|us)\b|\bwhat\s+(?:to|needs)\s+(?:approve|approving)\b",
            re.I,
        ),
    ),
    (
        "jobs",
        re.compile(
            r"\b(?:which|what)\s+(?:jobs?|ranks?)\b|\b(?:affected|impacted|hit)\s+(?:jobs?|ranks?)\b"
            r"|\b(?:jobs?|ranks?)\s+(?:are\s+|is\s+)?(?:affected|impacted|hit|hurt)\b",
            re.I,
        ),
    ),
    (
        "changes",
        re.compile(
            r"\bwhat(?:'s|\s+has|\s+have|\s+is)?\s+(?:changed|happened|new)\b|\bchanges?\b|\banything\s+new\b"
            r"|\bwhat\s+went\s+on\b",
            re.I,
        ),
    ),
    (
        "wrong",
        re.compile(
            r"\bwhat(?:'s|\s+is|s)\s+(?:wrong|broken|going\s+on|up|failing)\b|\banything\s+(?:wrong|broken)\b"
            r"|\b(?:open|all|current|active)\s+(?:the\s+)?(?:incidents?|problems?|issues?)\b"
            r"|\bwhat\s+(?:incidents?|problems?|issues?)\b|\b(?:is|are)\s+(?:the\s+)?(?:cluster|fleet|everything|all)"
            r"\s+(?:ok|okay|fine|healthy|good)\b|\b(?:cluster|fleet|overall)\s+(?:status|health)\b"
            r"|^\s*(?:status|health|incidents|problems)\s*\??\s*$",
            re.I,
        ),
    ),
)


def intent_of(question: str) -> str | None:
    """`todo`, `jobs`, `changes` or `wrong` when the question asks one of on-call's first questions, else None."""
    text = question[:MAX_QUESTION_CHARS].replace("\u2019", "'")
    return next((name for name, pattern in _INTENTS if pattern.search(text)), None)


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
    back = _LAST.search(text) or _AGO.search(text)
    if back:
        period = " ".join(back.group(0).lower().split())
        if newest_ts_s is None:
            raise ScopeError(f"'{period}': there is no telemetry to count back from")
        seconds = _count(back.group(1)) * _UNITS_S[_unit(back.group(2))]
        return TimeScope(newest_ts_s - seconds, newest_ts_s, period)
    start = end = None
    said = []
    for match in _BOUND.finditer(text):
        word, value = match.group(1).lower(), match.group(2).rstrip("?.,;!)")
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


def _count(said: str | None) -> float:
    """`5` -> 5, nothing, `a`, `an`, `one` -> 1, `half`, `half an`, `a half` -> 0.5."""
    if said is None:
        return 1.0
    words = said.lower().split()
    if words[0] == "half" or words[-1] == "half":
        return 0.5
    return _WORD_COUNTS.get(words[0]) or float(words[0])


def _unit(said: str) -> str:
    """`mins` -> `min`, `hrs` -> `hour`, `s` -> `s`: a key of `_UNITS_S`."""
    word = said.lower()
    word = word[:-1] if len(word) > 1 and word.endswith("s") and word[:-1] in _UNITS_S | {"hr": 0} else word
    return "hour" if word == "hr" else word


def _read_time(value: str, newest_ts_s: float | None, zone: tzinfo) -> float:
    clock = _CLOCK.match(value)
    named = value.lower()
    if clock or named in ("noon", "midnight"):
        hour, minute, second = (12, 0, 0) if named == "noon" else (0, 0, 0)
        if clock:
            hour, minute, second = int(clock.group(1)), int(clock.group(2) or 0), int(clock.group(3) or 0)
            if clock.group(4) and not 1 <= hour <= 12:
                raise ScopeError(f"'{value}' is not a clock time (1am to 12pm, or 00:00 to 23:59:59)")
            if clock.group(4):  # 12am is midnight, 12pm noon
                hour = hour % 12 + (12 if clock.group(4).lower() == "p" else 0)
            elif clock.group(2) is None:
                raise ScopeError(f"'{value}' is not a clock time (9am, 9:30, 21:00, noon or midnight)")
        if hour > 23 or minute > 59 or second > 59:
            raise ScopeError(f"'{value}' is not a clock time (HH:MM or HH:MM:SS, 00:00 to 23:59:59)")
        if newest_ts_s is None:
            raise ScopeError(
                f"'{value}': no telemetry to date it by (give a date: 2026-01-01T{hour:02d}:{minute:02d})"
            )
        newest = datetime.fromtimestamp(newest_ts_s, tz=zone)
        at = newest.replace(hour=hour, minute=minute, second=second, microsecond=0)
        if at.timestamp() > newest_ts_s:
            at -= timedelta(days=1)
        return at.timestamp()
    try:
        parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        raise ScopeError(
            f"'{value[:40]}' is not a time (HH:MM, 9am, noon, an ISO 8601 date-time such as 2026-01-01T10:00Z, "
            "or 'last 10 min', 'last hour')"
        ) from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=zone)).timestamp()


def _day_scope(match: re.Match[str], newest_ts_s: float | None, zone: tzinfo) -> TimeScope:
    """`yesterday`, `since yesterday`, `today`, `last night`, `this morning` on the days of the newest telemetry (local time)."""
    said = " ".join(match.group(0).lower().split())
    if newest_ts_s is None:
        raise ScopeError(f"'{said}': there is no telemetry to count the days from")
    newest = datetime.fromtimestamp(newest_ts_s, tz=zone)
    midnight = newest.replace(hour=0, minute=0, second=0, microsecond=0)
    day = " ".join(match.group("day").lower().split())
    if day == "today":
        return TimeScope(midnight.timestamp(), newest_ts_s, said)
    if day == "this morning":
        if newest.hour < MORNING_START_H:
            raise ScopeError(f"'{said}': the newest telemetry ({when(newest_ts_s)}) is before 06:00")
        start_s = midnight.replace(hour=MORNING_START_H).timestamp()
        return TimeScope(start_s, min(midnight.replace(hour=NOON_H).timestamp(), newest_ts_s), said)
    if day in ("last night", "overnight"):
        evening = (midnight - timedelta(days=1)).replace(hour=NIGHT_START_H)
        morning = midnight.replace(hour=NIGHT_END_H)
        return TimeScope(evening.timestamp(), min(morning.timestamp(), newest_ts_s), said)
    day_before_s = (midnight - timedelta(days=1)).timestamp()
    if match.group("since"):
        return TimeScope(day_before_s, newest_ts_s, said)
    return TimeScope(day_before_s, midnight.timestamp(), said)
