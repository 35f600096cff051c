"""What the service's HTTP routes read (aiops/service/web.py): the JSON API over the workspace, and the
Alertmanager route's token and inbox."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiops.detect.recurrence import recurrence_of
from aiops.errors import ListBusy, MaintenanceError
from aiops.runtime.maintenance import close_window, open_window
from aiops.service.alerts_in import AlertInbox
from aiops.service.incident_list import (
    COMPONENTS_LISTED,
    DEFAULT_LIMIT,
    DETAIL_COMPONENTS,
    covering_components,
    incident_detail,
    incident_list,
)
from aiops.service.kept_answers import (
    BUSY_WAIT_S,
    KEPT_ANSWERS,
    RETRY_AFTER_S,
    Answer,
    KeptAnswers,
    Listing,
    Question,
)
from aiops.service.owner import OwnedWorkspace
from aiops.service.proposal_list import OPEN_STATUSES, proposal_list
from aiops.store import Store, Workspace
from aiops.store.coverage import coverage
from aiops.store.maintenance import MAX_WINDOW_S, windows

__all__ = ["BUSY_WAIT_S", "KEPT_ANSWERS", "WARM_EVERY_S", "AlertRoute", "Api"]

MAINTENANCE_FIELDS = ("scope", "target", "duration_s", "reason", "by", "kind")
# the default lists read again within the service's flush at most this often (`Api.warm`): a first question
# in a long flush is answered from that read, and a quiet node agent's flushes do not each pay for it
WARM_EVERY_S = 60.0


@dataclass(frozen=True)
class AlertRoute:
    """`POST /api/alertmanager`: the token Alertmanager must send, and where accepted alerts go."""

    token: str
    inbox: AlertInbox

    def __repr__(self) -> str:  # never the token
        return "AlertRoute(token=***)"


def _above(component: str) -> list[str]:
    """`component` and every component it lies under: host/gpu3 -> host/gpu3, host."""
    parts = component.split("/")
    return ["/".join(parts[:k]) for k in range(len(parts), 0, -1)]


def _with_node_incidents(
    incidents: list[dict[str, Any]],
    from_nodes: list[dict[str, Any]],
    components: dict[str, list[str]],
) -> dict[str, list[dict[str, Any]]]:
    """Fleet incident id -> the node incidents about its components (each node incident joins the newest fleet
    incident that covers it: the same component, or one it lies under; `components` holds each fleet incident's
    whole list, the list answer only its first few): one incident in the fleet's view. Set look-ups: a cap's
    incident of 5,000 components against every node's incident stays linear."""
    covering: list[tuple[str, set[str]]] = []
    for incident in reversed(incidents):
        incident_id = str(incident["incident_id"])
        top = (incident.get("top_hypothesis") or {}).get("component")
        whole = components.get(incident_id, incident.get("components") or [])
        covering.append((incident_id, {str(c) for c in [*whole, *([top] if top else [])] if c}))
    merged: dict[str, list[dict[str, Any]]] = {}
    for node_incident in from_nodes:
        above = _above(str(node_incident["component"]))
        for incident_id, covered in covering:
            if any(c in covered for c in above):
                merged.setdefault(incident_id, []).append(node_incident)
                break
    return merged


def _paging(store: Store, incident_ids: list[str]) -> dict[str, dict[str, Any]]:
    """incident id -> this tier's paging decision (aiops/service/pager.py): pages, reason, covered_by, window;
    of these incidents only."""
    rows = store.query(
        "SELECT incident_id, pages, reason, covered_by, window_id, paged_ts_s FROM incident_pages "
        "WHERE incident_id IN (SELECT unnest(?)) ORDER BY decided_ts_s",
        [incident_ids],
    )
    return {str(r["incident_id"]): {k: v for k, v in r.items() if k != "incident_id"} for r in rows}


def _node_incidents_fitted(answer: Answer, question: Question) -> Answer:
    """An incident list cut from a broader kept read (kept_answers.py), its node incidents fitted to the question:
    none for the open ones (that question reads none), else the newest `limit` of those apart. A node incident
    joined to an incident the smaller list leaves out stays out: the broader read had joined it."""
    if question.status == "open":
        answer = {k: v for k, v in answer.items() if k not in ("node_incidents", "node_incidents_total")}
        answer["incidents"] = [
            {k: v for k, v in i.items() if k not in ("node_incidents", "node_incident_count")}
            for i in answer["incidents"]
        ]
        return answer
    if "node_incidents" in answer:
        answer["node_incidents"] = answer["node_incidents"][-question.limit :]
    return answer


INCIDENTS = Listing(
    "incidents",
    frozenset({"open"}),
    lambda i: (float(i["opened_ts_s"]), str(i["incident_id"])),
    _node_incidents_fitted,
)
PROPOSALS = Listing(
    "proposals", frozenset(OPEN_STATUSES), lambda p: (float(p["created_ts_s"]), str(p["proposal_id"]))
)


class Api:
    """What the JSON API reads: the workspace (opened per request, through the service's own hold)."""

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self._kept_incidents = KeptAnswers(INCIDENTS)  # the list answers read last (kept_answers.py)
        self._kept_proposals = KeptAnswers(PROPOSALS)

    def incidents(self, limit: int = DEFAULT_LIMIT, *, open_only: bool = False) -> dict[str, Any]:
        """The bounded incident list (aiops/service/incident_list.py): at most `limit` incidents, each with its
        component count and first components, its top hypothesis and this tier's paging decision. While the
        service's own flush keeps the workspace longer than `BUSY_WAIT_S`, an answer from what was read before,
        marked `stale` (what the workspace held before the flush, as an answer asked a moment earlier would have
        been), or `ListBusy` (kept_answers.py); `as_of_ts_s` is when an answer was read."""
        question = Question(limit, "open" if open_only else "")
        return self._listed(
            self._kept_incidents, question, lambda store: self._incidents(store, limit, open_only)
        )

    def proposals(self, limit: int = DEFAULT_LIMIT, *, status: str = "") -> dict[str, Any]:
        """The bounded proposal list (aiops/service/proposal_list.py): at most `limit` proposals, the open ones
        first, of `status` ("" every status); while the flush keeps the workspace, as `incidents`."""
        return self._listed(
            self._kept_proposals, Question(limit, status), lambda store: self._proposals(store, limit, status)
        )

    def warm(self, store: Store) -> None:
        """The default lists read again with `store` (the flush's own hold: no other hold is counted) and kept,
        when their kept reads are older than `WARM_EVERY_S` or missing: a first question asked in the next long
        flush is answered from them (kept_answers.py)."""
        question = Question(DEFAULT_LIMIT)
        now = time.time()
        ages = [self._kept_incidents.as_of_ts_s(question), self._kept_proposals.as_of_ts_s(question)]
        if all(age is not None and now - age < WARM_EVERY_S for age in ages):
            return
        self._kept_incidents.keep(question, self._incidents(store, DEFAULT_LIMIT, False))
        self._kept_proposals.keep(question, self._proposals(store, DEFAULT_LIMIT, ""))

    def _listed(self, kept: KeptAnswers, question: Question, read: Callable[[Store], Answer]) -> Answer:
        with self.workspace.read_within(BUSY_WAIT_S) as store:
            if store is not None:
                return kept.keep(question, read(store))
        found = kept.stale(question)
        if found is not None:
            return found
        owned = self.workspace if isinstance(self.workspace, OwnedWorkspace) else None
        raise ListBusy(None if owned is None else owned.owner.held_since_ts_s, RETRY_AFTER_S)

    @staticmethod
    def _proposals(store: Store, limit: int, status: str) -> Answer:
        out = proposal_list(store, limit=limit, status=status)
        out["as_of_ts_s"] = time.time()
        out["stale"] = False
        return out

    def _incidents(self, store: Store, limit: int, open_only: bool) -> dict[str, Any]:
        out = incident_list(store, limit=limit, open_only=open_only)
        from_nodes = store.query(
            "SELECT * FROM node_incidents ORDER BY opened_ts_s, node, incident_id"
            + (" LIMIT 0" if open_only else "")
        )
        whole = (
            covering_components(
                store, [str(i["incident_id"]) for i in out["incidents"] if i["components_cut"]]
            )
            if from_nodes
            else {}
        )
        paging = _paging(store, [str(i["incident_id"]) for i in [*out["incidents"], *from_nodes]])
        active = windows(store, time.time())
        out["as_of_ts_s"] = time.time()
        out["stale"] = False
        for incident in out["incidents"]:
            incident["paging"] = paging.get(str(incident["incident_id"]))
        out["maintenance"] = [w.as_dict() for w in active]
        for node_incident in from_nodes:  # the fleet's word on each node agent's incident (covered or not)
            node_incident["paging"] = paging.get(str(node_incident["incident_id"]))
        if (
            from_nodes
        ):  # a fleet workspace: the node agents' own incidents, each with the fleet's one about it
            merged = _with_node_incidents(out["incidents"], from_nodes, whole)
            joined = {id(n) for m in merged.values() for n in m}
            apart = [n for n in from_nodes if id(n) not in joined]
            out["node_incidents"] = apart[-limit:]
            out["node_incidents_total"] = len(apart)
            for incident in out["incidents"]:
                joined_here = merged.get(str(incident["incident_id"]), [])
                incident["node_incidents"] = joined_here[-COMPONENTS_LISTED:]
                incident["node_incident_count"] = len(joined_here)
        return out

    def incident(
        self,
        incident_id: str,
        components_offset: int = 0,
        components_limit: int = DETAIL_COMPONENTS,
    ) -> dict[str, Any] | None:
        with self.workspace.read() as store:
            found = incident_detail(
                store, incident_id, components_offset=components_offset, components_limit=components_limit
            )
            if found is None:
                return None
            loop = {  # what the service knows it did about it (docs/SERVICE.md "What the service knows it did")
                "recurrence_of": recurrence_of(store, incident_id),
                "outcomes": store.query(
                    'SELECT proposal_id, step_id, verdict, "check", detail, checked_ts_s FROM action_outcomes '
                    "WHERE incident_id = ? ORDER BY checked_ts_s, proposal_id",
                    [incident_id],
                ),
            }
            paging = _paging(store, [incident_id]).get(incident_id)
        return {**found, "paging": paging, **loop}

    def coverage(self) -> dict[str, Any]:
        with self.workspace.read() as store:
            return coverage(store)

    # -- maintenance windows and silences (aiops/store/maintenance.py) ---------------------------------------
    def maintenance(self, every: bool = False) -> dict[str, Any]:
        now = time.time()
        with self.workspace.read() as store:
            found = windows(store, None if every else now)
        return {"windows": [{**w.as_dict(), "active": w.active(now)} for w in found]}

    def add_maintenance(self, body: Any) -> dict[str, Any]:
        """A window from the JSON body {scope, target, duration_s, reason, by, kind}; MaintenanceError says
        which field is wrong."""
        if not isinstance(body, dict) or set(body) - set(MAINTENANCE_FIELDS):
            raise MaintenanceError(f"a JSON object with the fields {', '.join(MAINTENANCE_FIELDS)}")
        duration = body.get("duration_s")
        if (
            isinstance(duration, bool)
            or not isinstance(duration, int | float)
            or not 0 < duration <= MAX_WINDOW_S
        ):
            raise MaintenanceError(f"duration_s: a number of seconds above 0, at most {MAX_WINDOW_S:.0f}")
        texts = {k: body.get(k, "") for k in ("scope", "target", "reason", "by")}
        if not all(isinstance(v, str) for v in texts.values()) or not isinstance(body.get("kind", ""), str):
            raise MaintenanceError("scope, target, reason, by and kind are strings")
        with self.workspace.write() as store:
            window = open_window(
                store,
                kind=str(body.get("kind") or "maintenance"),
                scope=str(texts["scope"]),
                target=str(texts["target"]),
                duration_s=float(duration),
                reason=str(texts["reason"]),
                by=f"api:{texts['by'] or 'unnamed'}",
            )
        return window.as_dict()

    def end_maintenance(self, window_id: str, by: str) -> dict[str, Any]:
        with self.workspace.write() as store:
            return close_window(store, window_id, by=f"api:{by or 'unnamed'}").as_dict()
