"""Early warnings: trends in the degradation counters that precede hard faults (docs/DETECTION.md, "Early
warnings"). Pure logic over 5-minute buckets; aiops/detect/early_watch.py reads the store and opens the warnings.

Rates, not levels: a counter's total says how old a part is; its rate per bucket says whether it is degrading now.
Each component is judged against its own history (the last `HISTORY` buckets before the recent ones) and its
peers' recent rates (the other components of its kind that report): a link that has always been noisy is not
degrading, and a rate every GPU shares (a driver's reporting change) is nobody's.

- **counters** (`ecc_corrected`, `nvlink_errors`, `pcie_replay`, `ib_link_errors`): every one of the last
  `RECENT` buckets at `floor` errors or more (a single burst, a weak HBM cell's Xid 92 or a churned ECC storm,
  fills one bucket, never three), their mean `RATIO` times the larger of the own and the peers' rate, and their
  sum improbable (`NOISE_P`, Poisson) at that rate: a link that has always been noisy needs more to warn;
- **thermal**: the GPU's temperature above what its rack's GPUs run at its power (a line fitted over the rack,
  again without its outliers: coolant plus power times a shared resistance; a worn fan or a drying cold plate
  raises the GPU's own resistance), said at a training load's power (`REFERENCE_W`; an idle GPU is not judged),
  climbing steadily: over the last `THERMAL_RECENT` buckets, the mean of each third at least `THERMAL_THIRD_C`
  above the one before and the last `THERMAL_RISE_C` above the first, no jump over two buckets larger than
  `THERMAL_JUMP` of the climb, and `THERMAL_ABOVE_C` above its own earlier excess. A warm spot (a neighbour's
  exhaust) is a step, not a climb; a rack's or the outside air's warming, and the job's load, move the peers too.

A warning forecasts one or more root-cause labels (the closed vocabulary, unchanged): a hypothesis, not a
diagnosis. Thresholds: the twin's noise (aiops/sim/precursors.py) puts a median benign link's chance of three
elevated buckets in a row at about 1e-17 per bucket, but one at the noisy end of the lognormal (11/h) at 4e-6:
hence the Poisson test against each component's own rate (docs/DETECTION.md).
"""

from __future__ import annotations

import math
from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import mean, median
from typing import Any

BUCKET_S = 300.0
RECENT = 3  # counter buckets that must all be elevated (15 minutes)
THERMAL_RECENT = 12  # thermal buckets of a steady climb (an hour)
HISTORY = 72  # buckets of a component's own history (6 hours)
MIN_HISTORY = 6  # buckets of history before a component is judged (30 minutes)
RATIO = 4.0
MIN_PEERS = 3
NOISE_P = 1e-6  # counters: the recent buckets' sum must be this improbable under the component's usual rate
THERMAL_RISE_C = 2.0  # the climb from the recent buckets' first third to their last, at least
THERMAL_THIRD_C = 0.5  # and each third over the one before: a climb all along, not a late step
THERMAL_JUMP = 0.6  # no jump over two buckets larger than this share of the climb (a warm spot is a step)
THERMAL_ABOVE_C = 2.5
FIT_OUTLIER_MADS = 3.0
LOADED_W = 200.0  # a GPU below this (idle) is not judged for heat that bucket
REFERENCE_W = 600.0  # the excess is said at a full training load's power
THERMAL_GAPS = 3  # recent buckets that may go unjudged (idle) in a climb
SERIES = 12  # buckets of evidence kept with a warning (an hour)


@dataclass(frozen=True)
class Signal:
    name: str
    kind: str  # the component kind it is read on: gpu | nic
    forecasts: tuple[str, ...]  # root-cause labels, most likely first
    what: str  # in words, for titles
    floor: float  # counters: errors per bucket each recent bucket needs


SIGNALS: dict[str, Signal] = {
    "ecc_corrected": Signal("ecc_corrected", "gpu", ("gpu_ecc_error",), "corrected ECC errors", 4.0),
    "nvlink_errors": Signal("nvlink_errors", "gpu", ("nvlink_degraded",), "NVLink CRC/replay errors", 4.0),
    "pcie_replay": Signal("pcie_replay", "gpu", ("gpu_fell_off_bus", "pcie_degraded"), "PCIe replays", 4.0),
    "ib_link_errors": Signal(
        "ib_link_errors", "nic", ("nic_link_flap",), "IB symbol errors and link recoveries", 4.0
    ),
    "thermal": Signal(
        "thermal", "gpu", ("thermal_throttle",), "temperature above its rack at its power", 0.0
    ),
}


@dataclass(frozen=True)
class EarlyWarning:
    """A trend on `component` that completed at `ts_s`: `rate_per_h` now against `baseline_per_h` (its own
    history) and `peer_per_h` (its peers; None with too few); `series`: (bucket end, value) of the last hour,
    errors per bucket or °C above the peers."""

    signal: str
    component: str
    ts_s: float
    since_ts_s: float
    rate_per_h: float
    baseline_per_h: float
    peer_per_h: float | None
    series: tuple[tuple[float, float], ...]
    above_peers_c: float | None = None  # thermal: now, and as it usually was
    usual_above_peers_c: float | None = None

    @property
    def forecasts(self) -> tuple[str, ...]:
        return SIGNALS[self.signal].forecasts

    def detail(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "signal": self.signal,
            "forecasts": list(self.forecasts),
            "since_ts_s": self.since_ts_s,
            "bucket_s": BUCKET_S,
            "series": [[round(ts, 1), None if math.isnan(v) else round(v, 2)] for ts, v in self.series],
        }
        if self.signal == "thermal":
            out.update(
                climb_c_per_h=round(self.rate_per_h, 2),
                above_peers_c=_rounded(self.above_peers_c),
                usual_above_peers_c=_rounded(self.usual_above_peers_c),
            )
        else:
            out.update(
                rate_errors_per_h=round(self.rate_per_h, 2),
                baseline_errors_per_h=round(self.baseline_per_h, 2),
                peer_errors_per_h=_rounded(self.peer_per_h),
            )
        return out

    def describe(self) -> str:
        """The trend in a sentence (titles, summaries)."""
        what = SIGNALS[self.signal].what
        if self.signal == "thermal":
            return (
                f"{self.component} runs {self.above_peers_c or 0.0:.1f} °C above its rack's GPUs at its power "
                f"(usually {self.usual_above_peers_c or 0.0:.1f} °C), climbing {self.rate_per_h:.1f} °C/h"
            )
        peers = f", peers {self.peer_per_h:.1f}/h" if self.peer_per_h is not None else ""
        return (
            f"{what} on {self.component} at {self.rate_per_h:.0f}/h for "
            f"{(self.ts_s - self.since_ts_s) / 60.0:.0f} min (its own {self.baseline_per_h:.1f}/h{peers})"
        )


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _history() -> deque[tuple[float, float]]:
    return deque(maxlen=HISTORY + THERMAL_RECENT)


@dataclass
class TrendWatch:
    """Per (signal, component): the bucket series; `counters` and `temperatures` add one bucket and return the
    warnings whose trend holds at its end."""

    totals: dict[tuple[str, str], float] = field(default_factory=dict)
    series: dict[tuple[str, str], deque[tuple[float, float]]] = field(
        default_factory=lambda: defaultdict(_history)
    )

    def counters(self, signal: str, end_ts_s: float, totals: Mapping[str, float]) -> list[EarlyWarning]:
        """One bucket of a counter signal: `totals` (component -> cumulative count at the bucket's end)."""
        fresh: dict[str, float] = {}
        for component, total in totals.items():
            key = (signal, component)
            before = self.totals.get(key)
            self.totals[key] = total
            if before is None:
                continue
            fresh[component] = max(0.0, total - before)  # a reset (driver reload) counts as nothing new
            self.series[key].append((end_ts_s, fresh[component]))
        recent_means = {
            c: mean(v for _, v in list(self.series[(signal, c)])[-RECENT:])
            for c in fresh
            if len(self.series[(signal, c)]) >= RECENT
        }
        out: list[EarlyWarning] = []
        for component in fresh:
            found = self._judge_counter(signal, component, recent_means)
            if found is not None:
                out.append(found)
        return out

    def _judge_counter(
        self, signal: str, component: str, recent_means: Mapping[str, float]
    ) -> EarlyWarning | None:
        spec = SIGNALS[signal]
        points = list(self.series[(signal, component)])
        if len(points) < MIN_HISTORY + RECENT:
            return None
        recent = [v for _, v in points[-RECENT:]]
        past = [v for _, v in points[:-RECENT]][-HISTORY:]
        if min(recent) < spec.floor:
            return None
        peers = [m for c, m in recent_means.items() if c != component]
        peer = median(peers) if len(peers) >= MIN_PEERS else None
        own = mean(past)
        reference = max(own, peer or 0.0, spec.floor / RATIO)
        if mean(recent) < RATIO * reference:
            return None
        # and improbable for the rate it has always had (or its peers' now): a link at the noisy end of a fleet
        # (11 errors/h, the twin's lognormal at +2.4 sigma) fills three buckets at the floor by chance about once in
        # 270,000 tries, one at the median (1/h) once in 1e17
        if poisson_tail(sum(recent), RECENT * max(own, peer or 0.0)) > NOISE_P:
            return None
        per_h = 3600.0 / BUCKET_S
        return EarlyWarning(
            signal,
            component,
            points[-1][0],
            points[-RECENT][0] - BUCKET_S,
            mean(recent) * per_h,
            own * per_h,
            None if peer is None else peer * per_h,
            tuple(points[-SERIES:]),
        )

    def temperatures(
        self, end_ts_s: float, readings: Mapping[str, tuple[float, float, str]]
    ) -> list[EarlyWarning]:
        """One bucket of GPU temperatures: `readings` (gpu -> mean temperature, mean power in W, peer group).
        Each GPU's excess is its temperature above what its group's GPUs run at its power (a line fitted over
        the group: coolant plus power times a shared thermal resistance), so load and coolant cancel."""
        groups: dict[str, list[tuple[str, float, float]]] = defaultdict(list)
        for gpu, (temp_c, power_w, group) in readings.items():
            groups[group].append((gpu, temp_c, power_w))
        out: list[EarlyWarning] = []
        for members in groups.values():
            fit = _robust_line([p for _, _, p in members], [t for _, t, _ in members])
            for gpu, temp_c, power_w in members:
                key = ("thermal", gpu)
                if fit is None:  # too few peers for a fair comparison this bucket
                    self.series[key].append((end_ts_s, math.nan))
                    continue
                excess_c = temp_c - (fit[0] + fit[1] * power_w)
                # at a full training load's power: a worn fan's excess grows with the heat it must move, so a
                # job that waits (its GPUs spinning at half power) does not look like a cooler part
                loaded = power_w >= LOADED_W
                self.series[key].append((end_ts_s, excess_c * REFERENCE_W / power_w if loaded else math.nan))
                found = self._judge_thermal(gpu)
                if found is not None:
                    out.append(found)
        return out

    def _judge_thermal(self, gpu: str) -> EarlyWarning | None:
        points = list(self.series[("thermal", gpu)])
        if len(points) < MIN_HISTORY + THERMAL_RECENT:
            return None
        recent = [v for _, v in points[-THERMAL_RECENT:] if not math.isnan(v)]
        past = [v for _, v in points[:-THERMAL_RECENT] if not math.isnan(v)]
        if len(recent) < THERMAL_RECENT - THERMAL_GAPS or len(past) < MIN_HISTORY:
            return None
        third = len(recent) // 3
        first, middle, last = mean(recent[:third]), mean(recent[third:-third]), mean(recent[-third:])
        rise_c = last - first
        jump_c = max(b - a for a, b in zip(recent, recent[2:], strict=False))  # over two buckets
        own_c = median(past)
        steady = (
            middle - first >= THERMAL_THIRD_C
            and last - middle >= THERMAL_THIRD_C
            and rise_c >= THERMAL_RISE_C
            and jump_c <= THERMAL_JUMP * rise_c
        )
        if not (steady and recent[-1] - own_c >= THERMAL_ABOVE_C):
            return None
        span_h = (points[-1][0] - points[-THERMAL_RECENT][0]) * (len(recent) - third) / len(recent) / 3600.0
        return EarlyWarning(
            "thermal",
            gpu,
            points[-1][0],
            points[-THERMAL_RECENT][0] - BUCKET_S,
            rise_c / span_h,
            0.0,
            None,
            tuple(points[-SERIES:]),
            recent[-1],
            own_c,
        )


def _robust_line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """`_line` fitted again without the points far off the first fit (a throttling GPU, hot at a low power,
    would tilt the rack's line): those more than `FIT_OUTLIER_MADS` scaled MADs of the residuals away."""
    fit = _line(xs, ys)
    if fit is None:
        return None
    residuals = [y - (fit[0] + fit[1] * x) for x, y in zip(xs, ys, strict=True)]
    center = median(residuals)
    spread = 1.4826 * median(abs(r - center) for r in residuals)
    kept = [
        (x, y)
        for x, y, r in zip(xs, ys, residuals, strict=True)
        if abs(r - center) <= FIT_OUTLIER_MADS * max(spread, 0.5)
    ]
    return _line([x for x, _ in kept], [y for _, y in kept]) or fit


def poisson_tail(count: float, expected: float) -> float:
    """P(N >= count) for N ~ Poisson(`expected`): the chance of so many errors or more from a component's usual
    rate. Summed from `count` up (no 1 - sum of the head, which rounds to 0 in the far tail); at most 1,000 terms."""
    k = math.ceil(count)
    if k <= 0 or expected >= k:
        return 1.0
    if expected <= 0.0:
        return 0.0
    term = math.exp(-expected + k * math.log(expected) - math.lgamma(k + 1))
    total = 0.0
    for i in range(k + 1, k + 1001):
        total += term
        if term < total * 1e-12:
            break
        term *= expected / i
    return min(1.0, total)


def _line(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """Least squares y = a + b x (b = 0 where x does not vary); None for fewer than `MIN_PEERS` + 1 points."""
    if len(xs) <= MIN_PEERS:
        return None
    mx, my = mean(xs), mean(ys)
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var > 1e-9 else 0.0
    return my - slope * mx, slope
