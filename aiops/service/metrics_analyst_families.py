"""The analyst's families (aiops/service/metrics_analyst.py holds their state): one function per group, each
yielding prometheus_client families with HELP, base units and `_total` counters. docs/METRICS.md lists them with
the analyst input each feeds; tests/test_service_metrics_export.py checks names, labels and values.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from aiops import nvml_bits
from aiops.columns_jobs import LAST_STEP, LAST_STEP_TS, SLOWEST, STEPS

if TYPE_CHECKING:
    from aiops.service.metrics_analyst import AnalystExports

PREFIX = "aiops_"
# Step times of training jobs run from ~0.1 s (small models) to minutes (a stalled collective); buckets wide
# enough that histogram_quantile(0.5, ...) places a 2x slowdown in another bucket at every step time.
STEP_BUCKETS_S: tuple[float, ...] = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0)
RULE_MATCH_CHARS = (
    200  # a rule's match value (a prefix, a cgroup path) is configuration, bounded by the rules
)


def _gauge(name: str, help_text: str, labels: list[str]) -> GaugeMetricFamily:
    return GaugeMetricFamily(PREFIX + name, help_text, labels=labels)


def _counter(name: str, help_text: str, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(PREFIX + name.removesuffix("_total"), help_text, labels=labels)


def inventory(s: AnalystExports) -> Iterable[Metric]:
    nodes = _gauge(
        "node_info", "1 per node this agent reports, with the rack it is in (topology)", ["node", "rack"]
    )
    for node, rack in sorted(s.rack_of.items()):
        nodes.add_metric([node, rack], 1.0)
    yield nodes
    gpus = _gauge(
        "gpu_info",
        "1 per GPU: its node, rack, index on the node and NVML UUID (join on node and gpu)",
        ["node", "rack", "gpu", "index", "uuid"],
    )
    for gpu, info in sorted(s.gpu_info.items()):
        node = info.get("node", "")
        rack = info.get("rack") or s.rack_of.get(node, "")
        gpus.add_metric([node, rack, gpu, info.get("index", ""), info.get("uuid", "")], 1.0)
    yield gpus
    nics = _gauge(
        "nic_info",
        "1 per NIC: its node, rack, index on the node and kernel device",
        ["node", "rack", "nic", "index", "device"],
    )
    for nic, info in sorted(s.nic_info.items()):
        nics.add_metric([info["node"], info["rack"], nic, info["index"], info["device"]], 1.0)
    yield nics
    ranks = _gauge(
        "job_rank_info",
        "1 per rank of a job the scheduler placed on this agent's GPUs (job_ranks)",
        ["job", "rank", "node", "rack", "gpu", "uuid", "nic"],
    )
    for (job, rank), where in sorted(s.ranks.items()):
        info = s.gpu_info.get(where["gpu"], {})
        rack = s.rack_of.get(where["node"], info.get("rack", ""))
        ranks.add_metric(
            [job, str(rank), where["node"], rack, where["gpu"], info.get("uuid", ""), where["nic"]], 1.0
        )
    yield ranks


def gpus(s: AnalystExports) -> Iterable[Metric]:
    """The per-sample counts (the GPUs' values: aiops/service/metrics.py, from aiops/columns.py)."""
    labels = ["gpu", "node"]
    samples = _counter(
        "gpu_samples_total", "NVML samples taken (the denominator of the per-sample counts)", labels
    )
    throttled = _counter(
        "gpu_throttled_samples_total",
        "samples with a throttle reason set (SwPowerCap, HwSlowdown, thermal, power brake: nvml_bits.THROTTLE)",
        labels,
    )
    errors = _counter("gpu_nvml_error_samples_total", "samples NVML answered with an error", labels)
    for key, n in sorted(s.gpu_samples.items()):
        samples.add_metric(list(key), float(n))
        throttled.add_metric(list(key), float(s.gpu_throttled.get(key, 0)))
        errors.add_metric(list(key), float(s.gpu_errors.get(key, 0)))
    yield samples
    yield throttled
    yield errors
    reasons = _counter(
        "gpu_clocks_event_samples_total",
        "samples with the clocks-event reason set (nvmlClocksEventReason*): countable at any scrape interval",
        [*labels, "reason"],
    )
    for gpu, node in sorted(s.gpu_samples):
        for reason in nvml_bits.NAMES.values():
            reasons.add_metric([gpu, node, reason], float(s.gpu_reasons.get((gpu, node, reason), 0)))
    yield reasons


def jobs(s: AnalystExports) -> Iterable[Metric]:
    """job_steps' families, declared with the table (aiops/columns_jobs.py), rendered from the step totals."""
    steps = HistogramMetricFamily(STEPS.name, STEPS.help, labels=list(STEPS.labels))
    last = GaugeMetricFamily(LAST_STEP.name, LAST_STEP.help, labels=list(LAST_STEP.labels))
    last_ts = GaugeMetricFamily(LAST_STEP_TS.name, LAST_STEP_TS.help, labels=list(LAST_STEP_TS.labels))
    for job, totals in sorted(s.steps.items()):
        buckets = [(str(bound), float(n)) for bound, n in zip(STEP_BUCKETS_S, totals.buckets, strict=True)]
        buckets.append(("+Inf", float(totals.steps)))
        steps.add_metric([s.node, job], buckets, totals.sum_s)
        last.add_metric([s.node, job], totals.last_s)
        last_ts.add_metric([s.node, job], totals.last_ts_s)
    yield steps
    yield last
    yield last_ts
    slowest = CounterMetricFamily(
        SLOWEST.name.removesuffix("_total"), SLOWEST.help, labels=list(SLOWEST.labels)
    )
    for (job, rank, gpu), n in sorted(s.slowest.items()):
        slowest.add_metric([s.node, job, str(rank), gpu], float(n))
    yield slowest
    # the collectives: declared with collective_samples (aiops/columns_jobs.py), exported in metrics.py


def network(s: AnalystExports) -> Iterable[Metric]:
    # the bytes per traffic class: declared with flow_class_samples (aiops/columns_flows.py), exported in metrics.py
    rules = _gauge(
        "lane_rule_info",
        "1 per lane rule in force (the traffic controller's newest snapshot)",
        ["node", "rule_id", "match_kind", "match_value", "lane", "scope"],
    )
    for r in s.rules:
        match = "" if r.get("match_value") is None else str(r["match_value"])[:RULE_MATCH_CHARS]
        rules.add_metric(
            [s.node, str(r["rule_id"]), str(r["match_kind"]), match, str(r["lane"]), str(r["scope"])], 1.0
        )
    yield rules
    taken = _gauge("lane_rules_timestamp_seconds", "when the rules in force were read (unix time)", ["node"])
    if s.rules_ts_s is not None:
        taken.add_metric([s.node], s.rules_ts_s)
    yield taken
    # a lane's queueing delay: declared with nic_samples (aiops/columns_nic.py), exported in metrics.py
    link = _gauge("nic_link_up", "1 while the NIC's link is up", ["node", "nic"])
    for nic, up in sorted(s.links.items()):
        link.add_metric(list(nic), 1.0 if up else 0.0)
    yield link
    # the InfiniBand ports' bytes: declared with ib_port_samples (aiops/columns_ib.py), exported in metrics.py


def node(s: AnalystExports) -> Iterable[Metric]:
    # the loader's wait per step: declared with host_samples (aiops/columns_host.py), exported in metrics.py
    kernel = _counter(
        "kernel_device_events_total",
        "kernel log lines recognised, by kind, the component and device they name and their code (Xid, AER "
        "severity, link up/down; '' for none)",
        ["node", "kind", "component", "device", "code"],
    )
    for event, n in sorted(s.kernel.items()):
        kernel.add_metric(list(event), float(n))
    yield kernel
    errors = _counter(
        "collector_error_rows_total",
        "rows collectors wrote to collector_errors, by error kind (unavailable, an exception class)",
        ["node", "collector", "error"],
    )
    for (collector, error), n in sorted(s.collector_errors.items()):
        errors.add_metric([s.node, collector, error], float(n))
    yield errors
    unavailable = _gauge(
        "collector_unavailable",
        "1 for a collector that found nothing to read",
        ["node", "collector", "component"],
    )
    for collector, component in sorted(s.unavailable):
        unavailable.add_metric([s.node, collector, component], 1.0)
    yield unavailable
    keys = ["node", "incident_id", "severity", "root_cause", "component"]
    opened = _gauge("incident_opened_timestamp_seconds", "when each open incident opened (store clock)", keys)
    confidence = _gauge(
        "incident_confidence_ratio", "confidence of each open incident's top hypothesis", keys
    )
    for i in s.incidents:
        labels = [
            s.node,
            str(i["incident_id"]),
            str(i["severity"]),
            i.get("root_cause") or "",
            i.get("component") or "",
        ]
        if i.get("opened_ts_s") is not None:
            opened.add_metric(labels, float(i["opened_ts_s"]))
        if i.get("confidence") is not None:
            confidence.add_metric(labels, float(i["confidence"]))
    yield opened
    yield confidence


def pages(s: AnalystExports) -> Iterable[Metric]:
    """`aiops_incident_pages`: 1 for an incident that pages, 0 for one that must not page on its own (held
    without a diagnosis, covered by another incident, under a maintenance window or silence); on the fleet also
    0 for each node agent's incident it covers. The chart's `AiopsIncidentOpen` fires `unless on (incident_id)
    aiops_incident_pages == 0` (aiops/service/paging.py)."""
    family = _gauge(
        "incident_pages",
        "1 if the incident pages, 0 if it must not page on its own (reason: held, covered, minor, maintenance, silence)",
        ["node", "incident_id", "reason", "covered_by", "window_id"],
    )
    for p in s.pages:
        family.add_metric(
            [
                str(p["node"]),
                str(p["incident_id"]),
                str(p["reason"]),
                str(p.get("covered_by") or ""),
                str(p.get("window_id") or ""),
            ],
            1.0 if p["pages"] else 0.0,
        )
    yield family


INTENDED_KEYS = ["node", "component", "property", "proposal_id", "kind", "action_hash"]


def intended(s: AnalystExports) -> Iterable[Metric]:
    """What this node's executed actions set and still expect (guardrails/intended.py): the fleet reads it as
    intended state (not a symptom) and closes its own open copy of the same action (`action_hash`)."""
    value = _gauge(
        "intended_state",
        "the value an executed action set on a component's property (absent: put back to the default)",
        INTENDED_KEYS,
    )
    set_at = _gauge(
        "intended_state_set_timestamp_seconds", "when the action that set it ran (store clock)", INTENDED_KEYS
    )
    expiry = _gauge(
        "intended_state_expiry_timestamp_seconds",
        "when it stops being expected unless replaced (store clock)",
        INTENDED_KEYS,
    )
    for i in s.intended:
        labels = [s.node, *(str(i[k]) for k in INTENDED_KEYS[1:])]
        if i.get("value") is not None:
            value.add_metric(labels, float(i["value"]))
        set_at.add_metric(labels, float(i["set_ts_s"]))
        expiry.add_metric(labels, float(i["expires_ts_s"]))
    yield value
    yield set_at
    yield expiry
