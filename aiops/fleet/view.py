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
named in `shards` with its error, and the view still shows the others. Each shard lists at most `LIST_LIMIT`
incidents and proposals (the open ones first, then the newest), each incident with `component_count` and its
first components (aiops/service/incident_list.py, proposal_list.py); `shards` says how many it holds (`total`,
`proposals_total`) and whether a list was `cut`. While a shard's flush holds its workspace it answers from its
read before (`stale`, `as_of_ts_s`), or, with none to answer from, 503-busy: `busy` names those lists and
`busy_since_ts_s` when the hold began, and the shard is shown as busy, not as silent.
"""

from __future__ import annotations

import html
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from aiops import outbound
from aiops.errors import OutboundError

MAX_ANSWER_BYTES = 64 << 20
# what the view asks each list for: the shards' default, which each reads again within its flush (Api.warm in
# aiops/service/api.py), so a shard whose flush holds its workspace answers it from that read
LIST_LIMIT = 200


@dataclass(frozen=True)
class ShardAnswer:
    """What one shard's API said (or why it said nothing)."""

    shard: str
    url: str
    incidents: list[dict[str, Any]] = field(default_factory=list)
    proposals: list[dict[str, Any]] = field(default_factory=list)
    error: str = ""
    total: int = 0  # the incidents the shard holds, listed or not (its answer lists at most `limit`)
    proposals_total: int = 0  # the same for its proposals
    stale: bool = False  # a list answered from the shard's read before its flush took the workspace
    as_of_ts_s: float | None = None  # when the oldest of its answers was read (the shard's clock)
    busy: tuple[
        str, ...
    ] = ()  # the lists it answered 503-busy: its flush holds it, nothing read to answer from
    busy_since_ts_s: float | None = None  # when that hold began (the shard's word)


def _count(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _ask_list(url: str, headers: dict[str, str], timeout_s: float) -> dict[str, Any]:
    """One list's answer as a JSON object; a shard's 503-busy answer (aiops/service/kept_answers.py) as it is,
    `busy` true; an OutboundError for anything else that is not an answer."""
    reply = outbound.get(url, headers=headers, timeout_s=timeout_s, max_bytes=MAX_ANSWER_BYTES)
    if reply.status == 503:
        said = reply.json()
        if isinstance(said, dict) and said.get("busy") is True:
            return said
    found = reply.raise_for_status().json()
    if not isinstance(found, dict):
        raise reply.error("the answer is not a JSON object")
    return found


def ask_shard(shard: str, url: str, token: str | None, timeout_s: float) -> ShardAnswer:
    """One shard's incidents and proposals from its /api, each list bounded (`LIST_LIMIT`)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    base = url.rstrip("/")
    try:
        found = _ask_list(f"{base}/api/incidents?limit={LIST_LIMIT}", headers, timeout_s)
        filed = _ask_list(f"{base}/api/proposals?limit={LIST_LIMIT}", headers, timeout_s)
    except OutboundError as exc:
        return ShardAnswer(shard, base, error=str(exc))
    answered = {
        name: a for name, a in (("incidents", found), ("proposals", filed)) if a.get("busy") is not True
    }
    busy = tuple(name for name in ("incidents", "proposals") if name not in answered)
    since = [_ts(a.get("busy_since_ts_s"), 0.0) for a in (found, filed) if a.get("busy") is True]
    read_at = [_ts(a.get("as_of_ts_s"), 0.0) for a in answered.values() if a.get("as_of_ts_s") is not None]
    listed = (
        [i for i in found.get("incidents") or [] if isinstance(i, dict)] if "incidents" in answered else []
    )
    plans = (
        [p for p in filed.get("proposals") or [] if isinstance(p, dict)] if "proposals" in answered else []
    )
    return ShardAnswer(
        shard,
        base,
        listed,
        plans,
        total=_count(found.get("total"), len(listed)) if "incidents" in answered else 0,
        proposals_total=_count(filed.get("total"), len(plans)) if "proposals" in answered else 0,
        stale=any(a.get("stale") is True for a in answered.values()),
        as_of_ts_s=min(read_at) if read_at else None,
        busy=busy,
        busy_since_ts_s=min((s for s in since if s > 0), default=None),
    )


def ask_shards(shards: Mapping[str, str], token: str | None, timeout_s: float) -> list[ShardAnswer]:
    """Every shard asked at once (a busy shard's lists each wait ~2 s before they answer from a kept read: one
    after another, eight shards would add up), answers in the shards' order."""
    if not shards:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(shards)), thread_name_prefix="fleet-view") as pool:
        asked = [pool.submit(ask_shard, name, url, token, timeout_s) for name, url in shards.items()]
        return [future.result() for future in asked]


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
                "ok": not a.error and not a.busy,
                "error": a.error,
                "incidents": len(a.incidents),
                "total": max(a.total, len(a.incidents)),
                "cut": a.total > len(a.incidents),
                "proposals": len(a.proposals),
                "proposals_total": max(a.proposals_total, len(a.proposals)),
                "proposals_cut": a.proposals_total > len(a.proposals),
                "stale": a.stale,
                "as_of_ts_s": a.as_of_ts_s,
                "busy": list(a.busy),
                "busy_since_ts_s": a.busy_since_ts_s,
            }
            for a in answers
        ],
        "incidents": sorted(merged, key=lambda m: _ts(m.get("opened_ts_s"), 0.0), reverse=True),
        "proposals": proposals,
    }


def _utc(ts_s: Any) -> str:
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(ts_s)))
    except (TypeError, ValueError, OverflowError, OSError):
        return "a time not known"


def _listed(shard: Mapping[str, Any]) -> str:
    """What a shard said: how many incidents and proposals it listed (of how many, where it cut a list), whether
    a list is from its read before its flush took the workspace, and which it could not answer for that."""
    said = []
    if "incidents" not in shard.get("busy", []):
        said.append(
            f"{shard['incidents']} of {shard['total']} incidents listed (the open ones, then the newest)"
            if shard.get("cut")
            else f"{shard['incidents']} incidents"
        )
    if "proposals" not in shard.get("busy", []):
        said.append(
            f"{shard.get('proposals', 0)} of {shard.get('proposals_total', 0)} proposals listed (the open ones, "
            "then the newest)"
            if shard.get("proposals_cut")
            else f"{shard.get('proposals', 0)} proposals"
        )
    if shard.get("stale"):
        said.append(f"stale: as of {_utc(shard.get('as_of_ts_s'))}, its flush holds its workspace")
    if shard.get("busy"):
        said.append(
            f"busy ({', '.join(shard['busy'])}): its flush has held its workspace since "
            f"{_utc(shard.get('busy_since_ts_s'))} and it had no earlier read to answer from; ask again shortly"
        )
    return "; ".join(said)


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
