"""Per-rank timing as Prometheus families (what the fleet joins across nodes to find a job's stragglers,
aiops/detect/stragglers.py): from each `rank_timing_samples` row the agent collects, cumulative per rank and
kind of call the time blocked and the calls, and per rank the seconds its probes counted (the denominator: the
collector probes a window every period, so a scrape interval holds some windows, or none).

- `aiops_rank_blocked_seconds_total{node, job, rank, kind}`: time from entry to return in probed calls of that
  kind (`collective`, `group`, `sync`, `copy`);
- `aiops_rank_calls_total{node, job, rank, kind}`: those calls;
- `aiops_rank_probed_seconds_total{node, job, rank}`: the windows' length, each window once.
Per op rows are summed by kind (the detector reads kinds): a rank costs nine series, not one per op. Ranks of
no known job (`process-<pid>`) and rows without a rank are not exported. Labels come from the collector's own
vocabulary and the job naming rule, never from a process's command line.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from prometheus_client.core import CounterMetricFamily, Metric

from aiops.column_model import Family
from aiops.columns_ranks import BLOCKED, CALLS, KINDS, PROBED

MAX_SEEN_WINDOWS = 4096  # (pid, window close) pairs remembered to count each window once


class RankExports:
    """Cumulative per-rank totals. Not locked itself: MetricsCache calls it under its lock."""

    def __init__(self) -> None:
        self.blocked_s: dict[tuple[str, str, int, str], float] = defaultdict(float)  # (node, job, rank, kind)
        self.calls: dict[tuple[str, str, int, str], float] = defaultdict(float)
        self.probed_s: dict[tuple[str, str, int], float] = defaultdict(float)  # (node, job, rank)
        self._windows: dict[tuple[str, int, float], None] = {}  # (node, pid, window close) already counted

    def observe(self, values: Mapping[str, Any]) -> None:
        kind, rank, job = str(values.get("kind")), values.get("rank"), str(values.get("job") or "")
        if kind not in KINDS or rank is None or not job or job.startswith("process-"):
            return
        node = str(values["node"])
        key = (node, job, int(rank), kind)
        self.blocked_s[key] += float(values.get("blocked_s") or 0.0)
        self.calls[key] += float(values.get("calls") or 0)
        window = (node, int(values.get("pid") or 0), float(values["ts_s"]))
        if window not in self._windows:
            self._windows[window] = None
            if len(self._windows) > MAX_SEEN_WINDOWS:
                del self._windows[next(iter(self._windows))]
            self.probed_s[(node, job, int(rank))] += float(values.get("window_s") or 0.0)

    def families(self) -> Iterable[Metric]:
        """The families declared with rank_timing_samples (aiops/columns_ranks.py), rendered from the sums."""
        blocked, calls, probed = _counter(BLOCKED), _counter(CALLS), _counter(PROBED)
        for (node, job, rank, kind), seconds in sorted(self.blocked_s.items()):
            blocked.add_metric([node, job, str(rank), kind], seconds)
            calls.add_metric([node, job, str(rank), kind], self.calls[(node, job, rank, kind)])
        for (node, job, rank), seconds in sorted(self.probed_s.items()):
            probed.add_metric([node, job, str(rank)], seconds)
        yield blocked
        yield calls
        yield probed


def _counter(family: Family) -> CounterMetricFamily:
    # prometheus_client names a counter without its `_total` (it adds it to the sample)
    return CounterMetricFamily(family.name.removesuffix("_total"), family.help, labels=list(family.labels))
