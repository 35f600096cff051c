"""Forecasting bulk demand for the proactive law: a Holt (double exponential smoothing) forecaster on the
measured bulk rate, and the checkpoint schedule from job context (the `jobs` table's checkpoint_every_s).

Holt's linear method: level l_t = a*y_t + (1-a)*(l_{t-1} + b_{t-1}); trend b_t = g*(l_t - l_{t-1}) +
(1-g)*b_{t-1}; forecast y_{t+h} = l_t + h*b_t (Hyndman & Athanasopoulos, Forecasting: Principles and
Practice, 3rd ed., section 8.2). h is in controller steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Holt:
    alpha: float = 0.5
    beta: float = 0.3
    level: float | None = None
    trend: float = 0.0

    def update(self, sample: float) -> Holt:
        if self.level is None:
            return Holt(self.alpha, self.beta, sample, 0.0)
        level = self.alpha * sample + (1 - self.alpha) * (self.level + self.trend)
        trend = self.beta * (level - self.level) + (1 - self.beta) * self.trend
        return Holt(self.alpha, self.beta, level, trend)

    def forecast(self, steps_ahead: float) -> float:
        if self.level is None:
            return 0.0
        return max(self.level + steps_ahead * self.trend, 0.0)


@dataclass(frozen=True)
class CheckpointSchedule:
    """Checkpoints every `every_s` seconds from `first_start_ts_s`, each lasting about `duration_s`."""

    every_s: float
    first_start_ts_s: float
    duration_s: float = 0.0

    def next_start(self, now_ts_s: float) -> float:
        if now_ts_s <= self.first_start_ts_s:
            return self.first_start_ts_s
        periods = math.ceil((now_ts_s - self.first_start_ts_s) / self.every_s)
        return self.first_start_ts_s + periods * self.every_s

    def in_progress(self, now_ts_s: float) -> bool:
        if now_ts_s < self.first_start_ts_s or self.duration_s <= 0:
            return False
        return (now_ts_s - self.first_start_ts_s) % self.every_s < self.duration_s


@dataclass(frozen=True)
class BulkForecast:
    """Whether a bulk spike is due within `lead_s`: from the schedule when one is known (not while a
    checkpoint runs), or when the Holt forecast of the measured bulk rate crosses `spike_mbps` within the lead
    time while the rate is still below it."""

    holt: Holt = Holt()
    schedule: CheckpointSchedule | None = None

    def observe(self, bulk_mbps: float) -> BulkForecast:
        return BulkForecast(self.holt.update(bulk_mbps), self.schedule)

    def spike_due(self, now_ts_s: float, lead_s: float, interval_s: float, spike_mbps: float) -> bool:
        schedule = self.schedule
        # only ahead of a checkpoint: once it runs, ECN and HTB borrowing take over
        if (
            schedule
            and not schedule.in_progress(now_ts_s)
            and schedule.next_start(now_ts_s) - now_ts_s <= lead_s
        ):
            return True
        if self.holt.level is None or spike_mbps <= 0 or self.holt.level >= spike_mbps:
            return False  # a spike already under way is not "due"
        steps = lead_s / interval_s if interval_s > 0 else 0.0
        return self.holt.forecast(steps) >= spike_mbps
