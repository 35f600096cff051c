"""Early warnings: trends in the degradation counters that precede hard faults (docs/DETECTION.md, "Early
warnings"). Pure logic over 5-minute buckets; aiops/detect/early_watch.py reads the store and opens the warnings.

Rates, not levels: a counter's total says how old a part is; its rate per bucket says whether it is degrading now.
Each component is judged against its own history (the last `HISTORY` buckets before the recent ones) and its
peers' recent rates (the other components of its kind that report): a link that has always been noisy is not
degrading, and a rate every GPU shares (a driver's reporting change) is nobody's.

- **counters** (`ecc_corrected`, `nvlink_errors`, `pcie_replay`, `ib_link_errors`): every one of the last
  `RECENT` buckets at `floor` errors or more (a single burst, a weak HBM cell's Xid 92 or a churned ECC storm,
  fills one bucket, never three), and their mean `RATIO` times the larger of the own and the peers' rate;
- **thermal**: the GPU's temperature above the median of its peers at the same load (its rack's GPUs at the same
  third of their power limit, as aiops/detect/heat.py groups load) climbing steadily: over the last
  `THERMAL_RECENT` buckets no step down, most steps up, at least `THERMAL_RISE_C` in all, and `THERMAL_ABOVE_C`
  above its own earlier excess. A warm spot (a neighbour's exhaust) is a step, not a climb; a rack's or the
  outside air's warming moves the peers too.

A warning forecasts one or more root-cause labels (the closed vocabulary, unchanged): a hypothesis, not a
diagnosis. Thresholds: the twin's noise (aiops/sim/precursors.py) puts a benign link's chance of three
elevated buckets in a row below 1e-9 per bucket (docs/DETECTION.md).
"""

from __future__ import annotations

import itertools
import math
from collections import defaultdict, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import mean, median
from typing import Any

BUCKET_S = 300.0
RECENT = 3  # counter buckets that must all be elevated (15 minutes)
THERMAL_RECENT = 6  # thermal buckets of a steady climb (30 minutes)
HISTORY = 72  # buckets of a component's own history (6 hours)
MIN_HISTORY = 6  # buckets of history before a component is judged (30 minutes)
RATIO = 4.0
MIN_PEERS = 3
THERMAL_RISE_C = 1.0
THERMAL_ABOVE_C = 2.0
THERMAL_STEP_DOWN_C = -0.1  # a bucket cooler than the one before by more than this breaks the climb
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
    "thermal": Signal("thermal", "gpu", ("thermal_throttle",), "temperature above its peers", 0.0),
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
                f"{self.component} runs {self.above_peers_c or 0.0:.1f} °C above its peers at the same load "
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
        self, end_ts_s: float, readings: Mapping[str, tuple[float, int | None, str]]
    ) -> list[EarlyWarning]:
        """One bucket of GPU temperatures: `readings` (gpu -> mean temperature, load level, peer group)."""
        groups: dict[tuple[str, int | None], list[float]] = defaultdict(list)
        for temp_c, level, group in readings.values():
            groups[(group, level)].append(temp_c)
        out: list[EarlyWarning] = []
        for gpu, (temp_c, level, group) in readings.items():
            peers = groups[(group, level)]
            key = ("thermal", gpu)
            if len(peers) <= MIN_PEERS or level is None:
                self.series[key].append((end_ts_s, math.nan))  # no fair comparison this bucket
                continue
            self.series[key].append((end_ts_s, temp_c - median(peers)))
            found = self._judge_thermal(gpu)
            if found is not None:
                out.append(found)
        return out

    def _judge_thermal(self, gpu: str) -> EarlyWarning | None:
        points = list(self.series[("thermal", gpu)])
        if len(points) < MIN_HISTORY + THERMAL_RECENT:
            return None
        recent = [v for _, v in points[-THERMAL_RECENT:]]
        past = [v for _, v in points[:-THERMAL_RECENT] if not math.isnan(v)]
        if any(math.isnan(v) for v in recent) or len(past) < MIN_HISTORY:
            return None
        steps = [b - a for a, b in itertools.pairwise(recent)]
        rise_c = recent[-1] - recent[0]
        own_c = median(past)
        climbing = min(steps) >= THERMAL_STEP_DOWN_C and sum(s > 0.05 for s in steps) >= len(steps) - 1
        if not (climbing and rise_c >= THERMAL_RISE_C and recent[-1] - own_c >= THERMAL_ABOVE_C):
            return None
        span_h = (THERMAL_RECENT - 1) * BUCKET_S / 3600.0
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
