"""The incident's stragglers as evidence (aiops/detect/stragglers.py found them in per-rank timing): a cause whose
component holds a late rank, or is the NIC a slow job's ranks sent through, and whose label fits the class the
rank timing gave cites it, with the rows that show it (the ranks' shares of the window per phase, the late ones
and their peers' median), and gains a little confidence. The finding corroborates a cause; it never names one.

Which labels each class fits: `compute` (the GPU runs slower) its heat and power causes; `host` (synchronous
copies) a degraded PCIe link; `input` (time outside CUDA and NCCL) the data loader; `network` (slow collectives
behind a NIC) the NIC's causes.
"""

from __future__ import annotations

from collections.abc import Sequence

from aiops.models import Incident, Symptom
from aiops.rca.candidate import Candidate
from aiops.rca.facts import Facts

FITS: dict[str, frozenset[str]] = {
    "compute": frozenset(
        {
            "thermal_throttle",
            "rack_cooling_failure",
            "power_cap_misconfig",
            "facility_power_cap",
            "power_brake",
        }
    ),
    "host": frozenset({"pcie_degraded"}),
    "input": frozenset({"input_pipeline_bottleneck"}),
    "network": frozenset(
        {"bulk_traffic_contention", "lane_misclassification", "nic_link_flap", "ecn_misconfig"}
    ),
}
KINDS = frozenset({"rank_straggler", "network_straggler"})
BOOST = 0.03
WINDOW_S = 10.0  # the rank timing a report judged, when its detail does not say (`since_ts_s`)

# Per rank of the job in the windows before the first report: probed seconds and each phase's share; the late
# ranks one by one, the others as one row of medians (`peers`).
RANK_SHARES_SQL = """
WITH per AS (
    SELECT ts_s, rank, pid, any_value(node) AS node, max(window_s) AS window_s,
           coalesce(sum(blocked_s) FILTER (WHERE kind IN ('collective', 'group')), 0) AS wait_s,
           coalesce(sum(blocked_s) FILTER (WHERE kind = 'sync'), 0) AS compute_s,
           coalesce(sum(blocked_s) FILTER (WHERE kind = 'copy'), 0) AS copy_s
    FROM rank_timing_samples WHERE job = ? AND rank IS NOT NULL AND ts_s > ? AND ts_s <= ? AND window_s > 0
    GROUP BY ts_s, rank, pid),
ranks AS (
    SELECT rank, any_value(node) AS node, sum(window_s) AS window_s, sum(wait_s) / sum(window_s) AS wait,
           sum(compute_s) / sum(window_s) AS compute, sum(copy_s) / sum(window_s) AS copy,
           greatest(1 - (sum(wait_s) + sum(compute_s) + sum(copy_s)) / sum(window_s), 0) AS host
    FROM per GROUP BY rank)
SELECT CAST(rank AS VARCHAR) AS ranks, node, round(wait, 4) AS wait_share, round(compute, 4) AS compute_share,
       round(copy, 4) AS copy_share, round(host, 4) AS outside_share
FROM ranks WHERE list_contains(?, rank)
UNION ALL
SELECT 'peers (' || count(*) || ' ranks, median)', NULL, round(median(wait), 4), round(median(compute), 4),
       round(median(copy), 4), round(median(host), 4)
FROM ranks WHERE NOT list_contains(?, rank)
ORDER BY wait_share
"""


def _covers(candidate: str, component: str) -> bool:
    return (
        component == candidate
        or component.startswith(candidate + "/")
        or candidate.startswith(component + "/")
    )


def _reaches(candidate: Candidate, found: Symptom, rack_of: dict[str, str]) -> bool:
    """The candidate's component holds the straggler's (or is held by it: a GPU of a late node), or is the rack
    of its node."""
    if _covers(candidate.component, found.component):
        return True
    node = str(found.detail.get("node") or "")
    return bool(node) and rack_of.get(node) == candidate.component


def cite_stragglers(facts: Facts, incident: Incident, candidates: Sequence[Candidate]) -> None:
    """Each of the incident's straggler findings (first report of each component) cited by the candidates it
    fits, with its rows (module doc)."""
    firsts: dict[str, Symptom] = {}
    for s in sorted(incident.symptoms, key=lambda s: s.ts_s):
        if s.kind in KINDS:
            firsts.setdefault(s.component, s)
    if not firsts:
        return
    rack_of = facts.racks_of_nodes()
    for component, found in firsts.items():
        d = found.detail
        job, cause = str(d.get("job") or ""), str(d.get("cause") or "")
        ranks = [int(r) for r in d.get("ranks") or [] if isinstance(r, int)]
        fitting = [c for c in candidates if c.label in FITS.get(cause, ()) and _reaches(c, found, rack_of)]
        if not job or not ranks or not fitting:
            continue
        key = f"stragglers:{job}:{component}:{found.ts_s:.3f}"
        claim = _claim(found)
        since = d.get("since_ts_s")
        since_ts_s = float(since) if isinstance(since, int | float) else found.ts_s - WINDOW_S
        facts.run(key, claim, RANK_SHARES_SQL, [job, since_ts_s, found.ts_s, ranks, ranks])
        for c in fitting:
            c.score += BOOST
            c.evidence.append(facts.cite(key, claim))


def _claim(found: Symptom) -> str:
    d = found.detail
    ranks = d.get("ranks") or []
    who = f"rank {d.get('rank')}" if len(ranks) <= 1 else f"{len(ranks)} ranks"
    where = d.get("gpu") or d.get("nic") or d.get("node")
    if d.get("cause") == "network":
        return (
            f"job {d.get('job')}: its ranks waited {_pct(d.get('wait_share'))} of the time in collectives (usually "
            f"{_pct(d.get('usual_wait_share'))}); {where} stands out among its NICs ({who} behind it)"
        )
    shares = d.get("shares") or {}
    peers = d.get("peer_shares") or d.get("usual_shares") or {}
    phase = {"compute": "compute", "host": "copy", "input": "host"}.get(str(d.get("cause")), "compute")
    whose = "its peers" if d.get("rule") == "peers" else "they usually"
    return (
        f"job {d.get('job')}: {who} on {where} late by rank timing ({d.get('cause')}): waited "
        f"{_pct(shares.get('wait'))} of the time in collectives while {whose} waited {_pct(peers.get('wait'))}; "
        f"{_pct(shares.get(phase))} in {_PHASE_WORDS[phase]} against {_pct(peers.get(phase))}"
    )


_PHASE_WORDS = {
    "compute": "CUDA synchronisation (its GPU's work)",
    "copy": "synchronous host-to-device copies",
    "host": "host code outside CUDA and NCCL",
}


def _pct(value: object) -> str:
    return f"{float(value) * 100:.0f} %" if isinstance(value, int | float) else "?"
