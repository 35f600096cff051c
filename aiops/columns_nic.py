"""nic_samples' columns, each declared once (aiops/columns.py says what derives from a declaration; the recipe for
a new one: docs/ARCHITECTURE.md, "Add a telemetry column"). One row per NIC, lane and interval from the eBPF
lane counters (`fifo` where no lane enforcement runs on the NIC), with the NIC's carrier on its first lane row.
The counters hold what the interval added (`counted`): the node exports their running totals."""

from __future__ import annotations

from aiops.column_model import ANY, Column, Family, Table

FLAP = frozenset({"nic_link_flap"})
LANE_TRAFFIC = frozenset({"bulk_traffic_contention", "lane_misclassification"})
ECN = frozenset({"ecn_misconfig"})
LANE_LABELS = ("nic", "lane")


def _counter(name: str, help_text: str, unit: str, feeds: str) -> Family:
    return Family(f"aiops_nic_{name}_total", help_text, unit, feeds, LANE_LABELS, per_gpu="—", per_node="6")


NIC_SAMPLES = Table(
    "nic_samples",
    (
        Column("ts_s", "float64", key=True),
        Column("nic", "string", key=True),
        Column("node", "string", key=True),
        Column("lane", "string", key=True),
        Column("interval_s", "float64"),
        Column(
            "tx_bytes",
            "int64",
            _counter(
                "transmit_bytes",
                "bytes sent per lane",
                "bytes",
                "nic_samples.tx_bytes: NIC_WINDOW_SQL, `Facts.nics`; lane `fifo` = no enforcement "
                "(NIC_WINDOW_SQL.fifo: lane_enforcement_missing)",
            ),
            counted=True,
            reacts_to=ANY,
            observed_by="the eBPF lane counters (bytes a lane sent)",
        ),
        Column("tx_packets", "int64", counted=True, reacts_to=ANY, observed_by="the eBPF lane counters"),
        Column(
            "drops",
            "int64",
            _counter(
                "drops",
                "packets dropped",
                "packets",
                "nic_samples.drops: `nic_rules` (loss_without_ecn, nic_drops), `Facts.nics`",
            ),
            counted=True,
            reacts_to=FLAP | ECN,
            observed_by="tx_dropped/tx_carrier_errors while the carrier is down; without ECN a congested queue "
            "drops what it would have marked (RFC 3168 section 5)",
        ),
        Column(
            "ce_marks",
            "int64",
            _counter(
                "ce_marks",
                "packets marked CE by the lanes",
                "packets",
                "nic_samples.ce_marks: `nic_rules`, `Facts.nics`",
            ),
            counted=True,
            reacts_to=ANY,
            observed_by="the eBPF lane counters (CE-marked packets: queues fill when traffic changes)",
        ),
        Column(
            "retransmits",
            "int64",
            _counter(
                "retransmits",
                "TCP retransmits",
                "packets",
                "nic_samples.retransmits: `nic_rules`, `Facts.nics`",
            ),
            counted=True,
            reacts_to=FLAP | ECN,
            observed_by="TCP retransmits what was dropped (tcp:tcp_retransmit_skb)",
        ),
        Column(
            "queue_delay_ms",
            "float64",
            Family(
                "aiops_nic_queue_delay_seconds",
                "queueing delay in the lane, last interval",
                "seconds",
                "nic_samples.queue_delay_ms: `nic_rules` (queue_delay), `Facts.nics`",
                ("node", "nic", "lane"),
                per_gpu="—",
                per_node="6",
            ),
            scale=0.001,
            reacts_to=ANY,
            observed_by="the eBPF lane counters (sojourn time of the HTB class)",
        ),
        Column("lane_rate_bps", "float64"),
        Column(
            "carrier_changes",
            "int64",
            _counter(
                "carrier_changes",
                "carrier up/down transitions",
                "transitions",
                "nic_samples.carrier_changes: `nic_rules` (carrier_flap)",
            ),
            counted=True,
            reacts_to=FLAP,
            observed_by="/sys/class/net/*/carrier_changes (on the NIC's first lane row)",
        ),
        Column("link_up", "bool_", reacts_to=FLAP, observed_by="/sys/class/net/*/carrier"),
    ),
    # per NIC, not per lane: rendered by hand (aiops/service/metrics_analyst_families.py), read by the pivot's
    # join on (ts_s, nic)
    hand_written=(
        Family(
            "aiops_nic_link_up",
            "1 while the NIC's link is up",
            "0/1",
            "nic_samples.link_up: NIC_WINDOW_SQL.link_up_all (carrier_flap)",
            ("node", "nic"),
            per_gpu="—",
            per_node="2",
        ),
    ),
    rows_react_to=(LANE_TRAFFIC, "the eBPF lane counters report a row for each lane that carried traffic"),
)
