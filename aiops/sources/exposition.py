"""The twin's telemetry in dcgm-exporter's and node_exporter's exposition (names and labels: `names`).

`render_snapshot` is what a scrape of `/metrics/dcgm` returns (the newest values, Prometheus text format 0.0.4);
`write_history` writes a stored run as timestamped samples, one series after another, for a TSDB's bulk
import: OpenMetrics for `promtool tsdb create-blocks-from openmetrics`, or Prometheus text with millisecond
timestamps for VictoriaMetrics' `/api/v1/import/prometheus`. Both read rows shaped as the store's tables.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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


def _number_sql(value: str) -> str:
    """`_number` in SQL: an integral value without its `.0`, any other as its shortest round-trip text (what
    DuckDB's DOUBLE to VARCHAR and Python's `repr` both write)."""
    v = f"CAST({value} AS DOUBLE)"
    return (
        f"CASE WHEN {v} = trunc({v}) THEN CAST(CAST({v} AS HUGEINT) AS VARCHAR) ELSE CAST({v} AS VARCHAR) END"
    )


def _stamp_sql(openmetrics: bool) -> str:
    """A sample time as written: OpenMetrics seconds, or Prometheus milliseconds (rounded half to even)."""
    return (
        _number_sql("ts_s") if openmetrics else "CAST(CAST(round_even(ts_s * 1000, 0) AS BIGINT) AS VARCHAR)"
    )


def write_history(
    store: Store, out: TextIO, *, openmetrics: bool, hostname: Callable[[str], str] = str
) -> int:
    """Every stored GPU and NIC sample as timestamped series (one query per metric, one text per GPU or NIC:
    the lines are built by DuckDB, not row by row here); returns the number of samples written. OpenMetrics
    (seconds, `# EOF`) or Prometheus text (milliseconds)."""
    written = 0
    stamp = _stamp_sql(openmetrics)
    for field in DCGM_FIELDS:
        rows = (
            f"SELECT gpu, node, uuid, ts_s, {field.column} AS value FROM gpu_samples "
            f"WHERE {field.column} IS NOT NULL AND nvml_error IS NULL"
        )
        written += _write_series(store, out, field.name, rows, hostname, stamp)
    written += _write_series(store, out, XID, _XID_HISTORY_SQL, hostname, stamp)
    for series in NETDEV_SERIES:
        written += _write_netdev(store, out, series.name, hostname, stamp)
    if openmetrics:
        out.write("# EOF\n")
    return written


def _write_series(
    store: Store, out: TextIO, name: str, rows: str, hostname: Callable[[str], str], stamp: str
) -> int:
    """`rows` (gpu, node, uuid, ts_s, value), one GPU after another in time order, as samples of `name`: each
    GPU labelled by its first row (UUID, host)."""
    firsts = store.conn.execute(
        f"SELECT gpu, arg_min(uuid, ts_s), arg_min(node, ts_s) FROM ({rows}) GROUP BY gpu"
    ).fetchall()
    labels = [labels_text(dcgm_labels(str(g), u, hostname(str(n)))) for g, u, n in firsts]
    return _write_texts(store, out, name, rows, "gpu", [str(f[0]) for f in firsts], labels, "value", stamp)


def _write_netdev(store: Store, out: TextIO, name: str, hostname: Callable[[str], str], stamp: str) -> int:
    """One node_exporter counter (or `node_network_up`) of every NIC, from the summed NIC rows."""
    keys = store.conn.execute(f"SELECT DISTINCT nic, node FROM ({_NIC_HISTORY_SQL})").fetchall()
    labels = [labels_text(netdev_labels(str(nic), hostname(str(node)))) for nic, node in keys]
    if name == "node_network_up":
        value = "CASE WHEN link_up THEN 1 ELSE 0 END"
    elif name == "node_network_receive_drop_total":
        value = "0"  # the twin drops on transmit
    else:
        value = next(s.column for s in NETDEV_SERIES if s.name == name)
    rows = f"SELECT nic || chr(31) || node AS key, ts_s, {value} AS value FROM ({_NIC_HISTORY_SQL})"
    names = [f"{nic}\x1f{node}" for nic, node in keys]
    return _write_texts(store, out, name, rows, "key", names, labels, "value", stamp)


def _write_texts(
    store: Store,
    out: TextIO,
    name: str,
    rows: str,
    key: str,
    keys: list[str],
    labels: list[str],
    value: str,
    stamp: str,
) -> int:
    """The lines `name{labels} value stamp` of `rows`, one text per `key` (in its order, each in time order)."""
    if not keys:
        return 0
    sql = (
        f"WITH k AS (SELECT unnest(?::VARCHAR[]) AS {key}, unnest(?::VARCHAR[]) AS labels) "
        f"SELECT string_agg(? || k.labels || ' ' || {_number_sql(value)} || ' ' || {stamp} || chr(10), '' "
        f"ORDER BY ts_s), count(*) FROM ({rows}) r JOIN k USING ({key}) GROUP BY {key} ORDER BY {key}"
    )
    cursor = store.conn.execute(sql, [keys, labels, name])
    written = 0
    while batch := cursor.fetchmany(64):  # one text per GPU or NIC: never the whole answer in memory
        for text, count in batch:
            out.write(text)
            written += int(count)
    return written
