"""One page per problem: which open incidents page, as a pure function of what this tier knows (docs/NOTIFY.md,
"One page per problem"). The same decision drives the product's own sinks (aiops/service/pager.py holds an
incident's notifications until it pages) and the chart's alert rules (`aiops_incident_pages`, 0 for an incident
that must not page on its own: `AiopsIncidentOpen` fires `unless on (incident_id) aiops_incident_pages == 0`).

For each open incident of this tier, in order:
1. a **maintenance** window or **silence** holds it (aiops/store/maintenance.py): no page (reason `maintenance`
   or `silence`, with the window);
2. without a diagnosis, it is **covered** by a diagnosed open incident of this tier about the same components
   (the job's slow steps under the throttling GPU's incident): no page, `covered_by` names that incident;
3. its impact is **minor**: its severity (aiops/detect/severity.py: from impact, not from its first symptom's
   kind), raised to the worst of the incidents it covers, is below `[notify.severity] page_from` (default
   `warning`: an `info` incident, a condition with no impact such as a warm GPU below its slowdown point or an
   application's Xid, never pages; its sinks hear nothing of it and the console shows it);
4. without a diagnosis, it is **held** for `[notify] undiagnosed_hold_s` after this tier first saw it (a
   diagnosis, its own or a covering one's, usually follows within a flush or two);
5. otherwise it **pages**.

On the fleet, each node agent's open incident (read from its exports, `node_incident_samples`) is **covered**
by the fleet incident about its component (one of them under the other: `node3/gpu1` under `node3`; a job's
slow steps under a GPU or node the job runs on: the job's home node sees the slowdown, another node its cause),
or held
by the fleet's windows; only those get a decision (0): one the fleet does not cover pages on its node's own
word (the chart gives a node's incident `nodeIncidentFor` to be covered first).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aiops.config_notify import SEVERITIES
from aiops.labels import node_of
from aiops.store.maintenance import Membership, Window, matching

# `elsewhere` and `waiting`: a shard's, for a condition another shard pages (aiops/fleet/peer_pages.py)
REASONS = ("pages", "held", "covered", "minor", "maintenance", "silence", "elsewhere", "waiting")
DEFAULT_PAGE_FROM = "warning"
_RANK: dict[str, int] = {name: n for n, name in enumerate(SEVERITIES)}


@dataclass(frozen=True)
class Subject:
    """An open incident as paging sees it."""

    node: str  # the tier that opened it: this service's name, or (on the fleet) a node agent's
    incident_id: str
    components: tuple[str, ...]
    root_cause: str  # the top hypothesis' label; "" before a diagnosis
    component: str  # the top hypothesis' component, else the incident's first
    severity: str
    first_seen_ts_s: float  # wall clock: when this service first saw it
    own: bool = True  # this tier's incident (False: a node agent's, read by the fleet)
    # the kind of a condition of this service's own sight it states (a blind source, a lost agent:
    # aiops/store/conditions.py), "" for an incident of the analyst's: a condition needs no diagnosis, so it is
    # never held, and it explains no fault, so it covers nothing; a window still stops it
    condition: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return self.node, self.incident_id

    @property
    def stated(self) -> bool:
        return bool(self.condition)

    @property
    def cause(self) -> str:
        """What it is about: its top hypothesis' label, else the condition it states ("" for neither)."""
        return self.root_cause or self.condition

    @property
    def diagnosed(self) -> bool:
        return bool(self.root_cause)

    def labels(self, rack_of: dict[str, str]) -> dict[str, str]:
        """The labels a `label` window matches."""
        node = node_of(self.component, frozenset(rack_of.values())) or ""
        jobs = [c.removeprefix("job:") for c in self.components if c.startswith("job:")]
        found = {
            "incident_id": self.incident_id,
            "root_cause": self.root_cause or "undiagnosed",
            "component": self.component,
            "severity": self.severity,
            "node": node,
            "rack": rack_of.get(node, ""),
            "job": jobs[0] if jobs else "",
        }
        return {k: v for k, v in found.items() if v}


@dataclass(frozen=True)
class Decision:
    pages: bool
    reason: str  # one of REASONS
    covered_by: str = ""
    window_id: str = ""

    def describe(self) -> str:
        """For people: `covered by INC-fleet-0001`, `held: no diagnosis yet`, `maintenance M-1a2b3c4d`."""
        if self.reason == "covered":
            return f"covered by {self.covered_by}"
        if self.reason in ("maintenance", "silence"):
            return f"{self.reason} {self.window_id}"
        if self.reason == "minor":
            return "minor: below the paging severity"
        if self.reason == "elsewhere":
            return f"paged by another shard: {self.covered_by}"
        if self.reason == "waiting":
            return "held: the first shard may page it"
        return "held: no diagnosis yet" if self.reason == "held" else "pages"


def under(a: str, b: str) -> bool:
    """`a` is `b` or lies under it (`node3/gpu1` under `node3`)."""
    return bool(a) and bool(b) and (a == b or a.startswith(b + "/"))


def _parts(subject: Subject, members: Membership, everything: bool) -> list[str]:
    """The components an incident is about: its top component (and, `everything`, all of its components), a
    job's standing also for the GPUs and nodes it runs on (a job slows because one of its ranks does)."""
    found = [subject.component, *(subject.components if everything else ())]
    for part in list(found):
        if part.startswith("job:"):
            found.extend(sorted(members.job_units.get(part.removeprefix("job:"), frozenset())))
    return [p for p in found if p]


def about_the_same(one: Subject, other: Subject, members: Membership | None = None) -> bool:
    """Two incidents about one component: one's component (or any of its components) is the other's or lies
    under it, either way round; a job counts as the GPUs and nodes it runs on (its slow steps and the GPU that
    slowed it are one problem)."""
    members = members or Membership()
    mine, theirs = _parts(one, members, one.own), _parts(other, members, True)
    return any(under(a, b) or under(b, a) for a in mine for b in theirs)


def _window(subject: Subject, windows: Sequence[Window], members: Membership) -> Window | None:
    parts = [*subject.components] if subject.own else [subject.component]
    return matching(windows, parts or [subject.component], subject.labels(dict(members.rack_of)), members)


def pages_at(severity: str, page_from: str) -> bool:
    """`severity` is `page_from` or worse (an unknown word counts as warning, as aiops/detect/severity.py has it)."""
    return _RANK.get(severity, 1) >= _RANK.get(page_from, 1)


def _impact(subject: Subject, every: Sequence[Subject], members: Membership) -> str:
    """The worst severity of `subject` and of the incidents it would cover (a warm GPU's incident that explains
    a job's 30 % slowdown pages at the slowdown's severity)."""
    found = subject.severity
    covered = [
        o
        for o in every
        if o.key != subject.key
        and not o.stated
        and not (o.own and o.diagnosed)
        and about_the_same(o, subject, members)
    ]
    for other in covered:
        if pages_at(other.severity, found):
            found = other.severity
    return found


def decide(
    subjects: Iterable[Subject],
    windows: Sequence[Window],
    members: Membership,
    now_ts_s: float,
    hold_undiagnosed_s: float,
    page_from: str = DEFAULT_PAGE_FROM,
) -> dict[tuple[str, str], Decision]:
    """(node, incident id) -> the decision, for every own incident and every node incident the fleet covers or
    holds (others get none: their own tier decides). `page_from`: the least severity that pages."""
    every = list(subjects)
    own = [s for s in every if s.own]
    diagnosed = [s for s in own if s.diagnosed]
    out: dict[tuple[str, str], Decision] = {}
    for subject in every:
        window = _window(subject, windows, members)
        if window is not None:
            out[subject.key] = Decision(False, window.kind, window_id=window.window_id)
            continue
        if subject.own and subject.stated:
            out[subject.key] = Decision(True, "pages")  # the service's own sight: pages whatever its severity
            continue
        # a diagnosed incident weighs what it covers too; one without a diagnosis covers nothing: its own impact
        impact = _impact(subject, every, members) if subject.diagnosed else subject.severity
        minor = subject.own and not pages_at(impact, page_from)
        if subject.own and subject.diagnosed:
            out[subject.key] = Decision(False, "minor") if minor else Decision(True, "pages")
            continue
        cover = next(
            (d for d in diagnosed if d.key != subject.key and about_the_same(subject, d, members)), None
        )
        if cover is None and not subject.own:  # a node incident: covered by any fleet incident about it
            cover = next((d for d in own if about_the_same(subject, d, members)), None)
        if cover is not None:
            out[subject.key] = Decision(False, "covered", covered_by=cover.incident_id)
        elif not subject.own:
            continue  # the node agent's own word stands
        elif minor:
            out[subject.key] = Decision(False, "minor")
        elif now_ts_s - subject.first_seen_ts_s < hold_undiagnosed_s:
            out[subject.key] = Decision(False, "held")
        else:
            out[subject.key] = Decision(True, "pages")
    return out
