"""ib_port_samples' columns, each declared once (aiops/columns.py says what derives from a declaration; the recipe
for a new one: docs/ARCHITECTURE.md, "Add a telemetry column"). One row per InfiniBand/RoCE port and collect from
/sys/class/infiniband/<dev>/ports/<port> (collectors/infiniband.py): its state, rate and counters, the IBA
PortCounters in counters/ and the driver's hw_counters/, cumulative totals stored and exported as read (the fleet
reads the newest total back). PortRcvData and PortXmitData count 4-octet words: exported in bytes (x 4)."""

from __future__ import annotations

from aiops.column_model import ANY, Column, Family, Table

FLAP = frozenset({"nic_link_flap"})
ECN = frozenset({"ecn_misconfig"})
PORT_LABELS = ("device", "port", "node", "nic")
WORD_LABELS = ("node", "nic", "device", "port")
LINK_DOWN = (
    "/sys/class/infiniband/*/ports/*/{state,phys_state} and the IBA PortCounters in counters/ while the link is "
    "down or has just been (Documentation/ABI/stable/sysfs-class-infiniband)"
)
CONSOLE = "(console, reports, `aiops investigate`)"
CONGESTION = "`Facts.hca_congestion` (ecn_misconfig, RoCE congestion)"


def _counter(column: str, unit: str, feeds: str) -> Family:
    return Family(
        f"aiops_ib_{column}_total",
        f"InfiniBand port counter {column}",
        unit,
        f"ib_port_samples.{column} {feeds}"
        if feeds.startswith("(")
        else f"ib_port_samples.{column}: {feeds}",
        PORT_LABELS,
        per_gpu="—",
        per_node="2",
    )


def _words(name: str, help_text: str, feeds: str) -> Family:
    return Family(name, help_text, "bytes", feeds, WORD_LABELS, per_gpu="—", per_node="2")


IB_PORT_SAMPLES = Table(
    "ib_port_samples",
    (
        Column("ts_s", "float64", key=True),
        Column("node", "string", key=True),
        Column("device", "string", key=True),
        Column("port", "int32", key=True),
        Column("nic", "string", key=True),
        Column("state", "string", reacts_to=FLAP, observed_by=LINK_DOWN),
        Column("phys_state", "string", reacts_to=FLAP, observed_by=LINK_DOWN),
        Column("rate_gbps", "float64"),
        Column(
            "symbol_error",
            "int64",
            _counter("symbol_error", "events", CONSOLE),
            reacts_to=FLAP,
            observed_by=LINK_DOWN,
        ),
        Column(
            "link_downed",
            "int64",
            _counter("link_downed", "events", "`Facts.hca_congestion`"),
            reacts_to=FLAP,
            observed_by=LINK_DOWN,
        ),
        Column(
            "link_error_recovery",
            "int64",
            _counter("link_error_recovery", "events", CONSOLE),
            reacts_to=FLAP,
            observed_by=LINK_DOWN,
        ),
        Column("port_rcv_errors", "int64", _counter("port_rcv_errors", "events", CONSOLE)),
        Column(
            "port_xmit_discards",
            "int64",
            _counter("port_xmit_discards", "events", CONSOLE),
            reacts_to=FLAP,
            observed_by=LINK_DOWN,
        ),
        Column(
            "port_xmit_wait",
            "int64",
            _counter("port_xmit_wait", "events", CONSOLE),
            reacts_to=ANY,
            observed_by="IBA PortCounters PortXmitWait: a port waits when its peer is busy",
        ),
        Column(
            "port_rcv_data",
            "int64",
            _words(
                "aiops_ib_port_receive_bytes_total",
                "bytes received (PortRcvData x 4)",
                "ib_port_samples.port_rcv_data × 4: `Facts.hca_congestion` (rcv_words_per_s)",
            ),
            scale=4.0,
            reacts_to=ANY,
            observed_by="IBA PortCounters PortRcvData (counters/)",
        ),
        Column(
            "port_xmit_data",
            "int64",
            _words(
                "aiops_ib_port_transmit_bytes_total",
                "bytes sent (PortXmitData x 4)",
                "ib_port_samples.port_xmit_data × 4",
            ),
            scale=4.0,
            reacts_to=ANY,
            observed_by="IBA PortCounters PortXmitData (counters/)",
        ),
        Column(
            "np_cnp_sent",
            "int64",
            _counter("np_cnp_sent", "packets", CONGESTION),
            reacts_to=ANY,
            observed_by="mlx5 hw_counters (DCQCN: CNPs sent for CE marks)",
        ),
        Column(
            "rp_cnp_handled",
            "int64",
            _counter("rp_cnp_handled", "packets", CONGESTION),
            reacts_to=ANY,
            observed_by="mlx5 hw_counters (DCQCN: CNPs handled by the sender)",
        ),
        Column(
            "np_ecn_marked_roce_packets",
            "int64",
            _counter("np_ecn_marked_roce_packets", "packets", CONGESTION),
            reacts_to=ANY,
            observed_by="mlx5 hw_counters (DCQCN: CE-marked packets received)",
        ),
        Column(
            "out_of_sequence",
            "int64",
            _counter("out_of_sequence", "packets", CONGESTION),
            reacts_to=ECN,
            observed_by="mlx5 hw_counters: packets out of PSN order after drops",
        ),
        Column(
            "local_ack_timeout_err",
            "int64",
            _counter("local_ack_timeout_err", "events", CONSOLE),
            reacts_to=FLAP,
            observed_by="mlx5 hw_counters: a QP's ack timer expired with retries left (NCCL_IB_TIMEOUT, "
            "NCCL_IB_RETRY_CNT)",
            migration=13,
        ),
        Column(
            "req_transport_retries_exceeded",
            "int64",
            _counter("req_transport_retries_exceeded", "events", CONSOLE),
            reacts_to=FLAP,
            observed_by="mlx5 hw_counters (Linux >= 6.11, commit b339e0a): the retry limit ran out during a long "
            "outage",
            migration=13,
        ),
    ),
)
