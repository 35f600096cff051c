"""Maintenance windows and silences (table `maintenance`, m023): planned work on part of the cluster, so nothing
pages for it and nothing acts on it (docs/NOTIFY.md, "Maintenance windows and silences").

- A **maintenance** window stops pages about its scope and every action on it (guardrails' `maintenance` rule
  refuses a proposal whose target or any unit it touches is in scope: `in_maintenance`).
- A **silence** stops pages only (the incident is still detected, diagnosed and shown; actions may run).

A window names one scope: a `node` (host name), a `rack`, a `job` (its name, without `job:`), a `component`
(`node3/gpu5`: it and what lies under it) or a `label` (`key=value`, matched against an incident's labels:
`root_cause`, `severity`, `component`, `node`, `rack`, `job`; for an action, `kind` and `target`). It holds from
`starts_ts_s` to `ends_ts_s` (wall clock), or until a person ends it early. Windows are added and ended by people
(`aiops maintenance`, the console, `POST /api/maintenance`), each change an audit record (event `maintenance`),
written by the caller: this module only reads and writes the table.

An incident is in scope when every one of its hardware components is (a rack cooling failure with one node of
the rack in maintenance still pages: the others are not), or, with no hardware component, every job it touches;
or when a `label` window matches its labels.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from aiops.labels import node_of
from aiops.store.store import Store

WindowKind = Literal["maintenance", "silence"]
KINDS: tuple[str, ...] = ("maintenance", "silence")
SCOPES: tuple[str, ...] = ("node", "rack", "job", "component", "label")
MAX_WINDOW_S = 30 * 86_400.0  # a window longer than a month is a decommission, not maintenance
_LABEL = re.compile(r"^([a-z_]{1,40})=(.{1,200})$")
_TARGET = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/-]{0,199}$")


@dataclass(frozen=True)
class Window:
    window_id: str
    kind: str  # maintenance | silence
    scope: str  # node | rack | job | component | label
    target: str
    starts_ts_s: float
    ends_ts_s: float
    reason: str
    created_by: str
    created_ts_s: float
    ended_ts_s: float | None = None
    ended_by: str | None = None

    def active(self, now_ts_s: float) -> bool:
        end = self.ends_ts_s if self.ended_ts_s is None else min(self.ends_ts_s, self.ended_ts_s)
        return self.starts_ts_s <= now_ts_s < end

    @property
    def stops_actions(self) -> bool:
        return self.kind == "maintenance"

    def describe(self) -> str:
        """`maintenance M-1a2b3c4d on node node3`: how messages name it."""
        return f"{self.kind} {self.window_id} on {self.scope} {self.target}"

    def as_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class Membership:
    """Which rack a node is in and which nodes and GPUs a job runs on: how a rack or job window reaches a GPU."""

    rack_of: Mapping[str, str] = field(default_factory=dict)  # node -> rack
    job_units: Mapping[str, frozenset[str]] = field(default_factory=dict)  # job -> its GPUs and nodes


def membership(store: Store) -> Membership:
    racks = store.query("SELECT node, rack FROM topology WHERE kind = 'node' AND rack IS NOT NULL")
    units: dict[str, set[str]] = {}
    for row in store.query("SELECT job, gpu, node FROM job_ranks"):
        units.setdefault(str(row["job"]), set()).update(str(v) for v in (row["gpu"], row["node"]) if v)
    return Membership(
        {str(r["node"]): str(r["rack"]) for r in racks}, {job: frozenset(u) for job, u in units.items()}
    )


def scope_problem(scope: str, target: str) -> str | None:
    """Why (`scope`, `target`) is not a window's scope; None when it is."""
    if scope not in SCOPES:
        return f"scope '{scope[:40]}' is not one of {', '.join(SCOPES)}"
    if scope == "label":
        return (
            None if _LABEL.match(target) else "a label scope is key=value (e.g. root_cause=thermal_throttle)"
        )
    if scope == "job":
        target = target.removeprefix("job:")
    if not _TARGET.match(target):
        return f"'{target[:60]}' is not a {scope} name"
    return None


def _covers(window: Window, component: str, membership: Membership) -> bool:
    """Does the window's (non-label) scope hold this component?"""
    node = node_of(component, frozenset(membership.rack_of.values()))
    if window.scope == "node":
        return node == window.target
    if window.scope == "rack":
        return component == window.target or (
            node is not None and membership.rack_of.get(node) == window.target
        )
    if window.scope == "job":
        job = window.target.removeprefix("job:")
        return component == f"job:{job}" or component in membership.job_units.get(job, frozenset())
    if window.scope == "component":
        return component == window.target or component.startswith(window.target + "/")
    return False


def _label_matches(window: Window, labels: Mapping[str, str]) -> bool:
    found = _LABEL.match(window.target)
    return found is not None and labels.get(found[1]) == found[2]


def matching(
    windows: Iterable[Window],
    components: Iterable[str],
    labels: Mapping[str, str],
    members: Membership,
    *,
    actions: bool = False,
) -> Window | None:
    """The first window (of those given, all assumed active) whose scope holds the subject: every hardware
    component, or with none every job, or its labels. `actions`: only windows that stop actions count."""
    chosen = [w for w in windows if w.stops_actions or not actions]
    names = [c for c in dict.fromkeys(components) if c]
    hardware = [c for c in names if not c.startswith(("job:", "policy:")) and c != "fleet"]
    subject = hardware or [c for c in names if c.startswith("job:")]
    for window in chosen:
        if window.scope == "label":
            if _label_matches(window, labels):
                return window
        elif subject and all(_covers(window, c, members) for c in subject):
            return window
    # several windows together (node3 and node4 in maintenance, an incident over both): each part held by one
    scoped = [w for w in chosen if w.scope != "label"]
    if subject and scoped and all(any(_covers(w, c, members) for w in scoped) for c in subject):
        return next(w for w in scoped if any(_covers(w, c, members) for c in subject))
    return None


# -- the table ---------------------------------------------------------------------------------------------------
def _window(row: Mapping[str, Any]) -> Window:
    ended = row.get("ended_ts_s")
    return Window(
        str(row["window_id"]),
        str(row["kind"]),
        str(row["scope"]),
        str(row["target"]),
        float(row["starts_ts_s"]),
        float(row["ends_ts_s"]),
        str(row["reason"]),
        str(row["created_by"]),
        float(row["created_ts_s"]),
        None if ended is None else float(ended),
        None if row.get("ended_by") is None else str(row["ended_by"]),
    )


def add_window(
    store: Store,
    *,
    kind: str,
    scope: str,
    target: str,
    starts_ts_s: float,
    ends_ts_s: float,
    reason: str,
    created_by: str,
    now_ts_s: float,
) -> Window:
    """Store a new window; ValueError saying what is wrong (kind, scope, target, times, reason)."""
    if kind not in KINDS:
        raise ValueError(f"kind '{kind[:40]}' is not one of {', '.join(KINDS)}")
    target = target.strip()
    problem = scope_problem(scope, target)
    if problem:
        raise ValueError(problem)
    if scope == "job":
        target = target.removeprefix("job:")
    if not ends_ts_s > starts_ts_s:
        raise ValueError("the window ends before it starts")
    if ends_ts_s - starts_ts_s > MAX_WINDOW_S:
        raise ValueError(f"a window lasts at most {MAX_WINDOW_S / 86_400:.0f} days")
    if ends_ts_s <= now_ts_s:
        raise ValueError("the window is over already")
    reason = " ".join(reason.split())[:500]
    if not reason:
        raise ValueError("say why (a reason people read: the ticket, the work)")
    window = Window(
        f"M-{secrets.token_hex(4)}",
        kind,
        scope,
        target,
        starts_ts_s,
        ends_ts_s,
        reason,
        created_by[:200] or "unknown",
        now_ts_s,
    )
    store.conn.execute(
        "INSERT INTO maintenance VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL)",
        [
            window.window_id,
            kind,
            scope,
            target,
            starts_ts_s,
            ends_ts_s,
            window.reason,
            window.created_by,
            now_ts_s,
        ],
    )
    return window


def end_window(store: Store, window_id: str, ended_by: str, now_ts_s: float) -> Window:
    """End a window now; ValueError when there is no such window or it is over already."""
    found = get_window(store, window_id)
    if found is None:
        raise ValueError(f"no maintenance window '{window_id[:40]}'")
    if not found.active(now_ts_s) and found.starts_ts_s <= now_ts_s:
        raise ValueError(f"{found.window_id} is over already")
    store.conn.execute(
        "UPDATE maintenance SET ended_ts_s = ?, ended_by = ? WHERE window_id = ?",
        [now_ts_s, ended_by[:200] or "unknown", found.window_id],
    )
    ended = get_window(store, found.window_id)
    assert ended is not None
    return ended


def get_window(store: Store, window_id: str) -> Window | None:
    rows = store.query("SELECT * FROM maintenance WHERE window_id = ?", [window_id])
    return _window(rows[0]) if rows else None


def windows(store: Store, now_ts_s: float | None = None) -> list[Window]:
    """Every window, newest first; with `now_ts_s`, only those active or still to come then."""
    found = [_window(r) for r in store.query("SELECT * FROM maintenance ORDER BY created_ts_s DESC")]
    if now_ts_s is None:
        return found
    return [w for w in found if w.active(now_ts_s) or (w.starts_ts_s > now_ts_s and w.ended_ts_s is None)]


def active_windows(store: Store, now_ts_s: float) -> list[Window]:
    return [w for w in windows(store) if w.active(now_ts_s)]


def in_maintenance(store: Store, component: str, now_ts_s: float) -> Window | None:
    """The maintenance window (not a silence) holding `component` at `now_ts_s`, or None (contract 7)."""
    return matching(active_windows(store, now_ts_s), [component], {}, membership(store), actions=True)
