"""How the operator's day's records are matched to the twin's faults beyond the incidents' attribution
(bench/oncall_truth.py): the fault a page named when it went out, whether a proposal undoes an executed action,
whether a page or an incident is about one of the day's scripted losses of sight (a node agent lost, the fleet's
store unreachable), and how long each went unsaid."""

from __future__ import annotations

import math
import re
from typing import Any

from bench.oncall_state import Proposal
from bench.oncall_truth import Attribution, Executed, Ground, Incident, gpus_of, nodes_of

NOT_ACTIONABLE = frozenset({"open_ticket", "ack_alert", "rerun_check"})  # they change nothing in the cluster
UNDOES = {"set_power_limit": "reset_power_limit", "migrate_job": "migrate_job"}
_TOP_CAUSE = re.compile(r"top cause: (\w+) on (\S+)")


def named(summary: str, at_s: float, truth: Ground, end_s: float) -> Attribution | None:
    """The fault a page named when it went out (its summary's top cause: the label on the fault's hardware, the
    fault in force then), whatever the incident's diagnosis became later; None when it names none."""
    found = _TOP_CAUSE.search(summary)
    if found is None:
        return None
    label, component = found.groups()
    nodes = nodes_of(component, truth.world, truth.jobs_at(at_s))
    for f in truth.faults:
        low, high = truth.window(f, end_s)
        if f.kind == label and nodes & f.own_nodes and low <= at_s <= high:
            return Attribution("fault", f.index)
    return None


def undoes(p: Proposal, action: Executed, truth: Ground) -> bool:
    world = truth.world
    if action.kind == "migrate_job":
        return p.target == action.parameters.get("to") and p.parameters.get("to") == action.target
    jobs = truth.jobs_at(p.created_s)
    return bool(gpus_of(p.target, world, jobs) & gpus_of(action.target, world, jobs))


BLIND_WORDS = ("prometheus", "source", "victoria", "stale", "blind", "unreachable")


def says(event: dict[str, Any], at_s: float, key: tuple[str, str], summary: str, scrape_s: float) -> bool:
    """Whether a page opened at `at_s` is about the blind spell `event`: during it (or two scrapes after), naming
    the lost agent's node (and that it is lost), or the source that went blind."""
    start, end = float(event["start_s"]), float(event["end_s"])
    if not start <= at_s <= end + 2 * scrape_s:
        return False
    text = f"{key[0]} {key[1]} {summary}".lower()
    if event["what"] == "node_agent_lost":
        named = re.search(rf"\b{re.escape(str(event['component']))}(?![/\w])", text)
        return bool(named) and ("lost" in text or "agent" in text)
    return any(w in text for w in BLIND_WORDS)


def says_incident(event: dict[str, Any], incident: Incident, scrape_s: float) -> bool:
    """Whether an incident is the condition of the blind spell `event` (its times are the data's, which the fleet
    reads up to two scrapes behind: it may open that much before the spell)."""
    start = float(event["start_s"])
    if incident.opened_s < start - 2 * scrape_s:
        return False
    at_s = max(incident.opened_s, start)
    return says(event, at_s, (incident.tier, incident.incident_id), incident.title, scrape_s)


def blind_spells(events: list[dict[str, Any]], pages: list[Any], scrape_s: float) -> list[dict[str, Any]]:
    """Per blind spell: how long until a page said so (the whole spell when none did), from the spell's start
    (`blind_s`: the agent killed, the store gone) and from the last scrape before it (`after_last_sample_s`: the
    newest sample the fleet could read, the scrapes being at multiples of `scrape_s` on the day's clock)."""
    out = []
    for event in events:
        said = next(
            (at_s for at_s, key, _w, _f, summary in pages if says(event, at_s, key, summary, scrape_s)), None
        )
        start, end = float(event["start_s"]), float(event["end_s"])
        last_sample_s = (math.ceil(start / scrape_s) - 1) * scrape_s
        until = said if said is not None else end
        out.append(
            {
                **event,
                "paged_at_s": said,
                "blind_s": round(until - start, 1),
                "last_sample_s": last_sample_s,
                "after_last_sample_s": round(until - last_sample_s, 1),
            }
        )
    return out


__all__ = [
    "BLIND_WORDS",
    "NOT_ACTIONABLE",
    "UNDOES",
    "blind_spells",
    "named",
    "says",
    "says_incident",
    "undoes",
]
