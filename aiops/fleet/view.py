"""One view across fleet shards (docs/FLEET.md, "One view across shards"): every shard's `aiops fleet` keeps its
own workspace, incidents, plans and pages; this reads each shard's own JSON API (`GET /api/incidents`,
`GET /api/proposals`, with the shards' bearer token) and shows them once, whichever shard found them. No store of
its own: the view is the shards' answers of the moment, merged.

The rule for one condition two shards both see (a facility cap over the site, fleet-wide drift): incidents of
*different* shards whose top hypothesis names the same cause on the same component, and whose times overlap
(each opened before the other was resolved), are one incident in the view. It keeps the id of the one opened
first (ties: the shard listed first), so the id people see does not change when a later shard joins, and lists
every shard's own id under `seen_by`; its page is the first shard's decision, the others' are `duplicate_pages`
(shards that know each other page such a condition once between them: aiops/fleet/peer_pages.py).
Incidents of one shard are never merged here: that shard's grouping stands. A shard that does not answer is
named in `shards` with its error, and the view still shows the others. Each shard lists at most its `limit`
incidents (the open ones first, then the newest), each with `component_count` and its first components
(aiops/service/incident_list.py); `shards` says how many it holds (`total`) and whether its list was `cut`.
"""

from __future__ import annotations

import html
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiops import outbound
from aiops.errors import OutboundError

MAX_ANSWER_BYTES = 64 << 20


@dataclass(frozen=True)
class ShardAnswer:
    """What one shard's API said (or why it said nothing)."""

    shard: str
    url: str
    incidents: list[dict[str, Any]] = field(default_factory=list)
    proposals: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    total: int = 0  # the incidents the shard holds, listed or not (its answer lists at most `limit`)


def ask_shard(shard: str, url: str, token: str | None, timeout_s: float) -> ShardAnswer:
    """One shard's incidents and proposals from its /api."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    base = url.rstrip("/")
    try:
        incidents = outbound.get(
            f"{base}/api/incidents", headers=headers, timeout_s=timeout_s, max_bytes=MAX_ANSWER_BYTES
        ).raise_for_status()
        proposals = outbound.get(
            f"{base}/api/proposals", headers=headers, timeout_s=timeout_s, max_bytes=MAX_ANSWER_BYTES
        ).raise_for_status()
        found, filed = incidents.json(), proposals.json()
    except OutboundError as exc:
        return ShardAnswer(shard, base, error=str(exc))
    if not isinstance(found, dict) or not isinstance(filed, dict):
        return ShardAnswer(shard, base, error="the answer is not a JSON object")
    listed = [i for i in found.get("incidents") or [] if isinstance(i, dict)]
    total = found.get("total")
    return ShardAnswer(
        shard,
        base,
        listed,
        [p for p in filed.get("proposals") or [] if isinstance(p, dict)],
        total=total if isinstance(total, int) and not isinstance(total, bool) else len(listed),
    )


def _cause(incident: Mapping[str, Any]) -> tuple[str, str] | None:
    top = incident.get("top_hypothesis")
    if not isinstance(top, dict) or not top.get("root_cause") or not top.get("component"):
        return None
    return str(top["root_cause"]), str(top["component"])


def _ts(value: Any, default: float) -> float:
    """A time a shard gave, or `default` when it gave none (or something that is not a number)."""
    try:
        return float(value) if value is not None else default
    except (TypeError, ValueError):
        return default


def _overlap(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    def span(incident: Mapping[str, Any]) -> tuple[float, float]:
        return _ts(incident.get("opened_ts_s"), 0.0), _ts(incident.get("resolved_ts_s"), float("inf"))

    (a0, a1), (b0, b1) = span(a), span(b)
    return a0 <= b1 and b0 <= a1


def merge(answers: Sequence[ShardAnswer]) -> dict[str, Any]:
    """The shards' incidents and proposals once (module doc), newest first."""
    order = {answer.shard: k for k, answer in enumerate(answers)}
    seen: list[tuple[str, dict[str, Any]]] = sorted(
        ((a.shard, i) for a in answers for i in a.incidents),
        key=lambda pair: (_ts(pair[1].get("opened_ts_s"), 0.0), order[pair[0]]),
    )
    merged: list[dict[str, Any]] = []
    ids: dict[tuple[str, str], str] = {}  # (shard, its incident id) -> the view's id
    for shard, incident in seen:
        cause = _cause(incident)
        same = next(
            (
                m
                for m in merged
                if cause is not None
                and _cause(m) == cause
                and shard not in {s["shard"] for s in m["seen_by"]}
                and _overlap(m, incident)
            ),
            None,
        )
        own = {
            "shard": shard,
            "incident_id": incident.get("incident_id"),
            "opened_ts_s": incident.get("opened_ts_s"),
        }
        if same is None:
            merged.append({**incident, "shard": shard, "seen_by": [own], "duplicate_pages": []})
            ids[(shard, str(incident.get("incident_id")))] = str(incident.get("incident_id"))
            continue
        same["seen_by"].append(own)
        ids[(shard, str(incident.get("incident_id")))] = str(same.get("incident_id"))
        if incident.get("status") == "open":
            same["status"], same["resolved_ts_s"] = "open", None
        elif same.get("resolved_ts_s") is not None:
            same["resolved_ts_s"] = max(
                _ts(same["resolved_ts_s"], 0.0), _ts(incident.get("resolved_ts_s"), 0.0)
            )
        if isinstance(incident.get("paging"), dict):
            same["duplicate_pages"].append({"shard": shard, **incident["paging"]})
    proposals = []
    for answer in answers:
        for proposal in answer.proposals:
            incident_id = proposal.get("incident_id")
            view_id = ids.get((answer.shard, str(incident_id))) if incident_id else None
            if view_id is not None and view_id != str(incident_id):
                continue  # a plan for a condition another shard found first: that shard's plan stands
            proposals.append({**proposal, "shard": answer.shard})
    return {
        "shards": [
            {
                "shard": a.shard,
                "url": a.url,
                "ok": not a.error,
                "error": a.error,
                "incidents": len(a.incidents),
                "total": max(a.total, len(a.incidents)),
                "cut": a.total > len(a.incidents),
            }
            for a in answers
        ],
        "incidents": sorted(merged, key=lambda m: _ts(m.get("opened_ts_s"), 0.0), reverse=True),
        "proposals": proposals,
    }


def _listed(shard: Mapping[str, Any]) -> str:
    """How many incidents a shard listed, and of how many where it cut its list."""
    if shard.get("cut"):
        return f"{shard['incidents']} of {shard['total']} incidents listed (the open ones, then the newest)"
    return f"{shard['incidents']} incidents"


def render_html(view: Mapping[str, Any]) -> str:
    """The view as one page for people: shards, incidents (with the shards that saw each, each id a link to
    that shard's console), proposals. Every value from a shard is escaped: telemetry reaches it."""

    def cell(value: Any) -> str:
        return f"<td>{html.escape('' if value is None else str(value))}</td>"

    urls = {str(s["shard"]): str(s["url"]) for s in view["shards"]}

    def link(shard: str, incident_id: Any) -> str:
        """The incident on its shard's own console (where people approve, silence and ask)."""
        shown = html.escape(f"{shard}: {incident_id}")
        if shard not in urls or not str(incident_id):
            return shown
        target = f"{urls[shard]}/incidents/{urllib.parse.quote(str(incident_id), safe='')}"
        return f'<a href="{html.escape(target)}">{shown}</a>'

    rows = [
        "<tr>"
        + cell(i.get("incident_id"))
        + cell(i.get("status"))
        + cell(i.get("severity"))
        + cell((i.get("top_hypothesis") or {}).get("root_cause"))
        + cell((i.get("top_hypothesis") or {}).get("component"))
        + cell(i.get("component_count", len(i.get("components") or [])))
        + "<td>"
        + ", ".join(link(s["shard"], s["incident_id"]) for s in i["seen_by"])
        + "</td>"
        + cell("yes" if (i.get("paging") or {}).get("pages") else "no")
        + "</tr>"
        for i in view["incidents"]
    ]
    shards = [
        "<li>" + html.escape(f"{s['shard']} ({s['url']}): " + (s["error"] or _listed(s))) + "</li>"
        for s in view["shards"]
    ]
    plans = [
        "<tr>"
        + "".join(cell(p.get(k)) for k in ("proposal_id", "shard", "incident_id", "kind", "target", "status"))
        + "</tr>"
        for p in view["proposals"]
    ]
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>aiops fleet: every shard</title></head><body>"
        "<h1>Every shard</h1><ul>" + "".join(shards) + "</ul>"
        "<h2>Incidents</h2><table><tr><th>id</th><th>status</th><th>severity</th><th>cause</th><th>component</th>"
        "<th>components</th><th>seen by</th><th>pages</th></tr>" + "".join(rows) + "</table>"
        "<h2>Proposals</h2><table><tr><th>id</th><th>shard</th><th>incident</th><th>kind</th><th>target</th>"
        "<th>status</th></tr>" + "".join(plans) + "</table></body></html>"
    )
