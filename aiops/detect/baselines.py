"""Robust per-entity baselines for streaming detection: a rolling median with MAD over recent normal values."""

from __future__ import annotations

from collections import deque
from statistics import median


class RollingBaseline:
    """Median/MAD over the last `size` values that were judged normal (anomalies do not move the baseline).
    The median is kept until the next `add`; `exceeds` computes the MAD only for a value past the median's own
    limits (the same answer, a fraction of the cost: a fleet judges thousands of these every scrape)."""

    def __init__(self, size: int = 30, min_count: int = 3) -> None:
        self.values: deque[float] = deque(maxlen=size)
        self.min_count = min_count
        self._median: float | None = None

    def ready(self) -> bool:
        return len(self.values) >= self.min_count

    def add(self, value: float) -> None:
        self.values.append(value)
        self._median = None

    @property
    def median(self) -> float:
        if self._median is None:
            self._median = median(self.values) if self.values else 0.0
        return self._median

    @property
    def mad(self) -> float:
        if not self.values:
            return 0.0
        center = self.median
        return median([abs(v - center) for v in self.values])

    def exceeds(self, value: float, *, ratio: float, floor: float, mads: float = 5.0) -> bool:
        """Is `value` above the baseline by more than `ratio` (relative), `floor` (absolute) and `mads` MADs?"""
        if not self.ready():
            return False
        center = self.median
        if value <= center * (1.0 + ratio) or value <= center + floor:
            return False
        return value > center + mads * 1.4826 * self.mad


class Persistence:
    """Counts consecutive windows for which a condition held, per key."""

    def __init__(self) -> None:
        self.counts: dict[str, int] = {}
        self.first_ts_s: dict[str, float] = {}

    def update(self, key: str, condition: bool, ts_s: float) -> int:
        if condition:
            self.counts[key] = self.counts.get(key, 0) + 1
            self.first_ts_s.setdefault(key, ts_s)
        else:
            self.counts.pop(key, None)
            self.first_ts_s.pop(key, None)
        return self.counts.get(key, 0)

    def since(self, key: str, default: float) -> float:
        return self.first_ts_s.get(key, default)
