"""The GPUs of a rack or a node, for a question about them ("GPU temps on rack0"): each GPU's temperature and
throttling over the window, the hottest first, from one cited SQL whose rows also carry the rack's (or node's)
figures over all its GPUs (window aggregates, computed before the row limit), so every number shown is in a
row the chat re-runs. The rack's own readings (inlet, coolant) follow as context (aiops.agent.component)."""

from __future__ import annotations

from aiops.agent.component import _span
from aiops.agent.findings import MAX_ROWS, Findings
from aiops.nvml_bits import THROTTLE
from aiops.store import Store
from aiops.text import plural

SHOWN = 5  # the hottest GPUs named in the answer (the citation holds up to MAX_ROWS)
_SQL = (
    "WITH g AS (SELECT gpu, count(*) AS samples, min(ts_s) AS first_ts_s, max(ts_s) AS last_ts_s, "
    "round(avg(temp_c), 1) AS mean_temp_c, round(max(temp_c), 1) AS max_temp_c, "
    f"count(*) FILTER (WHERE (clocks_event_reasons & {THROTTLE}) != 0) AS throttled_samples "
    "FROM gpu_samples WHERE {where} AND ts_s >= ? AND ts_s <= ? GROUP BY gpu) "
    "SELECT *, count(*) OVER () AS gpus, round(avg(mean_temp_c) OVER (), 1) AS all_mean_temp_c, "
    "min(max_temp_c) OVER () AS coolest_max_temp_c, sum(throttled_samples) OVER () AS all_throttled_samples "
    f"FROM g ORDER BY max_temp_c DESC NULLS LAST, gpu LIMIT {MAX_ROWS}"
)
RACK_GPUS_SQL = _SQL.replace(
    "{where}", "node IN (SELECT component FROM topology WHERE kind = 'node' AND rack = ?)"
)
NODE_GPUS_SQL = _SQL.replace("{where}", "node = ?")


def gpus_of(store: Store, component: str, kind: str, span: list[float], found: Findings) -> bool:
    """The GPUs of `component` (a rack or a node) over `span`; False when it has none with samples there."""
    sql = RACK_GPUS_SQL if kind == "rack" else NODE_GPUS_SQL
    params = [component, *span]
    rows = store.query(sql, params)
    if not rows:
        found.lines.append(f"{component}: no GPU samples in this window.")
        return False
    first = rows[0]
    found.lines.append(
        f"GPU temperatures on {component}, {plural(int(first['gpus']), 'GPU')} {_span(rows)}: mean "
        f"{first['all_mean_temp_c']:g} °C; the coolest GPU peaked at {first['coolest_max_temp_c']:g} °C; "
        f"{plural(int(first['all_throttled_samples']), 'throttled sample')} in all. The hottest:"
    )
    found.lines.extend(
        f"  {r['gpu']}: max {r['max_temp_c']:g} °C, mean {r['mean_temp_c']:g} °C, throttled in "
        f"{plural(int(r['throttled_samples']), 'sample')} of {int(r['samples']):,}"
        for r in rows[:SHOWN]
    )
    found.fact(f"the GPUs of {component}, hottest first: temperature and throttling", sql, params, rows)
    return True
