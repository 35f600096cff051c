"""What the fleet can see, judged every cycle (docs/FLEET.md, "Never blind in silence"):

- `SourceSight`: can it read its time-series store? Blind when no read has brought a sample of any node agent
  for two scrape intervals (`BLIND_AFTER_STEPS`; never less than `MIN_GRACE_S`) (the store down, answering errors
  or garbage, slow past its timeout, or holding nothing), or when the reads fall that far behind the wall clock
  (slow). The fleet reads once a step, so that is two step reads in a row that brought nothing: one failed, empty
  or late read is not blindness (the same guard as a node's single missed scrape, `LOST_AFTER_STEPS`). `/readyz`
  says why, and the service states it as a `source_blind` condition (aiops/service/conditions.py) until a read
  brings data again.
- `NodePresence`: which node agents report. Each cycle asks the store, on the cycle's grid, for every node's
  `aiops_node_info` with the `instance` Prometheus scraped it from, and for every target's `up`. A step holding
  any sample at all is one the store was scraping. A node misses such a step when the store scraped its target
  in it and its series are absent (`up` 0: its agent killed, wedged, unscrapable; `up` 1: its series gone while
  its target answers); two missed steps after its last sample make it lost, and it reports again when a step
  holds its series. A step in which the store holds no scrape of its target at all (no `up` for its instance)
  is one the store did not have for that agent, not one the agent missed: the store restarting (its first
  scrapes of the targets spread over a step or more, later still under load), a scrape landing late, a read
  answered before the scrape was written. Such steps count only once they last as long as the store's own blind
  grace (`GONE_AFTER_S`, at least two steps): its target then is no longer scraped (removed from the scraper, or
  a node the workspace knows whose target never came back). The steps of a blind store (no sample from anyone:
  Prometheus itself was down) count for no one. A fleet
  scraped by the same Prometheus (the chart's ServiceMonitor) exports no node inventory; whatever the instance
  that exports `aiops_fleet_source_blind` (a gauge only a fleet exports) says about nodes never makes one present.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiops.fleet.scrapes import Verdict
from aiops.service.conditions import Condition, ConditionReport
from aiops.sources.prometheus import PrometheusClient
from aiops.store.conditions import NODE_AGENT_LOST, SOURCE_BLIND
from aiops.text import plural, when

BLIND_AFTER_STEPS = 2  # step reads in a row without data before the source counts as blind
# the least grace at a short step: a tick and a read's own time (a 2 s read of a loaded store at a 1 s step is
# not blindness); at a step of 5 s or more the grace is exactly BLIND_AFTER_STEPS steps
MIN_GRACE_S = 10.0
STARTUP_S = 300.0  # the look-back and the catch-up after it may take this long before slowness is blindness
LOST_AFTER_STEPS = 2  # scraping steps without a node's series before its agent counts as lost
# how long the store may scrape others but hold no scrape of an agent's target (no `up` for it) before that
# target counts as no longer scraped: the source's own grace (`SourceSight.grace_s`), at least LOST_AFTER_STEPS
GONE_AFTER_S = MIN_GRACE_S
FLEET_MARKER = "aiops_fleet_source_blind"  # a gauge only `aiops fleet` exports (aiops/service/service.py)


def _window(step_s: float) -> str:
    return (
        f"{max(1, math.ceil(step_s * 1000) - 1)}ms"  # as aiops/fleet/ingest.py: one step less a millisecond
    )


@dataclass
class SourceSight:
    url: str
    step_s: float
    clock: Callable[[], float] = time.time
    started_s: float = field(default_factory=time.time)
    last_data_s: float | None = None  # wall time of the last read that brought a sample
    failure: str = ""  # why the last read failed ("" when it did not)
    empty_reads: int = 0  # reads in a row that held no sample of any node agent
    reading_since_s: float | None = None  # a read in progress (set by the reader, read by /readyz)
    read_s: float = 0.0  # how long the last read took
    behind_s: float = 0.0  # how far the newest data read lags the wall clock, past the reader's own delay
    caught_up: bool = False  # a read brought data no more than the grace behind: the start is over
    blind_after_s: float = 0.0  # [fleet] blind_after_s: the grace when set; 0: BLIND_AFTER_STEPS steps

    @property
    def grace_s(self) -> float:
        """How long without data (or behind, or waiting on one read) before the fleet is blind."""
        if self.blind_after_s > 0:
            return self.blind_after_s
        return max(BLIND_AFTER_STEPS * self.step_s, MIN_GRACE_S)

    def begin(self) -> None:
        self.reading_since_s = self.clock()

    def read(self, samples: int, behind_s: float) -> None:
        """A read went through with `samples` samples; the data now lags `behind_s` past the delay."""
        now = self.clock()
        self.read_s = now - (self.reading_since_s or now)
        self.reading_since_s = None
        self.failure = ""
        self.behind_s = behind_s
        if samples:
            self.last_data_s, self.empty_reads = now, 0
            self.caught_up = self.caught_up or behind_s <= self.grace_s
        else:
            self.empty_reads += 1

    def failed(self, why: str) -> None:
        now = self.clock()
        self.read_s = now - (self.reading_since_s or now)
        self.reading_since_s = None
        self.failure = why[:300]

    def blind(self) -> str | None:
        """Why the fleet is blind now, or None while it sees. While it starts (the look-back, then reads of
        what came meanwhile, until one is within the grace; at most `STARTUP_S`) only a failed or empty read
        counts: a long first read is not a slow store."""
        now = self.clock()
        if not (self.caught_up or self.failure or self.empty_reads or now - self.started_s > STARTUP_S):
            return None
        since = self.last_data_s if self.last_data_s is not None else self.started_s
        waiting = now - self.reading_since_s if self.reading_since_s is not None else 0.0
        if waiting >= self.grace_s:
            return f"a read of {self.url} has been waiting {waiting:.0f} s (slow)"
        if now - since < self.grace_s and self.behind_s < self.grace_s:
            return None
        if self.failure:
            return f"cannot read {self.url}: {self.failure}"
        if self.empty_reads:
            return f"{self.url} answers but holds no sample of any node agent"
        if self.behind_s >= self.grace_s:
            return f"reads of {self.url} fall {self.behind_s:.0f} s behind (the last took {self.read_s:.1f} s: slow)"
        return f"no read of {self.url} has completed for {now - since:.0f} s"

    def unready(self) -> str | None:
        """Why `/readyz` says 503 (blind, or no read has brought data yet), None while the fleet sees."""
        why = self.blind()
        if why is not None:
            return f"blind: {why}"
        if self.last_data_s is None:
            return f"starting: no read of {self.url} has brought data yet"
        return None  # still catching up after the look-back, maybe: its data is read, it answers from it

    def condition(self, since_ts_s: float) -> Condition | None:
        why = self.blind()
        if why is None:
            return None
        return Condition(
            SOURCE_BLIND,
            "fleet",
            since_ts_s,
            "fleet blind: cannot read its time-series store",
            "critical",
            why,
            {"url": self.url, "step_s": self.step_s},
        )


@dataclass
class _Node:
    last_seen_ts_s: float | None = None
    missed: int = 0  # scraping steps since it was last seen with a scrape of its target (its `up` there)
    unscraped: int = 0  # and those with no scrape of its target (no `up` of its instance): `lost_at`
    lost_ts_s: float | None = None  # the scraping step that made it lost (`lost_at`)
    instance: str = ""

    def lost_at(self, gone_steps: int) -> bool:
        """Lost by presence: LOST_AFTER_STEPS steps missed, or `gone_steps` without its series in which the
        store scraped others, however many of them it held no scrape of this agent's target."""
        return self.missed >= LOST_AFTER_STEPS or self.missed + self.unscraped >= gone_steps


@dataclass
class NodePresence:
    step_s: float
    nodes: dict[str, _Node] = field(default_factory=dict)
    up: dict[str, float] = field(default_factory=dict)  # instance -> its newest `up`

    @property
    def gone_steps(self) -> int:
        """Scraping steps without a scrape of an agent's target before it counts as no longer scraped."""
        return max(LOST_AFTER_STEPS, math.ceil(GONE_AFTER_S / self.step_s - 1e-9))

    def seed(self, last_seen: Mapping[str, float]) -> None:
        """The nodes the workspace knows, each with its newest stored sample (a restart keeps counting)."""
        for node, ts_s in last_seen.items():
            self.nodes.setdefault(node, _Node(ts_s))

    def read(self, client: PrometheusClient, first_s: float, last_s: float, selector: str = "") -> int:
        """The grid points first_s..last_s: who reported at each; returns the scraping steps seen."""
        if last_s < first_s:
            return 0
        w, extra = _window(self.step_s), f",{selector}" if selector else ""
        mine = f'last_over_time({{__name__="{FLEET_MARKER}"{extra}}}[{w}])'
        info = f'last_over_time({{__name__="aiops_node_info"{extra}}}[{w}])'
        per_node = f"max by (node, instance) ({info} unless on (instance) {mine})"
        targets = f'max by (instance) (last_over_time({{__name__="up"{extra}}}[{w}]))'
        seen: dict[str, set[float]] = {}
        scraped: dict[str, set[float]] = {}  # instance -> the steps holding its `up` (the store scraped it)
        alive: set[float] = set()
        for answer in client.query_range(per_node, first_s, last_s, self.step_s):
            for series in answer:
                labels, stamps = _series(series)
                node = labels.get("node", "")
                alive.update(stamps)
                if node and stamps:
                    seen.setdefault(node, set()).update(stamps)
                    self.nodes.setdefault(node, _Node()).instance = labels.get("instance", "")
        for answer in client.query_range(targets, first_s, last_s, self.step_s):
            for series in answer:
                labels, stamps = _series(series)
                alive.update(stamps)
                scraped.setdefault(labels.get("instance", ""), set()).update(stamps)
                latest = _latest(series)
                if latest is not None:
                    self.up[labels.get("instance", "")] = latest
        for node, state in self.nodes.items():
            stamps = seen.get(node, set())
            newest = max(stamps) if stamps else None
            if newest is not None:
                state.last_seen_ts_s = max(state.last_seen_ts_s or newest, newest)
            after = state.last_seen_ts_s if state.last_seen_ts_s is not None else -math.inf
            if newest is not None:
                state.missed, state.unscraped, state.lost_ts_s = 0, 0, None
            target = scraped.get(state.instance, set()) if state.instance else set()
            for t in sorted(t for t in alive if t > after):
                was = state.lost_at(self.gone_steps)
                if t in target:
                    state.missed += 1
                else:
                    state.unscraped += 1
                if not was and state.lost_at(self.gone_steps):
                    state.lost_ts_s = t
        return len(alive)

    def lost(self, by_scrapes: Mapping[str, Verdict] | None = None) -> frozenset[str]:
        """The nodes whose agents are lost: two steps without their series in which the store scraped their
        target, or its scrapes gone for the grace (`_Node.lost_at`), or their target lost by its scrapes
        (`by_scrapes`: instance -> verdict, aiops/fleet/scrapes.py)."""
        scrapes = by_scrapes or {}
        return frozenset(
            n
            for n, s in self.nodes.items()
            if s.lost_at(self.gone_steps) or (s.instance and s.instance in scrapes)
        )

    def report(
        self, inventory: Mapping[str, Mapping[str, int]], by_scrapes: Mapping[str, Verdict] | None = None
    ) -> ConditionReport:
        """Lost agents raised, reporting ones cleared (a node missed once, or one failed scrape other than a
        refused one, is neither yet)."""
        scrapes = by_scrapes or {}
        out = ConditionReport()
        for node, state in sorted(self.nodes.items()):
            verdict = scrapes.get(state.instance) if state.instance else None
            if verdict is not None or state.lost_at(self.gone_steps):
                out.raised.append(self._lost(node, state, inventory.get(node, {}), verdict))
            elif state.missed == state.unscraped == 0 and state.last_seen_ts_s is not None:
                out.cleared.add((NODE_AGENT_LOST, node))
        return out

    def _lost(
        self, node: str, state: _Node, parts: Mapping[str, int], verdict: Verdict | None = None
    ) -> Condition:
        up = self.up.get(state.instance) if state.instance else None
        if verdict is not None:
            why = verdict.reason
        elif state.missed < LOST_AFTER_STEPS:  # lost by steps with no scrape of its target at all
            at = f" {state.instance}" if state.instance else ""
            why = f"its target{at} is no longer scraped (no up sample in {state.missed + state.unscraped} steps)"
        elif up == 0.0:
            why = f"Prometheus cannot scrape it (up == 0 at {state.instance})"
        elif up is not None:
            why = f"its series are gone while its target {state.instance} answers (up == 1)"
        else:
            why = "its target is no longer scraped (no up series)"
        silent = [
            plural(n, kind.upper() if kind in ("gpu", "nic") else kind) for kind, n in sorted(parts.items())
        ]
        seen = [t for t in (state.last_seen_ts_s, verdict.last_up_s if verdict else None) if t is not None]
        since = max(seen) if seen else 0.0
        reason = f"no sample from its agent since {when(since)}: {why}" + (
            f"; its {' and '.join(silent)} report nothing meanwhile" if silent else ""
        )
        detail: dict[str, Any] = {"last_seen_ts_s": since, "instance": state.instance, "up": up, **parts}
        stated = [t for t in (state.lost_ts_s, verdict.lost_at_s if verdict else None) if t is not None]
        if verdict is not None:
            detail["scrape"] = {
                "refused": verdict.refused,
                "failed": verdict.failed,
                "first_failed_ts_s": verdict.first_failed_s,
                "lost_at_ts_s": verdict.lost_at_s,
                "error": verdict.error,
            }
        title = f"node agent lost on {node}"
        return Condition(
            NODE_AGENT_LOST,
            node,
            since,
            title,
            "warning",
            reason,
            detail,
            stated_ts_s=min(stated) if stated else None,
        )


def _series(series: Mapping[str, Any]) -> tuple[dict[str, str], set[float]]:
    metric = series.get("metric") or {}
    labels = {str(k): str(v) for k, v in metric.items()} if isinstance(metric, Mapping) else {}
    stamps: set[float] = set()
    for point in series.get("values") or []:
        try:
            stamps.add(float(point[0]))
        except (TypeError, ValueError, IndexError):
            continue
    return labels, stamps


def _latest(series: Mapping[str, Any]) -> float | None:
    """The newest value of a series of the answer, None when it has none that is a number."""
    try:
        return float(series["values"][-1][1])
    except (KeyError, IndexError, TypeError, ValueError):
        return None
