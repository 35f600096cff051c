"""The analyst's scorers and the labels each may give: the rca layer's registry of labels
(tests/test_label_units.py checks it against the labels' specs in aiops/labels.py).

A scorer reads an incident's facts and returns candidates; one scorer may give several labels (one reading of
the GPU counters tells an ECC error from an NVLink or PCIe fault). The order is the order they run in: of two
candidates with the same label, component and score, the earlier scorer's is kept (aiops.rca.onsets). To add
a label the analyst scores from telemetry, give its candidates from one of these scorers (or a new one in a
module of its family) and name the label here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from aiops.rca.candidate import Candidate
from aiops.rca.fabric_scorers import facility, nics_and_lanes
from aiops.rca.facts import Facts
from aiops.rca.gpu_scorers import gpu_health, host_stalls
from aiops.rca.rdma_scorers import roce_ecn
from aiops.rca.throttle_scorers import throttling

Scorer = Callable[[Facts], list[Candidate]]


@dataclass(frozen=True)
class ScorerEntry:
    scorer: Scorer
    labels: tuple[str, ...]  # every label its candidates may carry


SCORER_ENTRIES: tuple[ScorerEntry, ...] = (
    ScorerEntry(
        gpu_health,
        ("gpu_fell_off_bus", "gpu_ecc_error", "nvlink_degraded", "pcie_degraded", "application_error"),
    ),
    ScorerEntry(throttling, ("power_brake", "facility_power_cap", "power_cap_misconfig", "thermal_throttle")),
    ScorerEntry(host_stalls, ("input_pipeline_bottleneck",)),
    ScorerEntry(facility, ("rack_cooling_failure", "ambient_drift")),
    ScorerEntry(
        nics_and_lanes,
        ("nic_link_flap", "lane_misclassification", "bulk_traffic_contention", "ecn_misconfig"),
    ),
    ScorerEntry(roce_ecn, ("ecn_misconfig",)),
)
SCORERS: tuple[Scorer, ...] = tuple(entry.scorer for entry in SCORER_ENTRIES)
# label -> the scorers that may give it
SCORED_LABELS: dict[str, tuple[Scorer, ...]] = {
    label: tuple(e.scorer for e in SCORER_ENTRIES if label in e.labels)
    for label in dict.fromkeys(label for e in SCORER_ENTRIES for label in e.labels)
}
