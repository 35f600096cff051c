"""The node agents' families the fleet analyst reads (docs/METRICS.md), and the label columns it keeps.

Every name here is a sample name as Prometheus stores it (counters with `_total`, a histogram's `_count` and
`_sum`). Counters are read as their increase since the previous scrape; gauges as the newest value within one
step, so a series that stopped being exported (a GPU gone, a rule removed) is absent from the next step on, as it
is on a live Prometheus after its staleness marker.
"""

from __future__ import annotations

import math

from aiops.columns import (
    COLLECTIVE_SAMPLES,
    FLOW_CLASS_SAMPLES,
    GPU_SAMPLES,
    HOST_SAMPLES,
    IB_PORT_SAMPLES,
    NETDEV_SAMPLES,
    NIC_SAMPLES,
    RANK_TIMING_SAMPLES,
    families,
    integer_families,
)
from aiops.columns_jobs import LAST_STEP_TS, SLOWEST, STEPS

# label columns of the staging table: every label the families below carry (others are dropped)
LABELS: tuple[str, ...] = (
    "node",
    "rack",
    "gpu",
    "index",
    "uuid",
    "reason",
    "error",
    "type",
    "xid",
    "nic",
    "lane",
    "device",
    "dev",
    "port",
    "traffic_class",
    "rule_id",
    "match_kind",
    "match_value",
    "scope",
    "job",
    "rank",
    "op",
    "incident_id",
    "severity",
    "root_cause",
    "component",
    "property",
    "proposal_id",
    "kind",
    "action_hash",
    "instance",  # the scrape target's: which agent exported the series (aiops/fleet/names.py)
)

INFO = (
    "aiops_node_info",
    "aiops_gpu_info",
    "aiops_nic_info",
    "aiops_job_rank_info",
    "aiops_lane_rule_info",
    "aiops_lane_rules_timestamp_seconds",
)
# the GPUs' families: declared once with their gpu_samples columns (aiops/columns.py), and the XID events
GPU_FAMILIES = families(GPU_SAMPLES)
GPU_GAUGES = tuple(f.name for f in GPU_FAMILIES if f.kind == "gauge")
GPU_COUNTERS = (*(f.name for f in GPU_FAMILIES if f.kind == "counter"), "aiops_gpu_xid_events_total")
# the NICs' and the traffic classes' families: declared with their tables' columns (aiops/columns.py)
NIC = tuple(f.name for table in (NIC_SAMPLES, FLOW_CLASS_SAMPLES) for f in families(table))
# job_steps' families (declared with the table: aiops/columns_jobs.py) the fleet reads: the step histogram's count
# and sum, the newest step's time, the slowest ranks
JOB = (
    f"{STEPS.name}_count",
    f"{STEPS.name}_sum",
    LAST_STEP_TS.name,
    SLOWEST.name,
    # declared with collective_samples' columns (aiops/columns.py)
    *(f.name for f in families(COLLECTIVE_SAMPLES)),
)
# per-rank timing (aiops/service/metrics_ranks.py): joined across nodes into the fleet's rank_timing_samples
RANKS = tuple(
    f.name for f in families(RANK_TIMING_SAMPLES)
)  # declared with rank_timing_samples (aiops/columns.py)
HOST = tuple(f.name for f in families(HOST_SAMPLES))  # declared with host_samples' columns (aiops/columns.py)
NETDEV = tuple(
    f.name for f in families(NETDEV_SAMPLES)
)  # declared with netdev_samples' columns (aiops/columns.py)
INCIDENTS = ("aiops_incident_opened_timestamp_seconds", "aiops_incident_confidence_ratio")
# what each node's executed actions set (guardrails/intended.py): intended state on the fleet, and its copies of
# those actions superseded (guardrails/supersede.py)
INTENDED = (
    "aiops_intended_state",
    "aiops_intended_state_set_timestamp_seconds",
    "aiops_intended_state_expiry_timestamp_seconds",
)
IB = tuple(
    f.name for f in families(IB_PORT_SAMPLES)
)  # declared with ib_port_samples' columns (aiops/columns.py)

# read only where positive (aiops/fleet/ingest.py `_queries`): 0/1 gauges the pivots read only when 1, and the
# throttle reasons' sample counters but GpuIdle's (the idle rule counts those at 0 too)
POSITIVE_GAUGES = ("aiops_gpu_clocks_event_reason", "aiops_gpu_nvml_error")
REASON_SAMPLES = "aiops_gpu_clocks_event_samples_total"
IDLE_REASON = "GpuIdle"

ALL: tuple[str, ...] = (
    *INFO,
    *GPU_GAUGES,
    *GPU_COUNTERS,
    *NIC,
    *JOB,
    *RANKS,
    *HOST,
    *NETDEV,
    *IB,
    *INCIDENTS,
    *INTENDED,
)


def is_counter(name: str) -> bool:
    """Read as the increase since the previous scrape (a histogram's `_count` and `_sum` too)."""
    return name.endswith(("_total", "_count", "_sum"))


# The range a sample's value must lie in to be stored (aiops/fleet/ingest.py drops one outside it, and counts it,
# instead of letting one hostile value fail the whole cycle's SQL): the pivots cast counters' increases and some
# gauges to 64-bit integers (BIGINT), and these families to 32-bit ones (INTEGER); a counter is never negative.
INT32_MAX = float(2**31 - 1)
INT64_LIMIT = float(2**63)  # exclusive: the largest double below it still fits a BIGINT
INTEGER_VALUED = (
    "aiops_gpu_samples_total",
    "aiops_gpu_throttled_samples_total",
    "aiops_gpu_nvml_error_samples_total",
    "aiops_gpu_clocks_event_samples_total",
    *integer_families(GPU_SAMPLES),
)


def value_range(name: str) -> tuple[float, float]:
    """(lowest, highest) value a sample of family `name` may hold (both inclusive, finite)."""
    highest = INT32_MAX if name in INTEGER_VALUED else math.nextafter(INT64_LIMIT, 0.0)
    lowest = 0.0 if is_counter(name) or name in INTEGER_VALUED else -highest
    return lowest, highest
