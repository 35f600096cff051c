"""What a workspace sees of its cluster now (`coverage`): each node with its GPUs and NICs known and reporting, the
newest sample of each kind of telemetry it reports (None: that collector is absent there), whether its agent is
lost; the collectors that said they are unavailable or keep failing; the conditions open now; and the blind
periods (`source_blind`, `node_agent_lost`, `collector_blind` incidents) of the last `BLIND_DAYS`. `GET
/api/coverage` answers it as JSON, the console's Coverage page shows it (docs/FLEET.md, docs/CONSOLE.md).

"Reporting" is judged against the workspace's own newest sample, not the wall clock: a GPU reports when its
newest sample is within `REPORTING_INTERVALS` sample intervals of the newest sample of anyone (a twin's
workspace read later is not all silent); a blind source is what the open conditions say.
"""

from __future__ import annotations

import time
from typing import Any

from aiops.store import Store
from aiops.store.conditions import NODE_AGENT_LOST, newest_sample_ts_s, stated

BLIND_DAYS = 7.0
REPORTING_INTERVALS = 3.0
# telemetry per node: (the name a page shows, the table its rows land in)
KINDS = (
    ("gpu", "gpu_samples"),
    ("nic", "nic_samples"),
    ("host", "host_samples"),
    ("netdev", "netdev_samples"),
    ("infiniband", "ib_port_samples"),
)


def interval_s(store: Store, newest_ts_s: float) -> float:
    """The spacing of the newest GPU samples (1 s on a node, the scrape interval in a fleet); 1 s without."""
    value = store.scalar(
        """SELECT median(gap) FROM (
             SELECT ts_s - lag(ts_s) OVER (PARTITION BY gpu ORDER BY ts_s) AS gap FROM gpu_samples
             WHERE ts_s >= ?) WHERE gap > 0""",
        [newest_ts_s - 600.0],
    )
    return float(value) if value else 1.0


def coverage(store: Store, now_ts_s: float | None = None) -> dict[str, Any]:
    now = time.time() if now_ts_s is None else now_ts_s
    newest = newest_sample_ts_s(store)
    step_s = interval_s(store, newest) if newest is not None else 1.0
    fresh_s = (newest - REPORTING_INTERVALS * step_s) if newest is not None else None
    conditions = stated(store)
    lost = {s.component: s for s in conditions if s.kind == NODE_AGENT_LOST}
    nodes = _nodes(store, fresh_s, lost)
    periods = stated(store, open_only=False, since_ts_s=now - BLIND_DAYS * 86_400.0)
    return {
        "now_ts_s": now,
        "newest_sample_ts_s": newest,
        "sample_interval_s": step_s,
        "totals": {
            "nodes": len(nodes),
            "nodes_reporting": sum(1 for n in nodes if n["state"] == "reporting"),
            "nodes_lost": sum(1 for n in nodes if n["state"] == "lost"),
            "gpus": sum(n["gpus"] for n in nodes),
            "gpus_reporting": sum(n["gpus_reporting"] for n in nodes),
            "nics": sum(n["nics"] for n in nodes),
            "nics_reporting": sum(n["nics_reporting"] for n in nodes),
        },
        "nodes": nodes,
        "collectors": _collectors(store),
        "conditions": [s.to_json() for s in conditions],
        "blind_periods": [s.to_json() for s in periods],
    }


def _nodes(store: Store, fresh_s: float | None, lost: dict[str, Any]) -> list[dict[str, Any]]:
    known = store.query(
        "SELECT n.component AS node, n.rack, "
        "(SELECT count(*) FROM topology g WHERE g.kind = 'gpu' AND g.node = n.component) AS gpus, "
        "(SELECT count(*) FROM topology c WHERE c.kind = 'nic' AND c.node = n.component) AS nics "
        "FROM topology n WHERE n.kind = 'node' ORDER BY n.component"
    )
    rows = {str(r["node"]): dict(r) for r in known}
    newest: dict[str, dict[str, float]] = {}
    for kind, table in KINDS:
        for r in store.query(f"SELECT node, max(ts_s) AS ts_s FROM {table} GROUP BY node"):
            newest.setdefault(str(r["node"]), {})[kind] = float(r["ts_s"])
    since = fresh_s if fresh_s is not None else float("inf")
    gpus = _reporting(store, "gpu_samples", "gpu", since, "nvml_error IS NULL")
    nics = _reporting(store, "nic_samples", "nic", since)
    out = []
    for node in sorted({*rows, *newest}):
        row = rows.get(node, {"rack": None, "gpus": 0, "nics": 0})
        last = newest.get(node, {})
        last_ts_s = max(last.values()) if last else None
        if node in lost:
            state = "lost"
        elif last_ts_s is not None and fresh_s is not None and last_ts_s >= fresh_s:
            state = "reporting"
        else:
            state = "silent"
        out.append(
            {
                "node": node,
                "rack": row["rack"],
                "state": state,
                "last_sample_ts_s": last_ts_s,
                "gpus": int(row["gpus"]),
                "gpus_reporting": gpus.get(node, 0),
                "nics": int(row["nics"]),
                "nics_reporting": nics.get(node, 0),
                "newest": {kind: last.get(kind) for kind, _ in KINDS},  # None: never reported here
                "absent": [kind for kind, _ in KINDS if kind not in last],
                "lost": lost[node].to_json() if node in lost else None,
            }
        )
    return out


def _reporting(store: Store, table: str, column: str, since_ts_s: float, where: str = "") -> dict[str, int]:
    """node -> how many of its `column`s have a sample (of `where`) since `since_ts_s`."""
    extra = f" AND {where}" if where else ""
    rows = store.query(
        f"SELECT node, count(DISTINCT {column}) AS n FROM {table} WHERE ts_s >= ?{extra} GROUP BY node",
        [since_ts_s],
    )
    return {str(r["node"]): int(r["n"]) for r in rows}


def _collectors(store: Store) -> list[dict[str, Any]]:
    """Each collector that wrote collector_errors: how often, its newest error, and whether it said it is
    unavailable (nothing to read here: no driver, no device)."""
    rows = store.query(
        "SELECT collector, count(*) AS errors, max(ts_s) AS last_ts_s, "
        "arg_max(error, ts_s) AS last_error, arg_max(coalesce(detail, ''), ts_s) AS last_detail, "
        "bool_or(error = 'unavailable') AS unavailable FROM collector_errors GROUP BY collector ORDER BY collector"
    )
    return [
        {
            "collector": str(r["collector"]),
            "errors": int(r["errors"]),
            "last_ts_s": float(r["last_ts_s"]),
            "last_error": str(r["last_error"]),
            "last_detail": str(r["last_detail"])[:300],
            "unavailable": bool(r["unavailable"]),
        }
        for r in rows
    ]
