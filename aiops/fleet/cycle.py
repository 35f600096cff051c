"""One read of the cluster's state for an interval: the node agents' exports (aiops/fleet/ingest.py), the
facility exporters' rack series (aiops/sources/facility.py) and, when configured, the DCIM's caps document
(aiops/control/dcim_source.py), all into one workspace. `aiops fleet` runs it every step; `aiops eval --via
prometheus` runs it once over a whole recorded run."""

from __future__ import annotations

from dataclasses import dataclass, field

from aiops.config import FacilityConfig
from aiops.control.dcim_source import read_dcim, record_changes
from aiops.fleet.ingest import IngestReport, fetch_interval
from aiops.sources.facility import FacilityReport, fetch_facility
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store


@dataclass
class CycleReport:
    nodes: IngestReport
    facility: FacilityReport | None = None
    dcim_changes: list[str] = field(default_factory=list)


def read_cycle(
    store: Store,
    client: PrometheusClient,
    *,
    start_s: float,
    end_s: float,
    step_s: float,
    selector: str = "",
    facility: FacilityConfig | None = None,
    phase_s: float = 0.0,
    rank_reads: int = 1,
    rank_start_s: float | None = None,
    series_hint: int = 0,
) -> CycleReport:
    """Everything the fleet reads for (start_s, end_s]: the DCIM document is read once, at the interval's end."""
    nodes = fetch_interval(
        store,
        client,
        start_s=start_s,
        end_s=end_s,
        step_s=step_s,
        selector=selector,
        phase_s=phase_s,
        rank_reads=rank_reads,
        rank_start_s=rank_start_s,
        series_hint=series_hint,
    )
    report = CycleReport(nodes)
    if nodes.end_s < nodes.start_s:
        return report
    config = facility or FacilityConfig()
    report.facility = fetch_facility(
        store,
        client,
        start_s=nodes.start_s,
        end_s=nodes.end_s,
        step_s=step_s,
        config=config,
        phase_s=phase_s,
        extra_selector=selector,  # a shard's racks only (docs/FLEET.md "Fleet size: sharding")
    )
    if config.dcim:
        racks = [
            str(r["component"]) for r in store.query("SELECT component FROM topology WHERE kind = 'rack'")
        ]
        signals = read_dcim(config.dcim, nodes.end_s, racks or None, timeout_s=config.dcim_timeout_s)
        report.dcim_changes = record_changes(
            store, signals, nodes.end_s, signals[0].source if signals else ""
        )
    return report
