"""Report sections about the fleet's safety and memory: the components to take out of service (the lemon
ranking at the period's end, aiops/memory/lemon.py, with why in numbers), and what the circuit breaker did in the
period (proposals that waited on it, signed overrides, rollbacks filed)."""

from __future__ import annotations

import json

from aiops.memory.history import DAY_S, DEFAULT_WINDOW_S
from aiops.memory.lemon import HALF_LIFE_S, OUT_OF_SERVICE_SCORE, lemon_ranking
from aiops.report.model import Section
from aiops.report.period import Period
from aiops.report.sections import _t
from aiops.report.text import clean, utc
from aiops.store import Store

MAX_ROWS = 20


def components(store: Store, period: Period) -> Section | None:
    """The lemon ranking as of the period's end (30 days of history); None when nothing failed."""
    racks = frozenset(
        str(r["component"]) for r in store.query("SELECT component FROM topology WHERE kind = 'rack'")
    )
    ranking = lemon_ranking(store, now_ts_s=period.end_ts_s, racks=racks, limit=MAX_ROWS)
    if not ranking:
        return None
    section = Section("components", "Components to watch or take out of service")
    section.lines.append(
        "Lemon score: each fault of the part itself counts 1, twice when it came back after a reset or reboot, "
        f"halved every {HALF_LIFE_S / DAY_S:g} days over the last {DEFAULT_WINDOW_S / DAY_S:g} days; a remedy "
        "verified as failed adds "
        f"0.5. At {OUT_OF_SERVICE_SCORE:g} or more: take it out of service. A GPU whose fault came back after "
        "two repairs gets an RMA ticket instead of another reset."
    )
    section.tables.append(
        _t(
            "Components ranked by lemon score (highest first)",
            (
                "component",
                "score",
                "faults",
                "back after a repair",
                "remedies failed",
                "verdict",
                "last fault",
            ),
            [
                (
                    s.component,
                    f"{s.score:.1f}",
                    s.fault_count,
                    s.repeats,
                    s.failed_outcomes,
                    "take out of service" if s.take_out else "watch",
                    utc(s.last_fault_ts_s),
                )
                for s in ranking
            ],
        )
    )
    return section


def safety(store: Store, period: Period) -> Section | None:
    """Breaker overrides, waits on the breaker and rollbacks in the period; None when there were none."""
    span = [period.start_ts_s, period.end_ts_s]
    overrides = store.query(
        "SELECT ts_s, actor, payload FROM audit_log WHERE event = 'breaker_override' AND ts_s >= ? AND ts_s < ? "
        "ORDER BY seq",
        span,
    )
    waits = store.query(  # stopped by the breaker in the period (filed or run), and what became of them
        "SELECT p.proposal_id, p.kind, p.target, p.status, p.message FROM proposals p WHERE p.proposal_id IN "
        "(SELECT proposal_id FROM audit_log WHERE ts_s >= ? AND ts_s < ? AND ("
        "(event = 'execution' AND json_extract_string(payload, '$.rule') = 'breaker') OR "
        "(event = 'validation' AND starts_with(json_extract_string(payload, '$.message'), 'breaker:')))) "
        "ORDER BY p.created_ts_s, p.proposal_id",
        span,
    )
    rollbacks = store.query(
        "SELECT proposal_id, kind, target, status, origin FROM proposals WHERE origin LIKE 'rollback:%' "
        "AND created_ts_s >= ? AND created_ts_s < ? ORDER BY created_ts_s",
        span,
    )
    if not (overrides or waits or rollbacks):
        return None
    section = Section("safety", "Circuit breaker and rollbacks")
    section.lines.append(
        f"{len(waits)} proposal(s) waited on the circuit breaker, {len(overrides)} signed override(s), "
        f"{len(rollbacks)} rollback(s) filed."
    )
    if overrides:
        rows = []
        for r in overrides[:MAX_ROWS]:
            data = json.loads(r["payload"])
            rows.append(
                (utc(r["ts_s"]), r["actor"], data.get("target"), data.get("count"), data.get("reason"))
            )
        section.tables.append(_t("Signed overrides", ("when", "by", "target", "more nodes", "why"), rows))
    if waits:
        section.tables.append(
            _t(
                "Stopped by the breaker (their status now: approved or pending still wait)",
                ("proposal", "kind", "target", "status", "why"),
                [
                    (r["proposal_id"], r["kind"], r["target"], r["status"], clean(r["message"], 200))
                    for r in waits[:MAX_ROWS]
                ],
            )
        )
    if rollbacks:
        section.tables.append(
            _t(
                "Rollbacks filed",
                ("proposal", "restores with", "target", "status", "of"),
                [
                    (
                        r["proposal_id"],
                        r["kind"],
                        r["target"],
                        r["status"],
                        str(r["origin"]).removeprefix("rollback:"),
                    )
                    for r in rollbacks[:MAX_ROWS]
                ],
            )
        )
    return section
