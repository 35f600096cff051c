"""One page per condition across shards (docs/FLEET.md, "Pages across shards"): a condition several shards see (a
facility cap over the site, fleet-wide drift) is paged by one of them, decided where the pages start, not by
grouping the shards' alerts afterwards.

Each shard with `[fleet] shard` and `[fleet] shards` asks the other shards' `/api/incidents?status=open` (their
open incidents, each with its top hypothesis and paging decision; components cut to the first few) in a thread of its
own (never inside a flush: the workspace is not held while it waits) every `interval_s`, and keeps what they said:
their open incidents with a cause, with their paging decisions. A cause is an incident's top hypothesis (its root
cause on its component), or the condition of sight it states (aiops/store/conditions.py: `source_blind` on
`fleet` when the shards' reads of their one store fail or fall behind; every shard then states it at once). The
pager then judges each of this shard's own incidents that would page and has a cause, against that picture
(`arbitrate`, a pure function):

1. another shard has an open incident with the same cause on the same component that has **paged**: this
   one does not (reason `elsewhere`, `covered_by` that shard's incident id; the ids name their shard);
2. a shard **named before** this one (by name: `a` before `b`) has it open and pages it (its decision is to
   page, whether or not the page went out yet): this one does not (`elsewhere`);
3. the component is **not this shard's own** (`fleet`, or no rack, node or GPU of its topology) and this shard
   is not the first-named: it waits up to `hold_s` after it first saw the incident (`waiting`), so that the
   first-named shard, which pages such a condition at once, is seen doing it (a blind fleet too: one shard
   alone blind pages `hold_s` later than it would alone; eight blind at once page once);
4. otherwise it pages, as it would alone.

A shard that does not answer, or whose answer is older than three intervals, counts as having nothing: the
others page on their own (a duplicate page beats none). A page that went out is never taken back (pager.py).
What is not covered: two shards deciding within the same interval, each before the other's answer showed the
incident (rule 3 makes this rare for fleet-wide conditions; for a component both shards hold, both page).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiops import outbound
from aiops.errors import OutboundError
from aiops.service.incident_list import MAX_LIMIT
from aiops.service.paging import Decision, Subject
from aiops.store import Store
from aiops.store.conditions import KINDS

log = logging.getLogger("aiops.fleet")
MAX_ANSWER_BYTES = 64 << 20
# the open incidents only, as many as a shard lists (each with its first components and their count): what
# `peer_incidents` reads is status, incident_id, top_hypothesis and paging, never the components
PEER_QUERY = f"status=open&limit={MAX_LIMIT}"
STALE_INTERVALS = 3.0  # an answer older than this many intervals counts as none


@dataclass(frozen=True)
class PeerIncident:
    """Another shard's open incident with a cause (module doc), as its /api said."""

    shard: str
    incident_id: str
    root_cause: str  # its top hypothesis' label, or the kind of the condition it states
    component: str
    pages: bool  # its decision is to page (paged, or about to)
    paged: bool  # its page went out


def _cause(row: dict[str, Any]) -> tuple[str, str] | None:
    """(root cause or condition, component) of one listed incident, None when it has neither."""
    top = row.get("top_hypothesis")
    if isinstance(top, dict) and top.get("root_cause") and top.get("component"):
        return str(top["root_cause"]), str(top["component"])
    condition, components = row.get("condition"), row.get("components")
    if condition in KINDS and isinstance(components, list) and len(components) == 1 and components[0]:
        return str(condition), str(components[0])
    return None


def peer_incidents(shard: str, answer: Any) -> list[PeerIncident]:
    """The open incidents with a cause of one shard's `/api/incidents` answer (hostile input: anything else in
    it is ignored)."""
    found: list[PeerIncident] = []
    rows = answer.get("incidents") if isinstance(answer, dict) else None
    for row in rows if isinstance(rows, list) else []:
        if not isinstance(row, dict) or row.get("status") != "open" or (cause := _cause(row)) is None:
            continue
        paging = row.get("paging")
        paging = paging if isinstance(paging, dict) else {}
        found.append(
            PeerIncident(
                shard,
                str(row.get("incident_id", "")),
                *cause,
                pages=paging.get("pages") is True,
                paged=paging.get("paged_ts_s") is not None,
            )
        )
    return found


def arbitrate(
    shard: str,
    shards: Sequence[str],
    subject: Subject,
    decision: Decision,
    peers: Sequence[PeerIncident],
    *,
    own_component: bool,
    now_ts_s: float,
    hold_s: float,
    known_ts_s: float,
) -> Decision:
    """This shard's decision for its own `subject`, given what the other shards said (module doc's rules);
    `known_ts_s`: when this shard first knew the subject's cause (its hold counts from the diagnosis, not from the
    opening: an incident held undiagnosed must still wait for the first shard once its cause is known)."""
    cause = subject.cause
    if not decision.pages or not subject.own or not cause:
        return decision
    same = [
        p for p in peers if p.shard != shard and (p.root_cause, p.component) == (cause, subject.component)
    ]
    paged = sorted((p for p in same if p.paged), key=lambda p: p.shard)
    if paged:
        return Decision(False, "elsewhere", covered_by=paged[0].incident_id)
    before = sorted((p for p in same if p.pages and p.shard < shard), key=lambda p: p.shard)
    if before:
        return Decision(False, "elsewhere", covered_by=before[0].incident_id)
    first = min([*shards, shard])
    if not own_component and shard != first and now_ts_s - known_ts_s < hold_s:
        return Decision(False, "waiting")
    return decision


class PeerPages:
    """The other shards' open incidents, asked in a thread of its own; `apply` is the pager's arbiter."""

    def __init__(
        self,
        shard: str,
        shards: Mapping[str, str],
        token: str | None,
        *,
        interval_s: float,
        hold_s: float | None = None,
        timeout_s: float = 10.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.shard = shard
        self.urls = {name: url.rstrip("/") for name, url in shards.items() if name != shard}
        self.token = token
        self.interval_s = interval_s
        self.hold_s = STALE_INTERVALS * interval_s if hold_s is None else hold_s
        self.timeout_s = timeout_s
        self.clock = clock
        self.answers: dict[str, tuple[float, list[PeerIncident]]] = {}  # shard -> (when, its incidents)
        self.errors: dict[str, str] = {}
        self.known: dict[tuple[str, str, str], float] = {}  # (incident id, cause, component) -> first judged
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="aiops-peer-pages", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stopping.set()
        if self._thread is not None:  # a request under way ends with its timeout; the service does not wait
            self._thread.join(timeout=1.0)

    def _run(self) -> None:
        while not self._stopping.is_set():
            self.ask_all()
            self._stopping.wait(self.interval_s)

    def ask_all(self) -> None:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        for name, url in self.urls.items():
            try:
                answer = outbound.get(
                    f"{url}/api/incidents?{PEER_QUERY}",
                    headers=headers,
                    timeout_s=self.timeout_s,
                    max_bytes=MAX_ANSWER_BYTES,
                ).raise_for_status()
                found = peer_incidents(name, answer.json())
            except (OutboundError, ValueError) as exc:
                if self.errors.get(name) != str(exc):
                    log.warning("a shard did not answer", extra={"shard": name, "why": str(exc)[:200]})
                self.errors[name] = str(exc)
                continue
            self.errors.pop(name, None)
            with self._lock:
                self.answers[name] = (self.clock(), found)

    def fresh(self) -> list[PeerIncident]:
        """What the shards that answered lately said (an old answer counts as none)."""
        oldest = self.clock() - STALE_INTERVALS * self.interval_s
        with self._lock:
            return [p for when, found in self.answers.values() if when >= oldest for p in found]

    def apply(
        self,
        store: Store,
        subjects: Sequence[Subject],
        decisions: dict[tuple[str, str], Decision],
        now_ts_s: float,
    ) -> dict[tuple[str, str], Decision]:
        peers = self.fresh()
        out = dict(decisions)
        current = {(s.incident_id, s.cause, s.component) for s in subjects if s.own}
        self.known = {key: ts for key, ts in self.known.items() if key in current}  # open ones only
        for subject in subjects:
            decision = decisions.get(subject.key)
            cause = subject.cause
            if decision is None or not decision.pages or not subject.own or not cause:
                continue
            own_component = bool(
                store.scalar(
                    "SELECT count(*) FROM topology WHERE component = ? AND kind <> 'fleet'",
                    [subject.component],
                )
            )
            out[subject.key] = arbitrate(
                self.shard,
                [*self.urls],
                subject,
                decision,
                peers,
                own_component=own_component,
                now_ts_s=now_ts_s,
                hold_s=self.hold_s,
                known_ts_s=self.known.setdefault((subject.incident_id, cause, subject.component), now_ts_s),
            )
        return out
