"""What the product set, as a report reads it (guardrails/intended.py): SwPowerCap alone at a power limit an
executed action set is not throttling and is counted apart (like SwPowerCap at the full limit); an incident
whose only cause was such a limit lost no GPU-hours to a fault; the actions section lists what the service set
in the period and how each action's effect was judged (`action_outcomes`).

The intended limits are registered as a relation of intervals (`intended_limits`: GPU, from, to, watts) that the
period's aggregates join in DuckDB: no sample row is pulled into Python.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from aiops.nvml_bits import SW_POWER_CAP, THROTTLE
from aiops.report.period import Period
from aiops.store import Store
from guardrails.intended import intended_history

Row = dict[str, Any]
RELATION = "intended_limits"
# a sample at a limit the product set (within its read-back tolerance: guardrails.intended.TOLERANCE)
AT_INTENDED = (
    f"EXISTS (SELECT 1 FROM {RELATION} i WHERE i.gpu = gpu_samples.gpu AND gpu_samples.ts_s >= i.from_ts_s "
    "AND gpu_samples.ts_s < i.to_ts_s AND abs(gpu_samples.power_limit_w - i.limit_w) <= greatest(2.0, 0.01 * i.limit_w))"
)
INTENDED_CAP = f"clocks_event_reasons & {THROTTLE} = {SW_POWER_CAP} AND {AT_INTENDED}"


def register_limits(store: Store) -> int:
    """(Re-)register `intended_limits` on the store's connection; returns how many intervals it holds."""
    spans = [s for s in intended_history(store).intervals("power_limit_w") if s[3] is not None]
    table = pa.table(
        {
            "gpu": pa.array([s[0] for s in spans], pa.string()),
            "from_ts_s": pa.array([s[1] for s in spans], pa.float64()),
            "to_ts_s": pa.array([s[2] for s in spans], pa.float64()),
            "limit_w": pa.array([s[3] for s in spans], pa.float64()),
            "proposal_id": pa.array([s[4] for s in spans], pa.string()),
        }
    )
    store.conn.register(RELATION, table)
    return len(spans)


def intended_power_cap(store: Store, period: Period, interval_s: float) -> Row:
    """GPU-seconds of SwPowerCap alone at a limit the product set, the GPUs, and the proposals that set it."""
    register_limits(store)
    row = store.query(
        f"""SELECT count(*) AS n, count(DISTINCT gpu) AS gpus FROM gpu_samples
           WHERE ts_s >= ? AND ts_s < ? AND {INTENDED_CAP}""",
        [period.start_ts_s, period.end_ts_s],
    )[0]
    who = store.query(
        f"SELECT DISTINCT proposal_id FROM {RELATION} WHERE from_ts_s < ? AND to_ts_s > ? ORDER BY 1",
        [period.end_ts_s, period.start_ts_s],
    )
    return {
        "gpu_s": int(row["n"]) * interval_s,
        "gpus": int(row["gpus"]),
        "proposals": [str(r["proposal_id"]) for r in who],
    }


def explained_by_intended(store: Store, incident: Row) -> bool:
    """An incident diagnosed power_cap_misconfig whose GPUs were, when it opened, at limits an executed action
    had set: no fault lost those GPU-hours (an incident stored before the product knew; the detector opens none
    now)."""
    if incident.get("root_cause") != "power_cap_misconfig" or not incident.get("component"):
        return False
    at_s = float(incident["opened_ts_s"])
    state = intended_history(store).at(at_s + 1e-6)
    component = str(incident["component"])
    limits = store.query(
        "SELECT gpu, arg_max(power_limit_w, ts_s) AS limit_w FROM gpu_samples WHERE ts_s <= ? AND ts_s >= ? - 60 "
        "AND (gpu = ? OR starts_with(gpu, ? || '/')) GROUP BY gpu",
        [at_s, at_s, component, component],
    )
    lowered = [r for r in limits if r["limit_w"] is not None]
    return bool(lowered) and all(
        (entry := state.get((str(r["gpu"]), "power_limit_w"))) is not None and entry.matches(r["limit_w"])
        for r in lowered
    )


def actions_set(store: Store, period: Period) -> list[Row]:
    """What executed actions set that was in force in the period: one row per proposal and property."""
    history = intended_history(store)
    until: dict[tuple[str, str, str], float] = {}
    for prop in {e.prop for e in history.entries}:
        for component, _, end, _, proposal_id in history.intervals(prop):
            key = (proposal_id, prop, component)
            until[key] = max(until.get(key, end), end)
    grouped: dict[tuple[str, str], Row] = {}
    for entry in history.entries:
        end = until.get((entry.proposal_id, entry.prop, entry.component), entry.expires_ts_s)
        if entry.set_ts_s >= period.end_ts_s or end < period.start_ts_s:
            continue
        row = grouped.setdefault(
            (entry.proposal_id, entry.prop),
            {
                "proposal_id": entry.proposal_id,
                "kind": entry.kind,
                "property": entry.prop,
                "values": set(),
                "components": [],
                "set_ts_s": entry.set_ts_s,
                "until_ts_s": end,
                "source": entry.source,
            },
        )
        row["values"].add("default" if entry.value is None else f"{entry.value:g}")
        row["components"].append(entry.component)
        row["until_ts_s"] = max(row["until_ts_s"], end)
    return sorted(grouped.values(), key=lambda r: (r["set_ts_s"], r["proposal_id"]))


def outcomes(store: Store, period: Period) -> list[Row]:
    return store.query(
        'SELECT proposal_id, incident_id, step_id, verdict, "check", detail, checked_ts_s FROM action_outcomes '
        "WHERE checked_ts_s >= ? AND checked_ts_s < ? ORDER BY checked_ts_s, proposal_id",
        [period.start_ts_s, period.end_ts_s],
    )
