"""flow_class_samples' columns, each declared once (aiops/columns.py says what derives from a declaration; the
recipe for a new one: docs/ARCHITECTURE.md, "Add a telemetry column"). One row per NIC, traffic class, lane and
classifier rule in an interval: the bytes the eBPF classifier counted for that class in that lane (`counted`: the
node exports the running total)."""

from __future__ import annotations

from aiops.column_model import ANY, Column, Family, Table

FLOW_CLASS_SAMPLES = Table(
    "flow_class_samples",
    (
        Column("ts_s", "float64", key=True),
        Column("nic", "string", key=True),
        Column("node", "string", key=True),
        Column("traffic_class", "string", key=True),
        Column("rule_id", "string", key=True),
        Column("lane", "string", key=True),
        Column("interval_s", "float64"),
        Column(
            "tx_bytes",
            "int64",
            Family(
                "aiops_flow_class_transmit_bytes_total",
                "bytes sent per traffic class, the lane it landed in and the classifier rule that matched ('' for "
                "none)",
                "bytes",
                "flow_class_samples.tx_bytes: `lane_class_rules` (lane_mismatch), `Facts.flows`",
                ("node", "nic", "traffic_class", "lane", "rule_id"),
                per_gpu="—",
                per_node="6",
            ),
            counted=True,
            reacts_to=ANY,
            observed_by="the eBPF classifier's per-class byte counters",
        ),
    ),
    entities_react_to=(
        frozenset({"bulk_traffic_contention", "lane_misclassification"}),
        "the eBPF classifier reports a class on a lane once traffic of it flows there",
    ),
)
