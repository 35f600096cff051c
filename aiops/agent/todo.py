"""What to do now, from stored rows: the plan steps that wait for a person (one signature approves a step with
all its targets) and the pending proposals outside any step, grouped by the open incident they remedy, most
urgent incident first (aiops/agent/situation.py), each with the command that approves it; proposals whose
incident is no longer open come last, as candidates to reject.

Plans (aiops/plans, tables `plans` and `plan_steps`) are read where the workspace has them; a workspace from
before them lists proposals only. Expiry is the wall clock's (a proposal's `expires_ts_s` is).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from aiops.agent.findings import Findings
from aiops.agent.oncall import cite_open
from aiops.agent.situation import OpenIncident, has_table, open_incidents
from aiops.models import Diagnosis
from aiops.store import Store
from aiops.text import plural

PENDING_SQL = (
    "SELECT proposal_id, kind, target, incident_id, physical FROM proposals WHERE status = 'pending' "
    "AND (expires_ts_s IS NULL OR expires_ts_s > ?) AND created_ts_s <= ? ORDER BY created_ts_s, proposal_id"
)
STEPS_SQL = (
    "SELECT s.step_id, s.step_no, s.title, s.kind, s.risk, s.targets, s.status, s.effect, s.cost, s.note, "
    "s.hold, p.plan_id, p.incident_id FROM plan_steps s JOIN plans p ON p.plan_id = s.plan_id "
    "WHERE p.status = 'open' AND s.status IN ('proposed', 'waiting') ORDER BY p.plan_id, s.step_no"
)


@dataclass
class _Item:
    """What waits for people about one incident."""

    # each open plan's proposed steps (role "approve"), then its next waiting step: what follows if they do not
    # work ("then"), or, with none proposed, the step a person may ask for now ("ask")
    steps: list[dict[str, Any]] = field(default_factory=list)
    proposals: list[dict[str, Any]] = field(default_factory=list)


def todo(
    store: Store, diagnoses: list[Diagnosis], horizon_ts_s: float | None, now_ts_s: float | None = None
) -> Findings:
    found = Findings()
    now = time.time() if now_ts_s is None else now_ts_s
    incidents = open_incidents(store, diagnoses, horizon_ts_s)
    by_incident: dict[str, _Item] = {}
    for incident_id, entries in _plan_steps(store, found).items():
        by_incident.setdefault(incident_id, _Item()).steps.extend(entries)
    in_steps: set[str] = set()
    if has_table(store, "proposals", "step_id"):
        in_steps = {
            str(r["proposal_id"])
            for r in store.query(
                "SELECT proposal_id FROM proposals WHERE step_id IS NOT NULL AND status = 'pending'"
            )
        }
    params = [now, now]
    pending = [r for r in store.query(PENDING_SQL, params) if str(r["proposal_id"]) not in in_steps]
    if pending:
        found.fact("the pending proposals outside plan steps", PENDING_SQL, params, pending)
    for r in pending:
        by_incident.setdefault(str(r["incident_id"] or ""), _Item()).proposals.append(r)
    roles = [s["role"] for i in by_incident.values() for s in i.steps]
    waiting, asks = roles.count("approve"), roles.count("ask")
    if not waiting and not asks and not pending:
        found.lines.append("Nothing waits for you: no plan step and no proposal is pending.")
        if incidents:
            found.lines.append(
                f"{plural(len(incidents), 'incident')} still open ('what's wrong'): "
                + ", ".join(i.label() for i in incidents[:6])
                + "."
            )
        return found
    what = [f"{plural(waiting, 'plan step')} to approve"] if waiting else []
    what += [f"{plural(asks, 'plan step')} to ask for"] if asks else []
    what += [plural(len(pending), "other proposal" if what else "proposal")] if pending else []
    found.lines.append(
        f"Waiting for you: {' and '.join(what)}, most urgent incident first (nothing physical runs without "
        "a person's signed approval):"
    )
    order = [i.incident_id for i in incidents]
    ranked = sorted(by_incident, key=lambda k: order.index(k) if k in order else len(order))
    labels = {i.incident_id: i for i in incidents}
    for n, key in enumerate(ranked, start=1):
        found.lines.append(f"{n}. {_heading(key, labels.get(key))}")
        found.lines.extend(_item_lines(by_incident[key], open_now=key in labels or not key))
    if horizon_ts_s is not None:
        cite_open(
            store,
            found,
            [labels[k] for k in ranked if k in labels],
            horizon_ts_s,
            "their incidents, open now",
        )
    return found


def _plan_steps(store: Store, found: Findings) -> dict[str, list[dict[str, Any]]]:
    """Incident -> its open plans' steps that wait for people, each with its role (see `_Item`)."""
    rows = store.query(STEPS_SQL) if has_table(store, "plan_steps") else []
    if rows:
        found.fact("the open plans' steps proposed or waiting", STEPS_SQL, [], rows)
    plans: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        plans.setdefault(str(row["plan_id"]), []).append(row)
    out: dict[str, list[dict[str, Any]]] = {}
    for steps in plans.values():
        proposed = [{**s, "role": "approve"} for s in steps if s["status"] == "proposed"]
        waiting = [s for s in steps if s["status"] == "waiting"]
        following = [{**waiting[0], "role": "then" if proposed else "ask"}] if waiting else []
        out.setdefault(str(steps[0]["incident_id"]), []).extend([*proposed, *following])
    return out


def _heading(incident_id: str, incident: OpenIncident | None) -> str:
    if not incident_id:
        return "not tied to an incident:"
    if incident is None:
        return f"{incident_id}, no longer open: reject what it no longer needs (/reject ID REASON)"
    return f"{incident.label()}: {incident.cause or incident.title}"


def _item_lines(item: _Item, *, open_now: bool) -> list[str]:
    out = []
    for s in item.steps:
        targets = list(s["targets"] or [])
        shown = ", ".join(targets[:4]) + (f" (+{len(targets) - 4})" if len(targets) > 4 else "")
        if s["role"] == "then":
            out.append(
                f"   then, if it does not work: step {s['step_no']} '{s['title']}' ({s['kind']}, waiting)"
            )
            continue
        if s["role"] == "ask":
            why = s["hold"] or s["note"]
            out.append(
                f"   plan {s['plan_id']}: nothing proposed; step {s['step_no']} '{s['title']}' ({s['kind']}, "
                f"{s['risk']}, {plural(len(targets), 'target')}: {shown}) waits" + (f": {why}" if why else "")
            )
            out.append(
                f"     ask for it now (it files its targets for approval): aiops plans propose {s['step_id']}"
            )
            continue
        out.append(
            f"   plan {s['plan_id']} step {s['step_no']} '{s['title']}' ({s['risk']}, "
            f"{plural(len(targets), 'target')}: {shown})"
        )
        out.append(f"     expected: {s['effect']}; cost: {s['cost']}")
        out.append(
            f"     approve it (one signature for every target): aiops actions approve {s['step_id']} --key FILE"
        )
    for p in item.proposals:
        risk = "physical" if p["physical"] else "digital"
        verb = "/approve" if open_now else "/reject"
        out.append(f"   {p['proposal_id']}: {p['kind']} {p['target']} ({risk}): {verb} {p['proposal_id']}")
    return out


PLAN_SQL = (
    "SELECT p.plan_id, s.step_id, s.step_no, s.title, s.kind, s.risk, s.status FROM plans p "
    "JOIN plan_steps s ON s.plan_id = p.plan_id WHERE p.incident_id = ? AND p.status = 'open' ORDER BY s.step_no"
)


def plan_lines(store: Store, incident_id: str) -> list[str]:
    """The incident's open plan, one line a step with what a person does next (approve or ask for it)."""
    rows = store.query(PLAN_SQL, [incident_id]) if has_table(store, "plans") else []
    if not rows:
        return []
    proposed = any(r["status"] == "proposed" for r in rows)
    first_waiting = next((r["step_id"] for r in rows if r["status"] == "waiting"), None)
    out = [f"Plan {rows[0]['plan_id']} (least disruptive first; 'what should I do' ranks every plan):"]
    for r in rows:
        todo_now = ""
        if r["status"] == "proposed":
            todo_now = f": aiops actions approve {r['step_id']} --key FILE"
        elif r["step_id"] == first_waiting and not proposed:
            todo_now = f": ask for it with aiops plans propose {r['step_id']}"
        out.append(f"  step {r['step_no']} '{r['title']}' ({r['kind']}, {r['risk']}) {r['status']}{todo_now}")
    return out
