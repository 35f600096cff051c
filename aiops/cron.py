"""Five-field cron expressions (minute hour day-of-month month day-of-week, as crontab(5)), validated with
errors that name the field and its allowed values, and the latest due time at or before a moment (UTC).

Each field: `*`, a number, a range `a-b`, a step `*/n` or `a-b/n`, or a comma list of these. Day of week is
0-7 (0 and 7 are Sunday). As in crontab(5), when both day fields are restricted a day matches if either does."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from aiops.errors import ConfigError

_FIELDS = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day of month", 1, 31),
    ("month", 1, 12),
    ("day of week", 0, 7),
)
_LOOKBACK_DAYS = 366 * 8  # 29 February on a Monday recurs within 28 years; anything rarer is refused here


@dataclass(frozen=True)
class Cron:
    text: str
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]  # 0 = Sunday
    days_any: bool
    weekdays_any: bool

    def _day_matches(self, day: datetime) -> bool:
        if day.month not in self.months:
            return False
        in_month = day.day in self.days
        in_week = (day.isoweekday() % 7) in self.weekdays
        if self.days_any or self.weekdays_any:
            return in_month and in_week
        return in_month or in_week

    def previous_due_ts_s(self, now_ts_s: float) -> float | None:
        """The latest moment at or before `now_ts_s` the expression names (None if none in ~8 years)."""
        now = datetime.fromtimestamp(now_ts_s, UTC).replace(second=0, microsecond=0)
        day = now.replace(hour=0, minute=0)
        times = sorted((h, m) for h in self.hours for m in self.minutes)
        for back in range(_LOOKBACK_DAYS):
            candidate_day = day - timedelta(days=back)
            if not self._day_matches(candidate_day):
                continue
            for hour, minute in reversed(times):
                moment = candidate_day.replace(hour=hour, minute=minute)
                if moment <= now:
                    return moment.timestamp()
        return None


def _field(text: str, name: str, low: int, high: int, source: str, key: str) -> frozenset[int]:
    allowed = f"*, {low}-{high}, a-b, */n, a-b/n, comma lists"
    values: set[int] = set()
    for part in text.split(","):
        body, _, step_text = part.partition("/")
        try:
            step = int(step_text) if step_text else 1
            if body == "*":
                start, end = low, high
            elif "-" in body:
                first, last = body.split("-", 1)
                start, end = int(first), int(last)
            else:
                start = end = int(body)
                if step_text:
                    end = high
        except ValueError:
            raise ConfigError(source, key, f"{name} field {text!r} is not a cron field", allowed) from None
        if step < 1 or not (low <= start <= end <= high):
            raise ConfigError(source, key, f"{name} field {text!r} is out of range", allowed)
        values.update(range(start, end + 1, step))
    return frozenset(values)


def parse_cron(text: str, source: str = "<config>", key: str = "report.cron") -> Cron:
    """Parse a five-field expression; ConfigError names `source`, `key` and what each field accepts."""
    parts = text.split()
    if len(parts) != 5:
        raise ConfigError(
            source,
            key,
            f"{text!r} has {len(parts)} fields, a cron expression has 5",
            "minute hour day-of-month month day-of-week, e.g. '0 6 * * *' (06:00 UTC daily)",
        )
    sets = [
        _field(p, name, low, high, source, key) for p, (name, low, high) in zip(parts, _FIELDS, strict=True)
    ]
    weekdays = frozenset(d % 7 for d in sets[4])
    cron = Cron(text, sets[0], sets[1], sets[2], sets[3], weekdays, parts[2] == "*", parts[4] == "*")
    if not any(day <= _days_in(month) for month in cron.months for day in cron.days):
        raise ConfigError(
            source, key, f"{text!r} names no day that exists", "a day of month that the months have"
        )
    return cron


def _days_in(month: int) -> int:
    return 29 if month == 2 else 30 if month in (4, 6, 9, 11) else 31
