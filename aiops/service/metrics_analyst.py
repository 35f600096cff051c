"""The node tables a cluster analyst reads (aiops/detect, aiops/rca) that the families in metrics.py do not
carry, as Prometheus families: what a fleet service reading Prometheus needs from each node agent (issue 24,
item 1; docs/METRICS.md lists every family and the analyst input it feeds).

Fed under MetricsCache's lock with the rows the loop collects (`observe`), the inventory the store holds at start
(`inventory`: topology, job_ranks), the open incidents (`set_incidents`) and what its executed actions set
(`set_intended`); read by scrapes (`families`). Labels
are bounded by the node's hardware, jobs and rules: never a log line, a command line or a collector's detail
text. Values sampled between scrapes stay countable at any scrape interval: per-sample counters
(`aiops_gpu_samples_total`, `..._throttled_samples_total`) and a step-time histogram, not only the newest value.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import Metric

from aiops import nvml_bits
from aiops.service import metrics_analyst_families as render
from aiops.service.metrics_analyst_families import STEP_BUCKETS_S
from aiops.service.metrics_ranks import RankExports

_LABEL_TEXT = re.compile(r"[^A-Za-z0-9_.:-]")


def _bounded(value: object, limit: int = 64) -> str:
    """A label value from a code-defined vocabulary (an exception class, an error kind), trimmed to that form."""
    return _LABEL_TEXT.sub("_", "" if value is None else str(value))[:limit]


def _text(value: object) -> str:
    return "" if value is None else str(value)


@dataclass
class StepTotals:
    """One job's completed steps: count and summed time (the histogram's _count and _sum), the newest step, and
    the cumulative count at or under each of STEP_BUCKETS_S."""

    steps: int = 0
    sum_s: float = 0.0
    last_s: float = 0.0
    last_ts_s: float = 0.0
    buckets: list[int] = field(default_factory=lambda: [0] * len(STEP_BUCKETS_S))


class AnalystExports:
    """Per-node state for the analyst's families. Not locked itself: MetricsCache calls it under its lock."""

    def __init__(self, node: str) -> None:
        self.node = node  # the node the service runs as: the label of rows that carry none (jobs, collectors)
        self.rack_of: dict[str, str] = {}  # node -> rack
        self.gpu_info: dict[str, dict[str, str]] = {}  # gpu -> node, rack, index, uuid
        self.nic_info: dict[str, dict[str, str]] = {}  # nic -> node, rack, index, device
        self.ranks: dict[tuple[str, int], dict[str, str]] = {}  # (job, rank) -> gpu, node, nic
        self.gpu_samples: dict[tuple[str, str], int] = defaultdict(int)  # (gpu, node)
        self.gpu_throttled: dict[tuple[str, str], int] = defaultdict(int)
        self.gpu_reasons: dict[tuple[str, str, str], int] = defaultdict(int)  # (gpu, node, reason)
        self.gpu_errors: dict[tuple[str, str], int] = defaultdict(int)
        self.steps: dict[str, StepTotals] = {}  # job ->
        self.slowest: dict[tuple[str, int, str], int] = defaultdict(int)  # (job, rank, gpu) -> steps
        self.rules: list[dict[str, Any]] = []
        self.rules_ts_s: float | None = None
        self.links: dict[tuple[str, str], bool] = {}  # (node, nic)
        self.kernel: dict[tuple[str, str, str, str, str], int] = defaultdict(int)
        self.collector_errors: dict[tuple[str, str], int] = defaultdict(int)  # (collector, error)
        self.unavailable: set[tuple[str, str]] = set()  # (collector, component) that found nothing to read
        self.incidents: list[dict[str, Any]] = []
        self.pages: list[dict[str, Any]] = []  # paging decisions (aiops/service/pager.py PageState fields)
        # what this node's executed actions set (guardrails/intended.py)
        self.intended: list[dict[str, Any]] = []
        self.rank_timing = RankExports()  # per-rank timing (metrics_ranks.py)

    # -- feeding ------------------------------------------------------------------------------------------------
    def inventory(self, topology: Sequence[Mapping[str, Any]], ranks: Sequence[Mapping[str, Any]]) -> None:
        """The store's `topology` and `job_ranks` rows (at start: discovery on a host, the scenario in the twin)."""
        for row in topology:
            kind, node, rack = row.get("kind"), _text(row.get("node")), _text(row.get("rack"))
            index = _text(row.get("idx"))
            if kind == "node" and node:
                self.rack_of[node] = rack
            elif kind == "gpu":
                info = self.gpu_info.setdefault(str(row["component"]), {})
                info.update(node=node, rack=rack, index=index)
                if row.get("uuid"):
                    info["uuid"] = str(row["uuid"])
            elif kind == "nic":
                self.nic_info[str(row["component"])] = {
                    "node": node,
                    "rack": rack,
                    "index": index,
                    "device": _text(row.get("device")),
                }
        for row in ranks:
            self.ranks[(str(row["job"]), int(row["rank"]))] = {
                "gpu": str(row["gpu"]),
                "node": str(row["node"]),
                "nic": _text(row.get("nic")),
            }

    def observe(self, table: str, values: Mapping[str, Any]) -> None:
        if table == "gpu_samples":
            self._gpu(values)
        elif table == "job_steps":
            self._step(values)
        elif table == "lane_rules":
            if values["ts_s"] != self.rules_ts_s:  # a new snapshot replaces the rules in force
                self.rules_ts_s, self.rules = float(values["ts_s"]), []
            self.rules.append(dict(values))
        elif table == "nic_samples":
            node, nic = str(values["node"]), str(values["nic"])
            if values.get("link_up") is not None:
                self.links[(node, nic)] = bool(values["link_up"])
        elif table == "kernel_events":
            self._kernel(values)
        elif table == "collector_errors":
            self._collector_error(values)
        elif table == "rank_timing_samples":
            self.rank_timing.observe(values)

    def _gpu(self, values: Mapping[str, Any]) -> None:
        gpu, node = str(values["gpu"]), str(values["node"])
        info = self.gpu_info.setdefault(gpu, {"node": node, "index": gpu.rsplit("gpu", 1)[-1]})
        if values.get("uuid"):
            info["uuid"] = str(values["uuid"])
        self.gpu_samples[(gpu, node)] += 1
        if values.get("nvml_error"):
            self.gpu_errors[(gpu, node)] += 1
        mask = int(values.get("clocks_event_reasons") or 0)
        if mask & nvml_bits.THROTTLE:
            self.gpu_throttled[(gpu, node)] += 1
        for bit, reason in nvml_bits.NAMES.items():
            if mask & bit:
                self.gpu_reasons[(gpu, node, reason)] += 1

    def _step(self, values: Mapping[str, Any]) -> None:
        job, step_s = str(values["job"]), float(values["step_time_s"])
        totals = self.steps.setdefault(job, StepTotals())
        totals.steps += 1
        totals.sum_s += step_s
        totals.last_s, totals.last_ts_s = step_s, float(values["ts_s"])
        for i, bound in enumerate(STEP_BUCKETS_S):
            if step_s <= bound:
                totals.buckets[i] += 1
        if values.get("slowest_rank") is not None:
            self.slowest[(job, int(values["slowest_rank"]), _text(values.get("slowest_gpu")))] += 1

    def _kernel(self, values: Mapping[str, Any]) -> None:
        key = (
            str(values["node"]),
            _bounded(values.get("kind")),
            _text(values.get("component") or values["node"]),
            _bounded(values.get("device")),
            _text(values.get("code")),
        )
        self.kernel[key] += 1

    def _collector_error(self, values: Mapping[str, Any]) -> None:
        collector, error = str(values["collector"]), _bounded(values.get("error"))
        self.collector_errors[(collector, error)] += 1
        if error == "unavailable":
            self.unavailable.add((collector, _text(values.get("component"))))

    def set_incidents(self, incidents: Sequence[Mapping[str, Any]]) -> None:
        self.incidents = [dict(i) for i in incidents]

    def set_pages(self, pages: Sequence[Mapping[str, Any]]) -> None:
        self.pages = [dict(p) for p in pages]

    def set_intended(self, intended: Sequence[Mapping[str, Any]]) -> None:
        """The intended state in force: component, property, value (None: the default), proposal_id, kind,
        action_hash, set_ts_s, expires_ts_s."""
        self.intended = [dict(i) for i in intended]

    # -- scraping -----------------------------------------------------------------------------------------------
    def families(self) -> Iterable[Metric]:
        yield from render.inventory(self)
        yield from render.gpus(self)
        yield from render.jobs(self)
        yield from self.rank_timing.families()
        yield from render.network(self)
        yield from render.node(self)
        yield from render.pages(self)
        yield from render.intended(self)
