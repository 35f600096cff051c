"""The gate between incident changes and the people they page (aiops/service/paging.py decides, this acts): the
Responder's events (opened, diagnosed, resolved) reach the sinks (webhooks, PagerDuty, Slack, Teams,
Alertmanager, the Slack app) only for an incident that pages; an incident held (undiagnosed), covered or under a
maintenance window is told nothing, and pages later, once, if its hold runs out or its window ends while it is
still open. After its first page an incident's diagnosis and resolution go to the same sinks (PagerDuty: an
update of the same alert, then resolve). What was decided is kept in `incident_pages` (m024): a restart neither
pages twice nor forgets a hold; and is exported (`aiops_incident_pages`), so the chart's rules page exactly the
incidents the sinks do.

An incident that has paged stays paged until it resolves: a window added later, or a covering incident, stops
what has not gone out, and never takes back a page a person already has.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiops.models import Diagnosis, Hypothesis, Incident
from aiops.service.paging import DEFAULT_PAGE_FROM, Decision, Subject, decide
from aiops.service.unchanged import Kept
from aiops.store import Store
from aiops.store.conditions import condition_of, symptoms_condition
from aiops.store.diagnoses import stored_diagnoses
from aiops.store.maintenance import Membership, Window, membership, windows

# (store, event kind: opened | diagnosed | resolved, the incident, its top hypothesis) -> told to people
Deliver = Callable[[Store, str, Incident, Hypothesis | None], None]
# a sharded fleet's word from the other shards (aiops/fleet/peer_pages.py): (store, subjects, decisions, now) ->
# the decisions, those of incidents another shard pages turned into `elsewhere`
Arbiter = Callable[
    [Store, list[Subject], dict[tuple[str, str], Decision], float], dict[tuple[str, str], Decision]
]
DEFAULT_HOLD_UNDIAGNOSED_S = 300.0


@dataclass(frozen=True)
class PageState:
    """One incident's row in `incident_pages`, as exported (`aiops_incident_pages`) and shown."""

    node: str
    incident_id: str
    pages: bool
    reason: str
    covered_by: str = ""
    window_id: str = ""
    paged_ts_s: float | None = None


class Pager:
    """`name`: this service's tier (a node agent's host name, `fleet`); `deliver`: the sinks; `open_s`: how
    recently a node incident must have been seen to count as open (the fleet: a few scrape steps)."""

    def __init__(
        self,
        name: str,
        deliver: Deliver,
        *,
        hold_undiagnosed_s: float = DEFAULT_HOLD_UNDIAGNOSED_S,
        page_from: str = DEFAULT_PAGE_FROM,
        open_s: float = 60.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.name = name
        self.deliver = deliver
        self.hold_undiagnosed_s = hold_undiagnosed_s
        self.page_from = page_from
        self.open_s = open_s
        self.clock = clock
        self.states: list[PageState] = []  # what `review` decided last: the exports
        self.pages = 0  # incidents paged since start
        self.arbiter: Arbiter | None = None  # a shard's: one page per condition across shards
        # the node agents' incidents come from their exports, which only a fleet reads (aiops/fleet/source.py
        # writes `node_incident_samples`): a node agent's service sets it false and asks nothing
        self.covers_nodes = True
        # what a review read of the maintenance windows and of the membership (racks, job ranks), kept while
        # `epochs` (the service's: unchanged.py) says nothing could have written them since; None: read each review
        self.epochs: Callable[[], tuple[int, int]] | None = None
        self._windows: Kept[list[Window]] = Kept()
        self._members: Kept[Membership] = Kept()

    # -- events from the Responder ------------------------------------------------------------------------
    def on_event(self, store: Store, kind: str, incident: Incident, top: Hypothesis | None) -> None:
        now = self.clock()
        row = self._row(store, self.name, incident.incident_id)
        if row is not None and row["paged_ts_s"] is not None:
            self.deliver(store, kind, incident, top)  # it paged: its diagnosis and resolution follow
            return
        if kind == "resolved":
            return  # it never paged: nothing to take back
        subjects = self._own(store, now, extra=(incident, top))
        decisions = self._decide(store, subjects, now)
        decision = decisions.get((self.name, incident.incident_id), Decision(True, "pages"))
        self._save(store, self.name, incident.incident_id, decision, now, paged=decision.pages)
        if decision.pages:
            self._page(store, incident, top)

    # -- every flush ---------------------------------------------------------------------------------------
    def review(self, store: Store, newest_ts_s: float | None) -> list[PageState]:
        """Decide again for every open incident (a hold that ran out, a window that ended, a covering incident
        that resolved), page those that now page and never did, and keep the decisions; returns the states."""
        now = self.clock()
        diagnoses: dict[str, Diagnosis] | None = None  # read (and their evidence parsed) only to page one
        subjects = [*self._own(store, now), *self._node_incidents(store, now, newest_ts_s)]
        decisions = self._decide(store, subjects, now)
        states: list[PageState] = []
        rows = self._rows(store, [s.key for s in subjects])
        for subject in subjects:
            decision = decisions.get(subject.key)
            if decision is None:
                continue
            row = rows.get(subject.key)
            paged_ts_s = row["paged_ts_s"] if row is not None else None
            if subject.own and decision.pages and paged_ts_s is None:
                if diagnoses is None:
                    diagnoses = {d.incident.incident_id: d for d in stored_diagnoses(store, open_only=True)}
                found = diagnoses.get(subject.incident_id)
                if found is not None:
                    top = found.hypotheses[0] if found.hypotheses else None
                    self._page(store, found.incident, top)
                    paged_ts_s = now
            self._save(store, *subject.key, decision, now, paged=paged_ts_s is not None)
            shown = decision if paged_ts_s is None else Decision(True, "pages")  # a page is never taken back
            states.append(
                PageState(
                    subject.node,
                    subject.incident_id,
                    shown.pages,
                    shown.reason,
                    shown.covered_by,
                    shown.window_id,
                    paged_ts_s,
                )
            )
        self.states = states
        return states

    # -- the pieces --------------------------------------------------------------------------------------------
    def _decide(self, store: Store, subjects: list[Subject], now: float) -> dict[tuple[str, str], Decision]:
        if not subjects:  # nothing open: no window or membership to read (a quiet node's every review)
            decisions: dict[tuple[str, str], Decision] = {}
        else:
            active = [w for w in self._all_windows(store) if w.active(now)]
            decisions = decide(
                subjects, active, self._membership(store), now, self.hold_undiagnosed_s, self.page_from
            )
        return self.arbiter(store, subjects, decisions, now) if self.arbiter is not None else decisions

    def _all_windows(self, store: Store) -> list[Window]:
        """Every maintenance window and silence (newest first): read again once another hold may have written
        one (only people add or end them: the console, the API, `aiops maintenance`)."""
        outside = self.epochs()[0] if self.epochs is not None else None
        return self._windows.get(outside, lambda: windows(store))

    def _membership(self, store: Store) -> Membership:
        """Racks and job ranks: read again once the topology or the ranks may have changed."""
        inventory = self.epochs()[1] if self.epochs is not None else None
        return self._members.get(inventory, lambda: membership(store))

    def _page(self, store: Store, incident: Incident, top: Hypothesis | None) -> None:
        """The first page: the diagnosis when there is one (PagerDuty triggers with it), else the opening."""
        self.pages += 1
        if top is not None:
            self.deliver(store, "diagnosed", incident, top)
        else:
            self.deliver(store, "opened", incident, None)

    def _row(self, store: Store, node: str, incident_id: str) -> dict[str, Any] | None:
        rows = store.query(
            "SELECT * FROM incident_pages WHERE node = ? AND incident_id = ?", [node, incident_id]
        )
        return rows[0] if rows else None

    def _rows(self, store: Store, keys: list[tuple[str, str]]) -> dict[tuple[str, str], dict[str, Any]]:
        """`_row` of each (node, incident id) in one query: a review reads the open incidents' rows at once."""
        if not keys:
            return {}
        found = store.query(
            "SELECT * FROM incident_pages WHERE incident_id IN (SELECT unnest(?))",
            [sorted({incident_id for _node, incident_id in keys})],
        )
        wanted = set(keys)
        return {key: r for r in found if (key := (str(r["node"]), str(r["incident_id"]))) in wanted}

    def _save(
        self, store: Store, node: str, incident_id: str, decision: Decision, now: float, *, paged: bool
    ) -> None:
        store.conn.execute(
            """INSERT INTO incident_pages VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
               ON CONFLICT (node, incident_id) DO UPDATE SET
                 pages = excluded.pages, reason = excluded.reason, covered_by = excluded.covered_by,
                 window_id = excluded.window_id, decided_ts_s = excluded.decided_ts_s,
                 paged_ts_s = coalesce(incident_pages.paged_ts_s, excluded.paged_ts_s)""",
            [
                node,
                incident_id,
                now,
                decision.pages or paged,
                decision.reason if not paged else "pages",
                decision.covered_by or None,
                decision.window_id or None,
                now,
                now if paged else None,
            ],
        )

    def _first_seen(self, store: Store, node: str, incident_id: str, now: float) -> float:
        """When this service first saw the incident (recorded now if never: an own incident held until decided,
        a node agent's paging on its own word until the fleet covers it)."""
        row = self._row(store, node, incident_id)
        if row is None:
            own = node == self.name
            store.conn.execute(
                "INSERT INTO incident_pages VALUES (?, ?, ?, ?, ?, NULL, NULL, ?, NULL)",
                [node, incident_id, now, not own, "held" if own else "pages", now],
            )
            return now
        return float(row["first_seen_ts_s"])

    def _first_seen_all(
        self, store: Store, keys: list[tuple[str, str]], now: float
    ) -> dict[tuple[str, str], float]:
        """`_first_seen` of each (node, incident id), their rows read in one query (those never seen recorded
        now, in order, as `_first_seen` records one)."""
        rows = self._rows(store, keys)
        first = {key: float(row["first_seen_ts_s"]) for key, row in rows.items()}
        for key in keys:
            if key not in first:
                first[key] = self._first_seen(store, *key, now)
        return first

    def _own(
        self, store: Store, now: float, extra: tuple[Incident, Hypothesis | None] | None = None
    ) -> list[Subject]:
        """This tier's open incidents (and `extra`, the one an event is about, as the event has it)."""
        rows = store.query(
            "SELECT i.incident_id, i.components, i.severity, i.symptoms, h.root_cause, h.component FROM incidents i "
            "LEFT JOIN hypotheses h ON h.incident_id = i.incident_id AND h.rank = 1 "
            "WHERE i.resolved_ts_s IS NULL ORDER BY i.opened_ts_s, i.incident_id"
        )
        found: dict[str, Subject] = {}
        first = self._first_seen_all(store, [(self.name, str(r["incident_id"])) for r in rows], now)
        for r in rows:
            components = tuple(str(c) for c in r["components"] or ())
            found[str(r["incident_id"])] = Subject(
                self.name,
                str(r["incident_id"]),
                components,
                str(r["root_cause"] or ""),
                str(r["component"] or (components[0] if components else "")),
                str(r["severity"]),
                first[(self.name, str(r["incident_id"]))],
                condition=symptoms_condition(str(r["symptoms"])) or "",
            )
        if extra is not None:
            incident, top = extra
            components = tuple(incident.components)
            found[incident.incident_id] = Subject(
                self.name,
                incident.incident_id,
                components,
                top.root_cause if top else "",
                top.component if top else (components[0] if components else ""),
                incident.severity,
                self._first_seen(store, self.name, incident.incident_id, now),
                condition=condition_of(incident) or "",
            )
        return list(found.values())

    def _node_incidents(self, store: Store, now: float, newest_ts_s: float | None) -> list[Subject]:
        """The node agents' incidents open now (seen in the newest steps the fleet read), as their newest
        sample says; none on a node agent (it reads no other agent's exports: `covers_nodes`)."""
        if newest_ts_s is None or not self.covers_nodes:
            return []
        rows = store.query(
            """SELECT node, incident_id, arg_max(component, ts_s) AS component,
                      arg_max(root_cause, ts_s) AS root_cause, arg_max(severity, ts_s) AS severity
               FROM node_incident_samples WHERE ts_s >= ? AND node <> ?
               GROUP BY node, incident_id ORDER BY node, incident_id""",
            [newest_ts_s - self.open_s, self.name],
        )
        first = self._first_seen_all(store, [(str(r["node"]), str(r["incident_id"])) for r in rows], now)
        return [
            Subject(
                str(r["node"]),
                str(r["incident_id"]),
                (str(r["component"]),),
                str(r["root_cause"]),
                str(r["component"]),
                str(r["severity"]),
                first[(str(r["node"]), str(r["incident_id"]))],
                own=False,
            )
            for r in rows
        ]
