"""netdev_samples' columns, each declared once (aiops/columns.py says what derives from a declaration; the recipe
for a new one: docs/ARCHITECTURE.md, "Add a telemetry column"). One row per network device and collect from
/sys/class/net/<dev> (collectors/net.py): its statistics are the kernel's cumulative counters, stored and exported
as they are (the fleet reads the newest total back), its operstate, speed and the pause frames ethtool counts."""

from __future__ import annotations

from aiops.column_model import ANY, Column, Family, Table

FLAP = frozenset({"nic_link_flap"})
ECN = frozenset({"ecn_misconfig"})
DEV_LABELS = ("dev", "node", "nic")
STATISTICS = "/sys/class/net/*/statistics"


def _counter(name: str, column: str, unit: str, feeds: str = "") -> Family:
    return Family(
        f"aiops_netdev_{name}_total",
        f"/sys/class/net statistics: {column}",
        unit,
        feeds or f"netdev_samples.{column}",
        DEV_LABELS,
        per_gpu="—",
        per_node="2",
    )


NETDEV_SAMPLES = Table(
    "netdev_samples",
    (
        Column("ts_s", "float64", key=True),
        Column("node", "string", key=True),
        Column("dev", "string", key=True),
        Column("nic", "string", key=True),
        Column(
            "rx_bytes",
            "int64",
            _counter("receive_bytes", "rx_bytes", "bytes"),
            reacts_to=ANY,
            observed_by=STATISTICS,
        ),
        Column(
            "tx_bytes",
            "int64",
            _counter("transmit_bytes", "tx_bytes", "bytes"),
            reacts_to=ANY,
            observed_by=STATISTICS,
        ),
        Column("rx_packets", "int64", reacts_to=ANY, observed_by=STATISTICS),
        Column("tx_packets", "int64", reacts_to=ANY, observed_by=STATISTICS),
        Column("rx_errors", "int64", _counter("receive_errors", "rx_errors", "packets")),
        Column("tx_errors", "int64", _counter("transmit_errors", "tx_errors", "packets")),
        Column("rx_dropped", "int64", _counter("receive_drops", "rx_dropped", "packets")),
        Column(
            "tx_dropped",
            "int64",
            _counter("transmit_drops", "tx_dropped", "packets"),
            reacts_to=FLAP,
            observed_by="/sys/class/net/*/statistics/tx_dropped while the carrier is down",
        ),
        Column(
            "carrier_changes",
            "int64",
            _counter("carrier_changes", "carrier_changes", "transitions"),
            reacts_to=FLAP,
            observed_by="/sys/class/net/*/carrier_changes",
        ),
        Column("oper_up", "bool_", reacts_to=FLAP, observed_by="/sys/class/net/*/operstate"),
        Column(
            "speed_mbps",
            "int32",
            fleet=False,
            reacts_to=FLAP,
            observed_by="/sys/class/net/*/speed reads unknown while the link is down",
        ),
        Column(
            "rx_pause_frames",
            "int64",
            _counter(
                "receive_pause_frames",
                "rx_pause_frames",
                "frames",
                "netdev_samples.rx_pause_frames: PAUSE_WINDOW_SQL (`pause_rules`), `Facts.hca_congestion`",
            ),
            reacts_to=ECN,
            observed_by="ethtool rx_prio<N>_pause (mlx5): on a lossless fabric the switch pauses a sender whose "
            "queue does not mark",
            migration=14,
        ),
        Column(
            "tx_pause_frames",
            "int64",
            _counter("transmit_pause_frames", "tx_pause_frames", "frames"),
            migration=14,
        ),
    ),
    # a 0/1 of the operstate: rendered by hand in the exporter, read back as `> 0`
    hand_written=(
        Family(
            "aiops_netdev_up",
            "1 while the link's operstate is up",
            "0/1",
            "netdev_samples.oper_up",
            DEV_LABELS,
            per_gpu="—",
            per_node="2",
        ),
    ),
)
