"""What changed in a window, in words, from stored rows: incidents opened and resolved (and, on the fleet, the
node agents' incidents first seen), proposals filed and what people decided, what ran and whether it worked,
plan steps that moved, GPU events (XIDs), facility power caps set or cleared, maintenance windows begun; then the
hottest GPUs of the window. Each line cites the SQL it came from over the window's fixed bounds.

The window is the data's clock (aiops/agent/scope.py); the people's side (proposals, approvals, executions,
plan steps) is stamped with the wall clock, which is the same clock on a live workspace (not on a replayed or
simulated one, whose telemetry is dated when it was simulated).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiops.agent.findings import Findings
from aiops.agent.situation import has_table
from aiops.nvml_bits import THROTTLE
from aiops.store import Store
from aiops.text import plural, when

MAX_LISTED = 6  # items named per line, then "+N more"

# (claim, SQL over [start, end], line for the rows); each SQL takes the window's start and end
Fact = tuple[str, str, Callable[[list[dict[str, Any]]], str]]


def _names(rows: list[dict[str, Any]], text: Callable[[dict[str, Any]], str]) -> str:
    shown = "; ".join(text(r) for r in rows[:MAX_LISTED])
    return shown + (f"; +{len(rows) - MAX_LISTED} more" if len(rows) > MAX_LISTED else "")


FACTS: tuple[Fact, ...] = (
    (
        "incidents opened in the window",
        "SELECT incident_id, severity, title, opened_ts_s FROM incidents WHERE opened_ts_s >= ? AND opened_ts_s <= ? "
        "ORDER BY opened_ts_s, incident_id",
        lambda rows: (
            f"Opened: {plural(len(rows), 'incident')}: "
            + _names(
                rows,
                lambda r: f"{r['incident_id']} ({r['severity']}) {r['title']} at {when(r['opened_ts_s'])}",
            )
        ),
    ),
    (
        "incidents resolved in the window",
        "SELECT incident_id, title, resolved_ts_s FROM incidents WHERE resolved_ts_s >= ? AND resolved_ts_s <= ? "
        "ORDER BY resolved_ts_s, incident_id",
        lambda rows: (
            f"Resolved: {plural(len(rows), 'incident')}: "
            + _names(rows, lambda r: f"{r['incident_id']} {r['title']} at {when(r['resolved_ts_s'])}")
        ),
    ),
    (
        "node agents' incidents the fleet first saw in the window",
        "SELECT node, incident_id, root_cause, component, severity FROM node_incidents WHERE seen_ts_s >= ? "
        "AND seen_ts_s <= ? ORDER BY seen_ts_s, node, incident_id",
        lambda rows: (
            f"Node agents opened {plural(len(rows), 'incident')} of their own: "
            + _names(
                rows,
                lambda r: (
                    f"{r['incident_id']} on {r['node']} ({r['severity']}"
                    + (f", {r['root_cause']} on {r['component']})" if r["root_cause"] else ")")
                ),
            )
        ),
    ),
    (
        "proposals filed in the window, by their status now",
        "SELECT status, count(*) AS proposals, list(proposal_id ORDER BY proposal_id) AS ids FROM proposals "
        "WHERE created_ts_s >= ? AND created_ts_s <= ? GROUP BY status ORDER BY status",
        lambda rows: (
            f"Proposed: {plural(sum(int(r['proposals']) for r in rows), 'action')}, now "
            + ", ".join(f"{r['proposals']} {r['status']}" for r in rows)
        ),
    ),
    (
        "approvals recorded in the window",
        "SELECT proposal_id, approver, ts_s FROM approvals WHERE ts_s >= ? AND ts_s <= ? ORDER BY ts_s",
        lambda rows: (
            f"Approved: {plural(len(rows), 'signature')}: "
            + _names(rows, lambda r: f"{r['proposal_id']} by {r['approver']}")
        ),
    ),
    (
        "rejections recorded in the window",
        "SELECT proposal_id, rejected_by, reason, ts_s FROM rejections WHERE ts_s >= ? AND ts_s <= ? ORDER BY ts_s",
        lambda rows: (
            f"Rejected: {plural(len(rows), 'proposal')}: "
            + _names(rows, lambda r: f"{r['proposal_id']} by {r['rejected_by']} ({str(r['reason'])[:60]})")
        ),
    ),
    (
        "actions executed in the window",
        "SELECT proposal_id, kind, target, status, ts_s FROM executions WHERE ts_s >= ? AND ts_s <= ? ORDER BY ts_s",
        lambda rows: (
            f"Ran: {plural(len(rows), 'action')}: "
            + _names(rows, lambda r: f"{r['kind']} {r['target']} ({r['status']}, {r['proposal_id']})")
        ),
    ),
    (
        "the verdicts on executed actions given in the window",
        "SELECT proposal_id, verdict, detail, checked_ts_s FROM action_outcomes WHERE checked_ts_s >= ? "
        "AND checked_ts_s <= ? ORDER BY checked_ts_s",
        lambda rows: (
            f"Judged: {plural(len(rows), 'action')}: "
            + _names(rows, lambda r: f"{r['proposal_id']} {r['verdict']}: {str(r['detail'])[:80]}")
        ),
    ),
    (
        "GPU events (XID, ECC) in the window, per GPU and kind",
        "SELECT gpu, kind, xid, count(*) AS events, min(ts_s) AS first_ts_s FROM gpu_events WHERE ts_s >= ? "
        "AND ts_s <= ? GROUP BY gpu, kind, xid ORDER BY min(ts_s), gpu",
        lambda rows: (
            f"GPU events: {plural(sum(int(r['events']) for r in rows), 'event')}: "
            + _names(
                rows,
                lambda r: (
                    f"{r['gpu']} "
                    + (f"XID {r['xid']}" if r["xid"] is not None else str(r["kind"]))
                    + f" x{r['events']} from {when(r['first_ts_s'])}"
                ),
            )
        ),
    ),
    (
        "facility power caps set or cleared in the window",
        "SELECT scope, kind, budget_kw, ts_s FROM dcim_signals WHERE ts_s >= ? AND ts_s <= ? ORDER BY ts_s, scope",
        lambda rows: (
            f"Facility: {plural(len(rows), 'DCIM signal')}: "
            + _names(
                rows,
                lambda r: (
                    f"{r['kind']} on {r['scope']}"
                    + (f" at {r['budget_kw']:g} kW" if r["budget_kw"] is not None else "")
                    + f" at {when(r['ts_s'])}"
                ),
            )
        ),
    ),
    (
        "maintenance windows and silences begun in the window",
        "SELECT window_id, kind, scope, target, starts_ts_s FROM maintenance WHERE starts_ts_s >= ? "
        "AND starts_ts_s <= ? ORDER BY starts_ts_s",
        lambda rows: (
            f"Maintenance: {plural(len(rows), 'window')} began: "
            + _names(rows, lambda r: f"{r['window_id']} {r['kind']} on {r['scope']} {r['target']}")
        ),
    ),
)
STEPS_SQL = (
    "SELECT step_id, title, status, note, updated_ts_s FROM plan_steps WHERE updated_ts_s >= ? "
    "AND updated_ts_s <= ? ORDER BY updated_ts_s, step_id"
)
HOTTEST_SQL = (
    "SELECT gpu, round(max(temp_c), 1) AS max_temp_c, round(avg(temp_c), 1) AS mean_temp_c, "
    f"count(*) FILTER (WHERE (clocks_event_reasons & {THROTTLE}) != 0) AS throttled_samples "
    "FROM gpu_samples WHERE ts_s >= ? AND ts_s <= ? GROUP BY gpu ORDER BY max(temp_c) DESC, gpu LIMIT 3"
)


def changes(store: Store, start_ts_s: float, end_ts_s: float) -> Findings:
    """What changed in [start, end], one line per kind of change, each cited; "nothing" said as such."""
    found = Findings()
    params = [start_ts_s, end_ts_s]
    facts = list(FACTS)
    if has_table(store, "plan_steps"):
        facts.append(
            (
                "plan steps that changed in the window",
                STEPS_SQL,
                lambda rows: (
                    f"Plans: {plural(len(rows), 'step')} moved: "
                    + _names(rows, lambda r: f"{r['step_id']} '{r['title']}' now {r['status']}")
                ),
            )
        )
    for claim, sql, text in facts:
        rows = store.query(sql, params)
        if rows:
            found.lines.append(text(rows) + ".")
            found.fact(claim, sql, params, rows)
    if not found.lines:
        found.lines.append(
            "Nothing changed: no incident opened or resolved, nothing proposed, decided or run."
        )
    rows = store.query(HOTTEST_SQL, params)
    if rows:
        found.lines.append("The hottest GPUs in this window:")
        found.lines.extend(
            f"  {r['gpu']}: max {r['max_temp_c']:g} °C, mean {r['mean_temp_c']:g} °C, "
            f"{plural(int(r['throttled_samples']), 'throttled sample')}"
            for r in rows
        )
        found.fact("the hottest GPUs in the window", HOTTEST_SQL, params, rows)
    else:
        found.lines.append("No GPU samples in this window.")
    return found
