"""The twin's telemetry in dcgm-exporter's and node_exporter's exposition (names and labels: `names`).

`render_snapshot` is what a scrape of `/metrics/dcgm` returns (the newest values, Prometheus text format 0.0.4);
`write_history` writes a stored run as timestamped samples, one series after another, for a TSDB's bulk
import: OpenMetrics for `promtool tsdb create-blocks-from openmetrics`, or Prometheus text with millisecond
timestamps for VictoriaMetrics' `/api/v1/import/prometheus`. Both read rows shaped as the store's tables.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TextIO

from aiops.sources.names import DCGM_FIELDS, DCGM_LABELS, NETDEV_SERIES, XID, XID_HELP
from aiops.store import Store

MODEL_NAME = "NVIDIA H100 80GB HBM3"  # the twin's GPU (aiops.sim.gpu: 700 W, 1980 MHz)
DRIVER_VERSION = "550.54.15"
NODE_EXPORTER_PORT = 9100


def gpu_index(gpu: str) -> int:
    """`node3/gpu5` -> 5."""
    return int(gpu.rsplit("gpu", 1)[1])


def nic_device(nic: str) -> str:
    """The twin's interface name of `node3/nic1`: `eth1`."""
    return "eth" + nic.rsplit("nic", 1)[1]


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def labels_text(labels: Mapping[str, str]) -> str:
    return "{" + ",".join(f'{k}="{_escape(v)}"' for k, v in labels.items()) + "}"


def dcgm_labels(gpu: str, uuid: str | None, hostname: str) -> dict[str, str]:
    """dcgm-exporter's label set, in its order (gpu, UUID, pci_bus_id, device, modelName, Hostname, driver)."""
    index = gpu_index(gpu)
    values = (
        str(index),
        uuid or "",
        f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        f"nvidia{index}",
        MODEL_NAME,
        hostname,
        DRIVER_VERSION,
    )
    return dict(zip(DCGM_LABELS, values, strict=True))


def netdev_labels(nic: str, hostname: str) -> dict[str, str]:
    return {"device": nic_device(nic), "instance": f"{hostname}:{NODE_EXPORTER_PORT}", "job": "node"}


def _number(value: float) -> str:
    return repr(float(value)) if value != int(value) else str(int(value))


@dataclass
class NicTotals:
    """A NIC's node_exporter counters: totals since the twin started, summed over its lanes."""

    tx_bytes: float = 0.0
    tx_packets: float = 0.0
    drops: float = 0.0
    carrier_changes: float = 0.0
    link_up: bool = True


def render_snapshot(
    gpus: Mapping[str, Mapping[str, Any]],
    last_xid: Mapping[str, int],
    nics: Mapping[str, NicTotals],
    hostname: Callable[[str], str] = str,
) -> str:
    """One scrape: every GPU's newest row (`gpu_samples` columns), its last XID, every NIC's totals; `hostname`
    names a node's host (the twin's hosts are its nodes)."""
    lines: list[str] = []
    for field in DCGM_FIELDS:
        lines += [f"# HELP {field.name} {field.help_text}", f"# TYPE {field.name} {field.kind}"]
        for gpu, row in sorted(gpus.items()):
            value = row.get(field.column)
            if value is not None and not row.get("nvml_error"):
                labels = dcgm_labels(gpu, row.get("uuid"), hostname(str(row["node"])))
                lines.append(f"{field.name}{labels_text(labels)} {_number(float(value))}")
    lines += [f"# HELP {XID} {XID_HELP}", f"# TYPE {XID} gauge"]
    for gpu, row in sorted(gpus.items()):
        labels = dcgm_labels(gpu, row.get("uuid"), hostname(str(row["node"])))
        lines.append(f"{XID}{labels_text(labels)} {int(last_xid.get(gpu, 0))}")
    for series in NETDEV_SERIES:
        lines += [f"# HELP {series.name} {series.help_text}", f"# TYPE {series.name} {series.kind}"]
        for nic, totals in sorted(nics.items()):
            node = nic.split("/", 1)[0]
            value = _netdev_value(series.name, totals)
            lines.append(f"{series.name}{labels_text(netdev_labels(nic, hostname(node)))} {_number(value)}")
    return "\n".join(lines) + "\n"


def _netdev_value(name: str, totals: NicTotals) -> float:
    if name == "node_network_up":
        return 1.0 if totals.link_up else 0.0
    if name == "node_network_receive_drop_total":
        return 0.0  # the twin drops on transmit
    column = next(s.column for s in NETDEV_SERIES if s.name == name)
    return float(getattr(totals, column))


# -- history ------------------------------------------------------------------------------------------------
_XID_HISTORY_SQL = """
SELECT s.gpu, s.node, s.uuid, s.ts_s, coalesce(e.xid, 0) AS value
FROM gpu_samples s ASOF LEFT JOIN (SELECT gpu, ts_s, xid FROM gpu_events WHERE kind = 'xid') e
  ON s.gpu = e.gpu AND s.ts_s >= e.ts_s
ORDER BY s.gpu, s.ts_s
"""
_NIC_HISTORY_SQL = """
SELECT nic, node, ts_s,
       sum(tx) OVER w AS tx_bytes, sum(pk) OVER w AS tx_packets, sum(dr) OVER w AS drops,
       sum(cc) OVER w AS carrier_changes, up AS link_up
FROM (SELECT nic, node, ts_s, sum(coalesce(tx_bytes, 0)) AS tx, sum(coalesce(tx_packets, 0)) AS pk,
             sum(coalesce(drops, 0)) AS dr, sum(coalesce(carrier_changes, 0)) AS cc,
             bool_and(coalesce(link_up, true)) AS up
      FROM nic_samples GROUP BY nic, node, ts_s)
WINDOW w AS (PARTITION BY nic ORDER BY ts_s)
ORDER BY nic, ts_s
"""


def _batches(store: Store, sql: str) -> Iterator[list[tuple[Any, ...]]]:
    """The answer's rows as tuples, 10,000 at a time (never the whole answer in memory)."""
    cursor = store.conn.execute(sql)
    while batch := cursor.fetchmany(10_000):
        yield batch


def write_history(
    store: Store, out: TextIO, *, openmetrics: bool, hostname: Callable[[str], str] = str
) -> int:
    """Every stored GPU and NIC sample as timestamped series (streamed: one query per metric); returns the
    number of samples written. OpenMetrics (seconds, `# EOF`) or Prometheus text (milliseconds)."""
    written = 0
    for field in DCGM_FIELDS:
        sql = (
            f"SELECT gpu, node, uuid, ts_s, {field.column} AS value FROM gpu_samples "
            f"WHERE {field.column} IS NOT NULL AND nvml_error IS NULL ORDER BY gpu, ts_s"
        )
        written += _write_series(out, field.name, _batches(store, sql), hostname, _Stamps(openmetrics))
    written += _write_series(out, XID, _batches(store, _XID_HISTORY_SQL), hostname, _Stamps(openmetrics))
    for series in NETDEV_SERIES:
        stamp = _Stamps(openmetrics)
        for batch in _batches(store, _NIC_HISTORY_SQL):
            lines = []
            for nic, node, ts_s, tx_bytes, tx_packets, drops, carrier_changes, link_up in batch:
                totals = NicTotals(
                    float(tx_bytes), float(tx_packets), float(drops), float(carrier_changes), bool(link_up)
                )
                labels = labels_text(netdev_labels(str(nic), hostname(str(node))))
                value = _number(_netdev_value(series.name, totals))
                lines.append(f"{series.name}{labels} {value} {stamp(float(ts_s))}\n")
            out.write("".join(lines))
            written += len(lines)
    if openmetrics:
        out.write("# EOF\n")
    return written


class _Stamps(dict[float, str]):
    """A sample time as written: OpenMetrics seconds or Prometheus milliseconds (each time formatted once: the
    GPUs of one metric share their times)."""

    def __init__(self, openmetrics: bool) -> None:
        super().__init__()
        self.openmetrics = openmetrics

    def __missing__(self, ts_s: float) -> str:
        text = _number(ts_s) if self.openmetrics else str(round(ts_s * 1000))
        self[ts_s] = text
        return text

    def __call__(self, ts_s: float) -> str:
        return self[ts_s]


def _write_series(
    out: TextIO,
    name: str,
    batches: Iterator[list[tuple[Any, ...]]],
    hostname: Callable[[str], str],
    stamp: _Stamps,
) -> int:
    """Rows (gpu, node, uuid, ts_s, value), one GPU after another, as samples of `name`."""
    written = 0
    last_gpu = ""
    text = ""
    for batch in batches:
        lines = []
        for gpu, node, uuid, ts_s, value in batch:
            if gpu != last_gpu:
                last_gpu = str(gpu)
                text = labels_text(dcgm_labels(last_gpu, uuid, hostname(str(node))))
            lines.append(f"{name}{text} {_number(float(value))} {stamp[float(ts_s)]}\n")
        out.write("".join(lines))
        written += len(lines)
    return written
