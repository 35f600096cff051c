"""Series from a time-series engine onto the store: staged long (each series' labels once, one row per sample), then pivoted
into the tables the analyst reads (`topology`, `gpu_samples`, `gpu_events`, `nic_samples`).

Hosts become nodes by, in order: `[node.hosts]` of the config (hostname -> {name, rack}); else the host's own
name (its first label, lowercased: the name the agent on that host gives itself, `aiops.labels.host_component`);
else (an IP address, a name taken twice) the order of appearance (node0, node1, ... not yet taken). A series' host is its
`Hostname` label (dcgm-exporter) or its `instance` without the port (node_exporter). The `gpu` label is the GPU's
index on its node; a node's interfaces, virtual ones left out, are its NICs in name order.
"""

from __future__ import annotations

import itertools
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import duckdb

from aiops import nvml_bits
from aiops.columns import GPU_SAMPLES, SQL_TYPES
from aiops.labels import host_component
from aiops.sources.names import CLOCKS_EVENT_NAMES, DCGM_FIELDS, NETDEV_SERIES, XID
from aiops.store import Store

VIRTUAL_DEVICE = re.compile(
    r"^(lo|docker.*|veth.*|virbr.*|br-.*|cali.*|flannel.*|cni.*|tunl.*|kube-.*|vxlan.*)$"
)
_GPU_INDEX = re.compile(r"^\d{1,4}$", re.ASCII)
_UUID = re.compile(r"^[A-Za-z0-9-]{1,80}\Z", re.ASCII)
MAX_HOST_CHARS = 255  # a DNS name's most (or an instance's address): a longer label is no host
MAX_DEVICE_CHARS = 64
# Staged in the workspace's file (not TEMP tables, which DuckDB keeps in memory), under a memory limit so a
# long range spills to disk instead of growing the process; dropped once pivoted.
STAGING_MEMORY_LIMIT_MB = 128
MAX_THREADS = 2  # DuckDB threads under that limit: each needs its own buffers (4 measured: +42 MB RSS)
PIVOT_ROWS = 500_000  # staged samples pivoted at once (a time slice): 2,000,000 ran out of 128 MB
MAX_PIVOT_SLICES = 1_000
# Each series' labels are staged once (`prom_gpu_series`, `prom_nic_series`, under a series id) and its samples as
# (id, time, value): labels copied into every sample's row made the staging's insert four times dearer. The views
# `prom_gpu` and `prom_nic` give one row per sample with its labels, what the pivots read.
_STAGING_VIEWS = ("prom_gpu", "prom_nic")
_STAGING_TABLES = (
    "prom_gpu_series",
    "prom_gpu_samples",
    "prom_nic_series",
    "prom_nic_samples",
    "prom_hosts",
    "prom_nics",
    "prom_gpu_keys",  # made by finish
)
_STAGE_SQL = """
CREATE TABLE prom_gpu_series (sid INTEGER, name VARCHAR, host VARCHAR, gpu_idx INTEGER, uuid VARCHAR);
CREATE TABLE prom_gpu_samples (sid INTEGER, ts_s DOUBLE, value DOUBLE);
CREATE TABLE prom_nic_series (sid INTEGER, name VARCHAR, host VARCHAR, device VARCHAR);
CREATE TABLE prom_nic_samples (sid INTEGER, ts_s DOUBLE, value DOUBLE);
CREATE VIEW prom_gpu AS SELECT name, host, gpu_idx, uuid, ts_s, value
    FROM prom_gpu_samples JOIN prom_gpu_series USING (sid);
CREATE VIEW prom_nic AS SELECT name, host, device, ts_s, value
    FROM prom_nic_samples JOIN prom_nic_series USING (sid);
CREATE TABLE prom_hosts (host VARCHAR, node VARCHAR, rack VARCHAR);
CREATE TABLE prom_nics (host VARCHAR, device VARCHAR, nic VARCHAR)
"""


@dataclass(frozen=True)
class HostIdentity:
    node: str
    rack: str


def host_of(labels: Mapping[str, str]) -> str | None:
    """The host a series is about: dcgm-exporter's `Hostname`, else node_exporter's `instance` less its port."""
    if labels.get("Hostname"):
        return labels["Hostname"]
    instance = labels.get("instance", "")
    if not instance:
        return None
    if instance.startswith("["):  # [v6]:port
        return instance[1:].split("]", 1)[0]
    return instance.rsplit(":", 1)[0] if instance.count(":") == 1 else instance


def assign_nodes(hosts: Sequence[str], configured: Mapping[str, HostIdentity]) -> dict[str, HostIdentity]:
    """Each host's node and rack (see the module's docstring); node names are never given twice."""
    out: dict[str, HostIdentity] = {host: configured[host] for host in sorted(hosts) if host in configured}
    taken: set[str] = {identity.node for identity in out.values()}
    for host in sorted(set(hosts) - set(out)):
        name = host_component(host)
        if name is not None and name not in taken:
            out[host] = HostIdentity(name, "rack0")
            taken.add(name)
    index = 0
    for host in sorted(set(hosts) - set(out)):
        while f"node{index}" in taken:
            index += 1
        out[host] = HostIdentity(f"node{index}", "rack0")
        taken.add(out[host].node)
    return out


def bound_memory(store: Store) -> None:
    """Bound DuckDB on `store`'s instance: it caches what it reads and writes up to its memory limit (80 % of RAM
    by default) and sizes its buffers per thread; past the limit it spills to the workspace's temporary
    directory instead of growing the process. Never on a store attached to the process's shared instance (its
    settings are every attached store's: aiops/store/instances.py)."""
    if store.shared:
        raise RuntimeError(f"{store.path}: open it with its own instance to bound its memory")
    conn = store.conn
    conn.execute(f"SET memory_limit = '{STAGING_MEMORY_LIMIT_MB}MB'")
    conn.execute(f"SET threads = {min(MAX_THREADS, os.cpu_count() or 1)}")


class Staging:
    """The fetched samples, long, in temporary tables of the workspace's connection."""

    def __init__(self, store: Store) -> None:
        self.store = store
        bound_memory(store)
        _drop_staging(store.conn, if_exists=True)
        for statement in _STAGE_SQL.split(";\n"):
            store.conn.execute(statement)
        self.samples = 0
        self.series = 0  # series ids given so far

    def add(self, name: str, result: Sequence[Mapping[str, Any]]) -> int:
        """One query_range answer's `result` (matrix) for metric `name`; returns the samples staged."""
        gpu_rows = _Rows(("name", "host", "gpu_idx", "uuid"))
        nic_rows = _Rows(("name", "host", "device"))
        for series in result:
            labels = {str(k): str(v) for k, v in dict(series.get("metric") or {}).items()}
            host = host_of(labels)
            values = series.get("values") or []
            if host is None or len(host) > MAX_HOST_CHARS:
                continue  # staged once per sample: a megabyte "host" would be copied into every row
            if name.startswith("DCGM_"):
                if not _GPU_INDEX.match(labels.get("gpu", "")):
                    continue
                uuid = labels["UUID"] if _UUID.match(labels.get("UUID", "")) else None
                gpu_rows.extend((name, host, int(labels["gpu"]), uuid), values, dcgm=True)
            else:
                device = labels.get("device", "")
                if not device or len(device) > MAX_DEVICE_CHARS or VIRTUAL_DEVICE.match(device):
                    continue
                nic_rows.extend((name, host, device), values, dcgm=False)
        for table, rows in (("prom_gpu", gpu_rows), ("prom_nic", nic_rows)):
            if rows.samples:
                series, samples = rows.tables(first_sid=self.series)
                self.series += len(rows.series)
                for suffix, batch in (("series", series), ("samples", samples)):
                    self.store.conn.register("_prom_batch", batch)
                    self.store.conn.execute(f"INSERT INTO {table}_{suffix} SELECT * FROM _prom_batch")
                    self.store.conn.unregister("_prom_batch")
        staged = gpu_rows.samples + nic_rows.samples
        self.samples += staged
        return staged

    def hosts(self) -> list[str]:
        sql = "SELECT DISTINCT host FROM prom_gpu_series UNION SELECT DISTINCT host FROM prom_nic_series"
        rows = self.store.query(sql)  # every staged series has a sample: its hosts are the samples'
        return sorted(str(r["host"]) for r in rows)

    def finish(self, configured: Mapping[str, HostIdentity]) -> dict[str, int]:
        """Pivot the staged samples into the store's tables; returns the rows written per table."""
        import pyarrow as pa

        conn = self.store.conn
        identities = assign_nodes(self.hosts(), configured)
        conn.register(
            "_hosts",
            pa.table(
                {
                    "host": list(identities),
                    "node": [i.node for i in identities.values()],
                    "rack": [i.rack for i in identities.values()],
                }
            ),
        )
        conn.execute("INSERT INTO prom_hosts SELECT * FROM _hosts")
        conn.unregister("_hosts")
        conn.execute("""INSERT INTO prom_nics
            SELECT host, device, 'nic' || (row_number() OVER (PARTITION BY host ORDER BY device) - 1)
            FROM (SELECT DISTINCT host, device FROM prom_nic_series)""")
        conn.execute(_TOPOLOGY_SQL)
        conn.execute(_GPU_KEYS_SQL, [_gpu_names()])
        pivot = _gpu_samples_sql()
        for lo_s, hi_s in _time_slices(conn):
            conn.execute(pivot, [lo_s, hi_s])
        conn.execute(_XID_SQL, [XID])
        conn.execute(_nic_samples_sql())
        _drop_staging(conn, if_exists=False)
        return {
            t: int(self.store.scalar(f"SELECT count(*) FROM {t}"))
            for t in ("topology", "gpu_samples", "gpu_events", "nic_samples")
        }


def _drop_staging(conn: duckdb.DuckDBPyConnection, *, if_exists: bool) -> None:
    exists = " IF EXISTS" if if_exists else ""
    for view in _STAGING_VIEWS:
        conn.execute(f"DROP VIEW{exists} {view}")
    for table in _STAGING_TABLES:
        conn.execute(f"DROP TABLE{exists} {table}")


class _Rows:
    """One answer's samples for one staging table, column by column: each series' label values once, its
    times and values parsed as arrays (numpy and pyarrow are imported here, not by the node agent, which imports
    this module for `host_of` and never stages samples)."""

    def __init__(self, labels: tuple[str, ...]) -> None:
        self.labels = labels
        self.series: list[tuple[Any, ...]] = []  # each series' label values, once
        self.times: list[Any] = []
        self.values: list[Any] = []
        self.samples = 0

    def extend(self, constant: tuple[Any, ...], values: Sequence[Sequence[Any]], *, dcgm: bool) -> None:
        """One series' `[ts, value]` pairs: each time a float, each value a float or NULL (NaN, a stale marker's
        value; with `dcgm`, DCGM's blanks too: `_dcgm_float`)."""
        if not values:
            return
        times, numbers = _parsed(values, _dcgm_float if dcgm else _float)
        if dcgm:
            numbers[_dcgm_blanks(numbers)] = math.nan
        self.series.append(constant)
        self.times.append(times)
        self.values.append(numbers)
        self.samples += len(times)

    def tables(self, first_sid: int) -> tuple[Any, Any]:
        """(series, samples): each series' id (from `first_sid`) and labels, once; each sample's id, time and
        value (NaN staged as NULL)."""
        import numpy as np
        import pyarrow as pa

        sids = np.arange(first_sid, first_sid + len(self.series), dtype=np.int32)
        series = {"sid": pa.array(sids)}
        series.update({k: pa.array([c[i] for c in self.series]) for i, k in enumerate(self.labels)})
        samples = {
            "sid": pa.array(np.repeat(sids, [len(t) for t in self.times])),
            "ts_s": pa.array(np.concatenate(self.times)),
            "value": pa.array(np.concatenate(self.values), from_pandas=True),  # NaN -> NULL
        }
        return pa.table(series), pa.table(samples)


def _parsed(values: Sequence[Sequence[Any]], parse: Callable[[Any], float | None]) -> tuple[Any, Any]:
    """A series' times and values as float arrays, NaN for a value that is none (`parse`'s None). The common
    answer (every value a number's text) is parsed by `float` over the whole column; any other falls back to
    `parse`, value by value. A time that is no number raises, as it did sample by sample."""
    import numpy as np

    try:
        stamps, texts = zip(*values, strict=True)
    except (TypeError, ValueError):  # a sample that is not a [ts, value] pair: as before, read pair by pair
        pairs = [(ts, value) for ts, value in values]
        stamps, texts = tuple(ts for ts, _ in pairs), tuple(value for _, value in pairs)
    times = np.fromiter(map(float, stamps), dtype=np.float64, count=len(stamps))
    try:
        numbers = np.fromiter(map(float, texts), dtype=np.float64, count=len(texts))
    except (TypeError, ValueError):
        parsed = (parse(value) for value in texts)
        numbers = np.fromiter(
            (math.nan if v is None else v for v in parsed), dtype=np.float64, count=len(texts)
        )
    return times, numbers


def _dcgm_blanks(numbers: Any) -> Any:
    """`nvml_bits.dcgm_blank` over an array (NaN is no blank: it is NULL already)."""
    return (numbers >= nvml_bits.DCGM_FP64_BLANK) | (
        (numbers >= nvml_bits.DCGM_INT32_BLANK) & (numbers < 2**31)
    )


def _float(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if number != number else number  # NaN (a stale marker's value) -> NULL


def _dcgm_float(value: Any) -> float | None:
    """A dcgm-exporter sample; DCGM's blank values (not supported, not found, no permission: dcgm_structs.h,
    written as numbers, e.g. `DCGM_FI_DEV_MEMORY_TEMP ... 9223372036854775794` on a GPU without HBM sensors) are
    no reading: NULL, never a 9.2e18 degree temperature or a counter that overflows BIGINT."""
    number = _float(value)
    if number is None or nvml_bits.dcgm_blank(number):
        return None
    return number


# idx: the twin's node{n} / rack{r} keep n / r; any other name its place among its siblings by name
_TOPOLOGY_SQL = """
INSERT INTO topology (component, kind, parent, rack, node, idx)
SELECT 'fleet', 'fleet', NULL, NULL, NULL, 0
UNION ALL SELECT rack, 'rack', 'fleet', rack, NULL,
    coalesce(TRY_CAST(regexp_extract(rack, '^rack([0-9]{1,9})$', 1) AS INTEGER), (row_number() OVER (ORDER BY rack)) - 1)
    FROM (SELECT DISTINCT rack FROM prom_hosts)
UNION ALL SELECT node, 'node', rack, rack, node,
    coalesce(TRY_CAST(regexp_extract(node, '^node([0-9]{1,9})$', 1) AS INTEGER),
             (row_number() OVER (PARTITION BY rack ORDER BY node)) - 1)
    FROM prom_hosts
UNION ALL SELECT DISTINCT h.node || '/gpu' || g.gpu_idx, 'gpu', h.node, h.rack, h.node, g.gpu_idx
    FROM prom_gpu_series g JOIN prom_hosts h USING (host)
UNION ALL SELECT h.node || '/' || n.nic, 'nic', h.node, h.rack, h.node, CAST(substr(n.nic, 4) AS INTEGER)
    FROM prom_nics n JOIN prom_hosts h USING (host)
"""


def _time_slices(conn: duckdb.DuckDBPyConnection) -> list[tuple[float, float]]:
    """Half-open [lo, hi) ranges of `ts_s` that together cover the staged GPU samples, each holding about
    PIVOT_ROWS of them (by time, assuming an even spread): the pivot's hash table holds one slice at a time."""
    row = conn.execute("SELECT min(ts_s), max(ts_s), count(*) FROM prom_gpu_samples").fetchone()
    if row is None or row[0] is None:
        return []
    lo_s, hi_s, rows = float(row[0]), float(row[1]), int(row[2])
    slices = max(1, min(MAX_PIVOT_SLICES, math.ceil(rows / PIVOT_ROWS)))
    edges = [lo_s + (hi_s - lo_s) * i / slices for i in range(slices)] + [math.inf]
    return list(itertools.pairwise(edges))


def _gpu_names() -> list[str]:
    return list(dict.fromkeys(field.name for field in DCGM_FIELDS))


# Each staged GPU series (the XID's apart) under small integer keys: its field (`nid`, its place in _gpu_names(),
# from 1), its GPU (`gkey`, per node and index) and its UUID (`ukey`, in the UUIDs' order, so the largest key is
# the largest UUID): the pivot groups and filters integers, not the labels of every sample.
_GPU_KEYS_SQL = f"""
CREATE TABLE prom_gpu_keys AS
SELECT s.sid, list_position(?, s.name) AS nid, dense_rank() OVER (ORDER BY h.node, s.gpu_idx) AS gkey,
       h.node, s.gpu_idx, CASE WHEN s.uuid IS NOT NULL THEN dense_rank() OVER (ORDER BY s.uuid) END AS ukey,
       s.uuid
FROM prom_gpu_series s JOIN prom_hosts h USING (host)
WHERE s.name <> '{XID}'
"""


def _gpu_samples_sql() -> str:
    """One gpu_samples row per (time, GPU) in a slice [?, ?) of the staged times: each column the largest value
    of its field at that time (of the first of its fields that has one: the clocks-event reasons under their two
    names), the largest UUID."""
    nid = {name: i for i, name in enumerate(_gpu_names(), start=1)}
    columns: dict[str, list[str]] = {}
    for field in DCGM_FIELDS:
        columns.setdefault(field.column, []).append(field.name)
    picks = []
    for column, names in columns.items():
        ordered = [n for n in CLOCKS_EVENT_NAMES if n in names] if column == "clocks_event_reasons" else names
        values = [f"v{nid[n]}" for n in ordered]
        expr = values[0] if len(values) == 1 else f"coalesce({', '.join(values)})"
        sql_type = SQL_TYPES[GPU_SAMPLES.column(column).arrow]  # the declared type (aiops/columns.py)
        if sql_type != "DOUBLE":
            expr = f"CAST({expr} AS {sql_type})"
        picks.append((column, expr))
    targets = ", ".join(c for c, _ in picks)
    # CASE, not FILTER: the same maximum (NULL where no sample of the field), measured 20 % cheaper
    per_field = ", ".join(f"max(CASE WHEN k.nid = {i} THEN x.value END) AS v{i}" for i in nid.values())
    return f"""
INSERT INTO gpu_samples (ts_s, gpu, node, uuid, {targets})
SELECT p.ts_s, g.node || '/gpu' || g.gpu_idx, g.node, u.uuid, {", ".join(e for _, e in picks)}
FROM (SELECT x.ts_s, k.gkey, max(k.ukey) AS ukey, {per_field}
      FROM prom_gpu_samples x JOIN prom_gpu_keys k USING (sid)
      WHERE x.ts_s >= ? AND x.ts_s < ?
      GROUP BY x.ts_s, k.gkey) p
JOIN (SELECT DISTINCT gkey, node, gpu_idx FROM prom_gpu_keys) g USING (gkey)
LEFT JOIN (SELECT DISTINCT ukey, uuid FROM prom_gpu_keys WHERE ukey IS NOT NULL) u USING (ukey)
"""


_XID_SQL = """
INSERT INTO gpu_events (ts_s, gpu, node, kind, xid, message)
SELECT ts_s, gpu, node, 'xid', CAST(value AS INTEGER), 'DCGM_FI_DEV_XID_ERRORS changed to ' || CAST(value AS INTEGER)
FROM (SELECT ts_s, h.node || '/gpu' || gpu_idx AS gpu, h.node AS node, value,
             lag(value) OVER (PARTITION BY host, gpu_idx ORDER BY ts_s) AS previous
      FROM prom_gpu JOIN prom_hosts h USING (host) WHERE name = ?)
WHERE previous IS NOT NULL AND value IS NOT NULL AND value <> previous AND value <> 0
"""


def _nic_samples_sql() -> str:
    counters = {s.name: s.column for s in NETDEV_SERIES if s.kind == "counter"}

    def delta(column: str) -> str:
        names = ", ".join(f"'{n}'" for n, c in counters.items() if c == column)
        return f"CAST(sum(d) FILTER (WHERE name IN ({names})) AS BIGINT)"

    return f"""
INSERT INTO nic_samples (ts_s, nic, node, lane, interval_s, tx_bytes, tx_packets, drops, carrier_changes, link_up)
SELECT ts_s, h.node || '/' || n.nic, h.node, 'fifo', coalesce(max(interval_s), 0),
       {delta("tx_bytes")}, {delta("tx_packets")}, {delta("drops")}, {delta("carrier_changes")},
       bool_and(value > 0) FILTER (WHERE name = 'node_network_up')
FROM (SELECT name, host, device, ts_s, value,
             ts_s - lag(ts_s) OVER s AS interval_s,
             -- a counter's increase since the previous sample; a reset (smaller value) counts from zero
             CASE WHEN lag(value) OVER s IS NULL THEN 0
                  WHEN value >= lag(value) OVER s THEN value - lag(value) OVER s ELSE value END AS d
      FROM prom_nic WINDOW s AS (PARTITION BY name, host, device ORDER BY ts_s))
JOIN prom_hosts h USING (host) JOIN prom_nics n USING (host, device)
GROUP BY ts_s, h.node, n.nic
"""
