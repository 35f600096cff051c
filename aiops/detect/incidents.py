"""Grouping symptoms into incidents, by cause and not by node. Symptoms of one cause arrive together or along one
path of the dependency graph (the throttling GPU, the slow steps of its job, the collective latency of its
peers), so a new symptom joins an open incident when it is on a component causally related to one of that
incident's (`aiops.causal`: same GPU/node/NIC, a rack over its nodes for heat and power, a job over its ranks)
and the two share a cause (`IncidentTracker._linked`: one onset, or one label that explains both while that
cause still spreads), or when its onset comes within `join_s` of the incident's opening and one cause could
produce both (`_one_event`: one event seen on several components at once, a lane policy over two NICs; not two
faults that happen to start together, whatever the windows' alignment). A symptom on an unrelated component,
or an independent one on a related component (a PCIe fault next to a hot GPU, a DCIM cap minutes into a thermal
fault, a fault during benign ambient drift), opens an incident of its own; so does a new onset of an
already-explained cause on another component once the first one's symptoms settled (`_spreading`: a second GPU
of a node overheating minutes after the first, a second power limit lowered, a limit lowered below what a DCIM
cap asked), uniformly across labels, as two link flaps on one node always were. A symptom that moves in
steps (a power limit lowered, then lowered again) is placed step by step (`_key`), an Xid by its code, a throttle
by the cause its reasons name (a brake, heat, a cap: `throttle_class`); a cause whose own signs went quiet for
`settle_s` draws nothing new in (`_active`: drops on a NIC a minute after its bulk transfer ended). A job-level symptom
(slow steps, collective latency or timeouts) reaches every rank of its job, so it is put with the open incident
of a fault whose onset came last before it among those on the job's nodes or over them (the most recent change
explains it; a benign condition's incident only when no other is open; `_reaches`: another job's fault explains
none of its pauses), else it opens its own. Each (kind, component) stays with the incident it first joined; an
incident closes after `quiet_s` without one of its own.

The tracker serves both a whole-history analysis (`aiops analyze`: feed every window, then `incidents()`) and
the live service: `feed` returns what changed (`Transition`s: opened, updated, resolved), numbering continues
from `first_number`, and `resume` puts back incidents that were open when the service stopped.

Incident ids are `<id_prefix><number, 4 digits at least>`. A whole-history analysis keeps the plain `INC-`; the
live service names its ids after the tier that opened them (`incident_prefix`: `INC-gpu-a100-017-0042` on a node
agent, `INC-fleet-0007` on the fleet), so they are unique across the cluster and stable over restarts. Everyone
else treats an id as an opaque string."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from aiops.causal import (
    OWN_SIGNS,
    SIGNED,
    Racks,
    benign_explained,
    co_signs,
    covers,
    node_of,
    one_cause,
    one_cause_labels,
    own_sign_of,
    symptom_labels,
    symptoms_related,
)
from aiops.config_notify import SEVERITIES, SeverityConfig
from aiops.detect.kinds import INFO, PERSISTENT, RANK_KINDS, STRONG, WEAK_KINDS_TO_OPEN
from aiops.detect.restarts import XID_KILLED
from aiops.detect.severity import impact, worse
from aiops.labels import CLOCK_REASON_LABELS, SPEC, component_kind
from aiops.models import Incident, Symptom
from aiops.nvml_bits import HW_POWER_BRAKE_SLOWDOWN, SW_POWER_CAP, THERMAL

# A weak symptom opens an incident only when it persists (`WEAK_KINDS_TO_OPEN`, aiops/detect/kinds.py: its rule
# already needed 2 windows).
# A rank that idles while its job waits for a peer (a crash, a restart): on the job's path, not a cause.
PEER_WAIT = {"gpu_idle_in_job"}
# A late rank (aiops/detect/stragglers.py) shows where a cause reaches the job's timing: it joins the incident of
# the cause it fits and anchors nothing, so another fault on a node of the same job is not drawn in through it.
NO_ANCHOR = PEER_WAIT | RANK_KINDS
JOIN_S = 20.0  # onsets this close are one event seen on several components (two 10 s windows)
CAUSE_LAG_S = 60.0  # how long after its effects a cause's own sign may be reported (a rule with a baseline)
# How long one cause keeps spreading to other components after its last onset on one (`_spreading`).
SETTLE_S = 60.0

STEPPED = frozenset({"power_limit_drop"})  # symptoms that move in steps, each dated (aiops/detect/limits.py)
CODED = frozenset({"xid"})  # symptoms whose code names the causes they may sign (causal.symptom_labels)
# A throttle by the cause its clocks-event reasons name (`throttle_class`): a brake, heat, a power cap.
REASONED = frozenset({"gpu_throttle"})
# (kind, component, its step's onset, its code or its reason: `_key`)
Key = tuple[str, str, float | str | None]


def _key(s: Symptom) -> Key:
    """A symptom's identity in the tracker: its kind and component, and for a symptom that moves in steps (a
    power limit lowered, then lowered again: `detail["since_ts_s"]`, aiops/detect/limits.py) the step's onset,
    so each step is placed on its own. Only such a kind (`STEPPED`): another symptom's `since_ts_s` (a
    straggler's, which moves every window) says nothing about a new onset. An Xid by its code (`CODED`): an
    uncorrectable ECC error (Xid 48) on a GPU whose NVLink errors (Xid 74) opened an incident is placed on its
    own, not filed under the first Xid seen there. A throttle by the cause its reasons name (`throttle_class`):
    a PSU's brake asserted on GPUs that a DCIM cap already held at SwPowerCap is a new cause's sign, placed on its
    own, not filed under the cap's throttle of the same GPUs."""
    if s.kind in REASONED:
        return s.kind, s.component, throttle_class(s.detail.get("mask"))
    if s.kind in CODED:
        code = s.detail.get("xid")
        return s.kind, s.component, float(code) if isinstance(code, (int, float)) else None
    since = s.detail.get("since_ts_s") if s.kind in STEPPED else None
    return s.kind, s.component, float(since) if isinstance(since, (int, float)) else None


def throttle_class(mask: object) -> str | None:
    """The cause a throttle's clocks-event reasons name, strongest first: a power brake (HwPowerBrakeSlowdown
    holds the clock lowest, whatever else is set), heat (a thermal slowdown), a power cap (SwPowerCap alone);
    None when the mask says none of them. Coarse on purpose: a hot GPU's windows that add SwPowerCap or
    HwSlowdown now and then stay one symptom."""
    if not isinstance(mask, int) or isinstance(mask, bool):
        return None
    if mask & HW_POWER_BRAKE_SLOWDOWN:
        return "brake"
    if mask & THERMAL:
        return "heat"
    if mask & SW_POWER_CAP:
        return "cap"
    return None


_CLASS_REASON = {"brake": "hw_power_brake", "heat": "thermal", "cap": "power_cap"}


def _allowed(s: Symptom) -> frozenset[str] | None:
    """The causes `s` allows when it is linked to an incident's member (`symptom_labels`); a throttle only those
    of the cause its key names (`throttle_class`), as it is placed by that: a brake asserted on a GPU still
    throttling for its node's heat (the window's reasons hold both) is a sign of the brake, not of the heat it
    was placed apart from."""
    allowed = symptom_labels(s.kind, s.detail)
    named = throttle_class(s.detail.get("mask")) if s.kind in REASONED else None
    if allowed is None or named is None:
        return allowed
    return allowed & CLOCK_REASON_LABELS[_CLASS_REASON[named]]


ANALYSIS_PREFIX = "INC-"  # a whole-history analysis (`aiops analyze`, the eval): ids of that analysis only


def incident_prefix(scope: str, shard: str = "") -> str:
    """The id prefix of the live incidents one tier opens: `INC-<host>-` on a node agent (its host name, unique in
    the cluster), `INC-fleet-` on the fleet, `INC-fleet-<shard>-` on one shard of a sharded fleet. `scope` is a
    component name (RFC 1123 host, `fleet`)."""
    return f"INC-{scope}-{shard}-" if shard else f"INC-{scope}-"


# Kinds whose every sighting can weigh in an incident's impact (a job's stall length, its slowdown, an Xid's
# code: aiops/detect/severity.py `impact`); of any other kind, impact reads only the kind and the component.
_WEIGHED = frozenset({"job_stalled", "step_regression", "xid"})


@dataclass
class _Sighted:
    """One (kind, component) of an incident: its earliest sighting (ties: the first added), how many sightings,
    the latest one's time. What `_compact` stores, kept as symptoms come, so that an incident open for hours over
    thousands of GPUs (a site's cap) costs its components each window, not every symptom it ever held."""

    first: Symptom
    seq: int  # the order `first` was added in, among all the incident's symptoms
    windows: int
    last_ts_s: float


@dataclass
class _Open:
    number: int
    opened_ts_s: float
    last_ts_s: float
    sighted: dict[tuple[str, str], _Sighted] = field(default_factory=dict)  # (kind, component) -> sightings
    weighed: list[Symptom] = field(default_factory=list)  # every sighting of a `_WEIGHED` kind
    added: int = 0
    resolved_ts_s: float | None = None
    severity_floor: str = "info"  # a resumed incident's severity: it never drops while the incident is open
    keys: dict[Key, float] = field(default_factory=dict)  # each (kind, component, step) with its first ts
    firsts: dict[Key, Symptom] = field(default_factory=dict)  # each (kind, component, step) as first seen

    def add(self, symptoms: list[Symptom]) -> None:
        for s in symptoms:
            self.keys.setdefault(_key(s), s.ts_s)
            self.firsts.setdefault(_key(s), s)
            seen = self.sighted.get((s.kind, s.component))
            if seen is None:
                self.sighted[(s.kind, s.component)] = _Sighted(s, self.added, 1, s.ts_s)
            else:
                if s.ts_s < seen.first.ts_s:
                    seen.first, seen.seq = s, self.added
                seen.windows += 1
                seen.last_ts_s = max(seen.last_ts_s, s.ts_s)
            if s.kind in _WEIGHED:
                self.weighed.append(s)
            self.added += 1

    def firsts_in_order(self) -> list[_Sighted]:
        """Each (kind, component)'s sightings, by its earliest sighting's time (ties: the order added)."""
        return sorted(self.sighted.values(), key=lambda seen: (seen.first.ts_s, seen.seq))

    @property
    def symptoms(self) -> list[Symptom]:
        """What the incident's impact and title read: one sighting of each (kind, component), every sighting of
        a kind whose detail weighs in its impact."""
        return [
            *(seen.first for seen in self.sighted.values() if seen.first.kind not in _WEIGHED),
            *self.weighed,
        ]


@dataclass(frozen=True)
class Transition:
    kind: str  # opened | updated (new kinds of symptom or components) | resolved
    incident: Incident


class IncidentTracker:
    def __init__(
        self,
        *,
        quiet_s: float = 180.0,
        first_number: int = 1,
        keep_closed: bool = True,
        rack_of: Mapping[str, str] | None = None,
        job_of: Mapping[str, str] | None = None,
        join_s: float = JOIN_S,
        cause_lag_s: float = CAUSE_LAG_S,
        settle_s: float = SETTLE_S,
        id_prefix: str = ANALYSIS_PREFIX,
        severity: SeverityConfig | None = None,
    ) -> None:
        self.id_prefix = id_prefix
        self.severity = severity or SeverityConfig()  # severity from impact (aiops/detect/severity.py)
        self.quiet_s = quiet_s
        self.join_s = join_s
        self.cause_lag_s = cause_lag_s
        self.settle_s = settle_s
        self.rack_of = rack_of or {}  # node → rack; unknown racks merge (the safe error)
        self.job_of: Mapping[str, str] = {}  # GPU → the job its rank serves
        self.job_nodes: dict[str, set[str | None]] = {}
        self.set_jobs(job_of or {})
        self.open: list[_Open] = []
        self.last_seen: dict[Key, float] = {}  # each (kind, component, ...) as last seen (`_active`)
        self.closed: list[_Open] = []
        self.next_number = first_number
        self.keep_closed = keep_closed  # a service forgets closed incidents once it has stored them

    @property
    def rack_of(self) -> Racks:
        return self._rack_of

    @rack_of.setter
    def rack_of(self, rack_of: Mapping[str, str]) -> None:
        self._rack_of = rack_of if isinstance(rack_of, Racks) else Racks(rack_of)

    def set_jobs(self, job_of: Mapping[str, str]) -> None:
        """GPU → job (the scheduler's rank table): a rank idling while its job waits is on the job's path."""
        self.job_of = job_of
        self.job_nodes = {}
        for gpu, job in job_of.items():
            self.job_nodes.setdefault(job, set()).add(node_of(gpu))

    @property
    def current(self) -> _Open | None:
        """The open incident opened last (None when none is open)."""
        return self.open[-1] if self.open else None

    def _reaches(self, component: str, job: str) -> bool:
        """Can a fault on hardware `component` touch job `job`: on one of its nodes, or over them (a rack holding
        one, the fleet, a policy)? A job whose nodes are unknown is reached by everything (merging is the safe
        error: it loses no symptom)."""
        nodes = self.job_nodes.get(job)
        if not nodes or None in nodes:
            return True
        node = node_of(component, self.rack_of)
        if node is not None:
            return node in nodes
        if component_kind(component, self.rack_of.names) == "rack":
            return any(self.rack_of.get(n) in (component, None) for n in nodes if n is not None)
        return True  # the fleet, a policy: every node

    def _holds_job(self, keys: set[Key], job: str) -> bool:
        """Does an incident with these symptoms reach job `job`: one of them is the job's, or lies on its path?"""
        return any(
            c == f"job:{job}" or (not c.startswith("job:") and self._reaches(c, job)) for _, c, _ in keys
        )

    def _latest_fault(self, placed: dict[int, list[Symptom]], job: str) -> _Open | None:
        """The open incident opened last among those that reach job `job` (`_reaches`: another job's fault on
        nodes it does not use explains none of its pauses), passing over those whose hardware symptoms (held, or
        placed in this window) are all a benign condition's (ambient drift explains no job's slow steps); the one
        opened last when every one is; None when none reaches it. Of incidents opened at one time (one window's,
        `_worst_first`), the worst: the one numbered first."""
        faults = []
        reaching = []
        for group in reversed(self.open):
            keys = {*group.firsts, *(_key(p) for p in placed.get(group.number, []))}
            if not self._holds_job(keys, job):
                continue
            reaching.append(group)
            hardware = [k for k, c, _ in keys if not c.startswith("job:")]
            explained = benign_explained(hardware)
            if not hardware or any(k not in INFO and k not in explained for k in hardware):
                faults.append(group)
        if not faults:
            return reaching[0] if reaching else None
        return min((g for g in faults if g.opened_ts_s == faults[0].opened_ts_s), key=lambda g: g.number)

    def resume(self, incident: Incident) -> None:
        """Carry on an incident that was open when the last run stopped."""
        group = _Open(incident.number, incident.opened_ts_s, incident.last_ts_s)
        group.severity_floor = incident.severity
        group.add(list(incident.symptoms))
        for s in incident.symptoms:  # a stored symptom carries its last sighting (`_compact`)
            last = s.detail.get("last_ts_s")
            self._seen(s, float(last) if isinstance(last, (int, float)) else s.ts_s)
        self.open.append(group)
        self.open.sort(key=lambda g: (g.opened_ts_s, g.number))
        self.next_number = max(self.next_number, incident.number + 1)

    def feed(self, symptoms: list[Symptom], now_ts_s: float) -> list[Transition]:
        out: list[Transition] = []
        for group in [g for g in self.open if now_ts_s - g.last_ts_s > self.quiet_s]:
            group.resolved_ts_s = now_ts_s
            out.append(Transition("resolved", self._incident(group)))
            self.open.remove(group)
            if self.keep_closed:
                self.closed.append(group)
        if not symptoms:
            return out
        known_keys = {g.number: set(g.keys) for g in self.open}
        placed, opened = self._place(symptoms, now_ts_s)
        for group in self.open:
            batch = placed.get(group.number, [])
            if not batch:
                continue
            was = known_keys.get(group.number, set())
            group.add(batch)
            for s in batch:
                self._seen(s, s.ts_s)
            if any(s.kind not in INFO for s in batch) or all(kind in INFO for kind, _ in group.sighted):
                group.last_ts_s = now_ts_s
            if group in opened:
                out.append(Transition("opened", self._incident(group)))
            elif {_key(s) for s in batch} - was:
                out.append(Transition("updated", self._incident(group)))
        return out

    def _place(
        self, symptoms: list[Symptom], now_ts_s: float
    ) -> tuple[dict[int, list[Symptom]], list[_Open]]:
        """Which open incident each symptom joins (by incident number), and the incidents opened for them."""
        owner = {key: g for g in self.open for key in g.keys}
        placed: dict[int, list[Symptom]] = {}
        fresh_hw: list[Symptom] = []
        fresh_job: list[Symptom] = []
        for s in symptoms:
            known = owner.get(_key(s))
            if known is not None:
                placed.setdefault(known.number, []).append(s)
            elif s.component.startswith("job:"):
                fresh_job.append(s)
            else:
                fresh_hw.append(s)
        opened: list[_Open] = []
        homes = [(s, self._home(s, placed)) for s in fresh_hw]
        orphans = [s for s, home in homes if home is None]
        for s, home in homes:
            if home is None:
                continue
            if any(abs(o.ts_s - s.ts_s) <= self.join_s and self._with_new(s, o) for o in orphans):
                orphans.append(s)  # one onset on one component: with the new cause, not an older one
            else:
                placed.setdefault(home.number, []).append(s)
        for group in self._worst_first(self._by_cause(orphans)):
            opened.append(self._open_with(group, now_ts_s))
            placed[opened[-1].number] = group
        for s in fresh_job:
            latest = self._latest_fault(placed, s.component.removeprefix("job:"))
            if latest is None:
                latest = self._open_with([s], now_ts_s)
                opened.append(latest)
            placed.setdefault(latest.number, []).append(s)
        return placed, opened

    def _by_cause(self, orphans: list[Symptom]) -> list[list[Symptom]]:
        """The new symptoms no open incident explains, split by cause: two faults whose first signs land in one
        window open two incidents, as they do a window apart (a power limit lowered on one rack and a PCIe link
        degrading on another 5 s later). Two of them share an incident when the one would join the other's
        incident (`_linked`: a causal path and one onset), or both are signs of one cause on a component over
        both (`aiops.causal.co_signs`, wider than `_one_event`'s own sign: two nodes of one rack heating in the
        same seconds, a site-wide cap sent per rack), and so on transitively. Only groups holding some cause's
        own sign open incidents of their own; the rest (a late or idling rank, PFC pauses: what dates no cause)
        stay with the first of them, and with one such group every symptom goes in it, as before."""
        parent = list(range(len(orphans)))

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        for i, a in enumerate(orphans):
            for j in range(i):
                if root(i) != root(j) and self._together(a, orphans[j]):
                    parent[max(root(i), root(j))] = min(root(i), root(j))
        groups: dict[int, list[Symptom]] = {}
        for i, s in enumerate(orphans):
            groups.setdefault(root(i), []).append(s)
        anchored = [g for g in groups.values() if any(s.kind in OWN_SIGNS for s in g)]
        if len(anchored) < 2:
            return [orphans] if orphans else []
        for g in groups.values():
            if not any(s.kind in OWN_SIGNS for s in g):
                anchored[0].extend(g)
        return anchored

    def _worst_first(self, groups: list[list[Symptom]]) -> list[list[Symptom]]:
        """The incidents one window opens, in the order they are numbered: the one that already hurts first
        (`impact`'s severity), else as detected. A window dates every symptom at its end, so two faults whose
        signs first land in it look simultaneous; the one already throttling its GPU began before the one
        whose GPU is only warm for its power (two GPUs on two racks losing their cooling at one second, the
        worse reaching its slowdown point first), and the first incident is the one an operator reads first."""
        rank: dict[str, int] = {name: n for n, name in enumerate(SEVERITIES)}
        return sorted(groups, key=lambda g: -rank.get(impact(g, self.severity).severity, 1))

    def _together(self, a: Symptom, b: Symptom) -> bool:
        """Would new symptom `a` join an incident opened for new symptom `b` in the same window, or `b` one
        opened for `a` (`_home`'s rules between two onsets of one window)?"""
        if self._linked(a, b, [b]) or self._linked(b, a, [a]):
            return True
        if self._one_kill(a, b):
            return True
        if a.kind in NO_ANCHOR or b.kind in NO_ANCHOR:  # a late or idle rank anchors nothing
            return False
        labels_a, labels_b = symptom_labels(a.kind, a.detail), symptom_labels(b.kind, b.detail)
        return co_signs(a.kind, a.component, b.kind, b.component, self.rack_of, labels_a, labels_b)

    def _one_kill(self, a: Symptom, b: Symptom) -> bool:
        """Xid 45 (the driver's cleanup of a killed process) on two GPUs of one job in one window: the job's
        ranks killed together (a requeue, a drain), one event on every node they ran on."""
        job = self.job_of.get(a.component)
        return (
            a.kind == b.kind == "xid"
            and a.detail.get("xid") == b.detail.get("xid") == XID_KILLED
            and job is not None
            and self.job_of.get(b.component) == job
        )

    def _with_new(self, s: Symptom, orphan: Symptom) -> bool:
        """Does `s`, which found an open incident, go with `orphan` instead, a symptom of a new cause with
        about the same onset: on the same component, or `s` a rank's (idling or late: `NO_ANCHOR`) that the
        orphan's cause produces on its own node (a data loader stalling with its ranks idling in the same
        window goes with the loader, not with an older fault that holds only their job's slow steps)."""
        if orphan.component == s.component:
            return True
        if s.kind not in NO_ANCHOR or node_of(s.component, self.rack_of) != node_of(
            orphan.component, self.rack_of
        ):
            return False
        new, old = symptom_labels(orphan.kind, orphan.detail), symptom_labels(s.kind, s.detail)
        return one_cause(orphan.kind, orphan.component, s.kind, s.component, self.rack_of, new, old)

    def _home(self, s: Symptom, placed: dict[int, list[Symptom]]) -> _Open | None:
        """The open incident a new hardware symptom belongs to: one with a symptom it is linked to (`_linked`:
        a causal path and one cause, or a shared onset), else (for a rank waiting on its peers) one on a node of
        the same job, else one with no hardware symptom yet whose job this symptom reaches (`_reaches`: only
        job-level ones, a job reaches every rank of its own, not another job's),
        else one opened within `join_s` of this onset; None when it is independent of all. A waiting rank
        anchors nothing itself, so a later fault on its node is not taken for the cause it waited on."""
        related: list[_Open] = []
        same_job: list[_Open] = []
        job_only: list[_Open] = []
        simultaneous: list[_Open] = []
        job = self.job_of.get(s.component) if s.kind in PEER_WAIT else None
        for group in self.open:
            firsts = dict(group.firsts)  # each member as first seen (a symptom seen again keeps its onset)
            for p in placed.get(group.number, []):
                firsts.setdefault(_key(p), p)
            hardware = [m for m in firsts.values() if not m.component.startswith("job:")]
            explained = benign_explained({m.kind for m in hardware})  # the weather's: they anchor nothing
            anchors = [m for m in hardware if m.kind not in NO_ANCHOR and m.kind not in explained] or [
                m for m in hardware if m.kind not in explained
            ]
            if any(self._linked(s, m, anchors) for m in anchors):
                related.append(group)
            elif job is not None and (
                f"job:{job}" in {c for _, c, _ in firsts}
                or any(node_of(m.component, self.rack_of) in self.job_nodes.get(job, set()) for m in anchors)
            ):
                same_job.append(group)
            elif not hardware and any(
                self._reaches(s.component, c.removeprefix("job:"))
                for _, c, _ in firsts
                if c.startswith("job:")
            ):
                job_only.append(group)
            elif (
                abs(s.ts_s - group.opened_ts_s) <= self.join_s
                and any(m.kind not in INFO for m in anchors)
                and self._one_event(s, anchors)
            ):
                simultaneous.append(group)
        for found in (related, same_job, job_only, simultaneous):
            if found:
                return found[-1]
        return None

    def _linked(self, s: Symptom, member: Symptom, anchors: list[Symptom]) -> bool:
        """Does new symptom `s` share a cause with an incident's `member` (as first seen; `anchors`: the
        incident's members that date a cause)? Both must lie on one causal path
        (`aiops.causal.symptoms_related`), and then: their onsets within `join_s` (one event), or `s` a
        consequence of no cause's signs (PFC pauses) on the same node, or one cause that the member is an own
        sign of produces `s` too (a node's heat spreading over its GPUs, a rack's coolant heating its nodes;
        the symptoms narrow the causes: a power limit is no sign of heat, a limit lowered below what a DCIM cap
        asked is no sign of the cap) while that cause is still spreading (`_spreading`), or `s` is the own sign
        of a cause that produces the member, reported at most `cause_lag_s` after it by a rule that needs a
        baseline or several windows (a coolant drop; a DCIM signal or a counter is dated at its onset).
        Otherwise `s` is an independent fault: a PCIe fault on a GPU next to a hot one, a DCIM cap arriving
        minutes into a GPU's thermal fault, a real fault during benign ambient drift, a second GPU of a node
        overheating minutes after the first."""
        kind, component, rack_of = member.kind, member.component, self.rack_of
        if not symptoms_related(s.kind, s.component, kind, component, rack_of):
            return False
        if abs(s.ts_s - member.ts_s) <= self.join_s and kind not in INFO and s.kind not in INFO:
            return True  # (a slow benign condition has no onset to share: its ts is when it crossed a line)
        node = node_of(s.component, rack_of)
        if s.kind not in SIGNED and node is not None and node == node_of(component, rack_of):
            return True
        new, old = _allowed(s), _allowed(member)
        via = one_cause_labels(kind, component, s.kind, s.component, rack_of, old, new)
        if via and self._active(member, s.ts_s) and self._spreading(s, member, via, anchors):
            return True
        late = s.kind in PERSISTENT and 0.0 <= s.ts_s - member.ts_s <= self.cause_lag_s
        return late and one_cause(s.kind, s.component, kind, component, rack_of, new, old)

    def _seen(self, s: Symptom, ts_s: float) -> None:
        key = _key(s)
        self.last_seen[key] = max(ts_s, self.last_seen.get(key, ts_s))

    def _active(self, member: Symptom, ts_s: float) -> bool:
        """Is the incident's `member` still seen at `ts_s` (within `settle_s` of its last sighting)? A cause
        whose own signs went quiet produces nothing new: drops on a NIC a minute after the bulk transfer that
        queued it ended (its lanes back, its queue drained) are a new cause's (ECN off on that port), not the
        transfer's. A member not held yet (a new symptom of the same window) is."""
        last = self.last_seen.get(_key(member))
        return last is None or ts_s - last <= self.settle_s

    def _one_event(self, s: Symptom, anchors: list[Symptom]) -> bool:
        """May `s`, on a component no anchor of an incident is causally related to but with its onset within
        `join_s` of the incident's opening, be that incident's cause seen once more? Only where one cause could
        produce both, on a component of its target kinds over both (`one_cause`, either way, narrowed by what
        each symptom allows: a lane policy over two NICs, a DCIM cap over two racks); a symptom that is no
        cause's sign says nothing either way and joins as before. Otherwise the coincidence is two faults that
        happen to start together (a PCIe link degrading on one node 15 s after a data loader stalled on
        another; an input-bound rank next to a GPU's heat), and the symptom is grouped by its own cause, not
        by where the detection windows happened to fall."""
        if s.kind not in SIGNED:
            return True
        rack_of, new = self.rack_of, symptom_labels(s.kind, s.detail)
        for m in anchors:
            old = symptom_labels(m.kind, m.detail)
            if one_cause(m.kind, m.component, s.kind, s.component, rack_of, old, new) or one_cause(
                s.kind, s.component, m.kind, m.component, rack_of, new, old
            ):
                return True
        return False

    def _spreading(self, s: Symptom, member: Symptom, via: frozenset[str], anchors: list[Symptom]) -> bool:
        """Is `s`, which one of the causes `via` could produce from `member`, part of that cause's spread? A
        cause that reaches several components (a node's cooling its GPUs, a rack's coolant its nodes) shows on
        them one after another, each onset soon after the last; once its symptoms have settled (no new onset of
        its signs on another component for `settle_s`), an own sign of a cause on yet another component is a
        new onset: a second GPU's cooling failing, a second limit lowered, not the first cause spreading. The
        spread is counted on the components beside `s`, not over it (a rack's coolant drop is where its cause
        sits: the heat it brings to the nodes lags it by the thermal time constants, and its first effect is
        never late; the weather over the racks is the fleet's). The same component and a consequence that dates
        no cause (a rank idling, a GPU held at its limit by SwPowerCap, a limit brought to a DCIM cap's level)
        spread without settling."""
        if s.component == member.component or not own_sign_of(s.kind, s.detail):
            return True
        signs = frozenset(k for label in via for k in SPEC[label].anchors | SPEC[label].shared_anchors)
        beside = [
            m.ts_s
            for m in anchors
            if m.kind in signs
            and m.component != s.component
            and not covers(m.component, s.component, self.rack_of)
        ]
        return not beside or s.ts_s - max(beside) <= self.settle_s

    def _open_with(self, symptoms: list[Symptom], now_ts_s: float) -> _Open:
        """A new incident for symptoms that no open incident explains (opened at their earliest onset)."""
        opening = [s for s in symptoms if s.kind in STRONG or s.kind in WEAK_KINDS_TO_OPEN] or symptoms
        group = _Open(self.next_number, opened_ts_s=min(s.ts_s for s in opening), last_ts_s=now_ts_s)
        self.next_number += 1
        self.open.append(group)
        return group

    def allocate_id(self) -> str:
        """A new id from this tracker's numbering, for an incident it does not keep (an early warning's,
        aiops/detect/early_watch.py; a condition's, aiops/service/conditions.py)."""
        number = self.next_number
        self.next_number += 1
        return f"{self.id_prefix}{number:04d}"

    def open_incidents(self) -> list[Incident]:
        return [self._incident(g) for g in self.open]

    def incidents(self) -> list[Incident]:
        groups = sorted([*self.closed, *self.open], key=lambda g: g.number)
        return [self._incident(g) for g in groups]

    def _incident(self, group: _Open) -> Incident:
        return _to_incident(group, self.id_prefix, self.severity)


def _to_incident(group: _Open, id_prefix: str, policy: SeverityConfig) -> Incident:
    found = impact(group.symptoms, policy)
    severity = worse(found.severity, group.severity_floor)
    sighted = group.firsts_in_order()
    components = sorted({component for _, component in group.sighted})
    first = sighted[0].first
    title = f"{first.kind.replace('_', ' ')} on {first.component}"
    others = [c for c in components if c != first.component]
    if others:  # a count by kind, not a list: "(also 63 GPUs, 1 job)"
        counts: dict[str, int] = {}
        for c in others:
            kind = component_kind(c) or "other"
            counts[kind] = counts.get(kind, 0) + 1
        title += " (also " + ", ".join(_counted(n, k) for k, n in sorted(counts.items(), key=_by_count)) + ")"
    return Incident(
        incident_id=f"{id_prefix}{group.number:04d}",
        opened_ts_s=group.opened_ts_s,
        last_ts_s=group.last_ts_s,
        title=title,
        severity=severity,
        components=components,
        symptoms=[_compact(seen) for seen in sighted],
        resolved_ts_s=group.resolved_ts_s,
        impact=found.summary,
    )


_PLURAL = {
    "gpu": "GPUs",
    "nic": "NICs",
    "node": "nodes",
    "rack": "racks",
    "job": "jobs",
    "accel": "accelerators",
}


def _by_count(item: tuple[str, int]) -> tuple[int, str]:
    return -item[1], item[0]


def _counted(n: int, kind: str) -> str:
    word = _PLURAL.get(kind, "components")
    return f"{n} {word[:-1] if n == 1 and word.endswith('s') else word}"


def _compact(seen: _Sighted) -> Symptom:
    """One (kind, component) as stored: its earliest sighting, with how many windows it was seen in and when
    last."""
    detail = dict(seen.first.detail)
    detail["windows"] = seen.windows
    detail["last_ts_s"] = seen.last_ts_s
    return seen.first.model_copy(update={"detail": detail})
