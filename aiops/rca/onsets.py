"""Scoring each cause around its symptom's onset, not averaged over the incident (issue 14, item 1).

A short fault inside a long incident (an ECN misconfiguration for 90 s in a 30-minute thermal incident) vanishes
in facts averaged over the whole incident: its NIC's CE rate over 30 minutes looks like its peers'. So every
hardware symptom of the incident gets an *onset window* (`onset_window`): from `ONSET_S` before its onset to
`ONSET_S` after it or to the symptom's last window, whichever is later, clipped to the incident; the telemetry
of the fault itself (`Window.opened_s`, what the NIC facts sum over) starts `DETECT_LAG_S` before the onset,
since a symptom is reported once its rule has held for two 10 s windows. The reference stays the incident's
(telemetry before the incident).

Each scorer runs on the facts of each distinct window (`Facts.at`: one query per fact and window, whatever the
number of symptoms, GPUs or NICs), so the component is compared with its peers over the same window. A
candidate is then scored from the window of its *anchoring symptom* (`anchoring`): the earliest of the
incident's symptoms that it can explain, preferring the symptoms its label produces and those on its own
component. Windows that cover most of the incident are the incident's own facts; a cause with no anchoring
symptom, or one its anchor's window does not show, keeps its whole-incident score (the fallback).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from aiops.causal import benign_explained, covers, node_of, symptom_labels, symptoms_related
from aiops.labels import HEAT_AND_POWER, SPEC, SPECS
from aiops.models import Incident, Symptom
from aiops.rca.candidate import Candidate
from aiops.rca.facts import ONSET_S, Facts, Window

Scorer = Callable[[Facts], list[Candidate]]

DETECT_LAG_S = 20.0  # a symptom is reported after its rule held for two 10 s windows
WHOLE_SHARE = 0.8  # an onset window this much of the incident's is the incident's own
MERGE_S = 20.0  # onset windows whose start and end are this close are one
MAX_WINDOWS = 12  # onset windows per incident (earliest first); later symptoms use the incident's facts
NEAR_S = (
    30.0  # a symptom reported this close to a cause's own onset is that onset (a window, or a scrape, late)
)
PEER_WAIT = frozenset({"gpu_idle_in_job"})  # as in aiops.detect.incidents (rca may not import detect)
# The symptom kinds each label produces (its spec in aiops/labels.py): its own signs first, then those it
# shares with other causes. A cause is anchored preferably on its own signs, so a NIC's ECN fault is not dated
# by a GPU's heat on the same node.
SIGNS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    spec.label: (spec.anchors, spec.shared_anchors) for spec in SPECS if spec.anchors or spec.shared_anchors
}


def hardware_symptoms(incident: Incident) -> list[Symptom]:
    """The symptoms that can anchor a cause: not a job's, and not a rank idling while its job waits (unless the
    incident has nothing else)."""
    hardware = [s for s in incident.symptoms if not s.component.startswith("job:")]
    return [s for s in hardware if s.kind not in PEER_WAIT] or hardware


def anchoring(label: str, component: str, incident: Incident, rack_of: dict[str, str]) -> Symptom | None:
    """The symptom that dates a cause: among the incident's hardware symptoms that `component` can explain
    (`aiops.causal`), those the label produces and those closest to the component first, then the earliest."""
    kind = "gpu_throttle" if label in HEAT_AND_POWER else label
    found = [
        s
        for s in hardware_symptoms(incident)
        if symptoms_related(kind, component, s.kind, s.component, rack_of) or paused_by(label, s.kind)
    ]
    if not found:
        return None
    own, shared = SIGNS.get(label, (frozenset(), frozenset()))

    def preference(s: Symptom) -> tuple[int, int, float]:
        sign = 0 if s.kind in own else 1 if s.kind in shared else 2
        return sign, _distance(component, s.component), s.ts_s

    return min(found, key=preference)


def own_sign(
    label: str, component: str, incident: Incident, rack_of: dict[str, str], near_ts_s: float | None = None
) -> Symptom | None:
    """The earliest of the incident's symptoms that is an own sign of `label` (its spec's `anchors`) on a
    component that `component` covers: the cause itself seen in this incident, not only its consequences (nor
    what a benign condition of the incident explains: a rack inlet that ambient drift raised). With
    `near_ts_s` (when the cause began, as its scorer read it: a limit's lowering), only signs within `NEAR_S` of
    it: a node's limits lowered minutes after one of its GPUs' were is not seen in that GPU's incident."""
    own = SIGNS.get(label, (frozenset(), frozenset()))[0] - benign_explained(
        {s.kind for s in incident.symptoms}
    )
    found = [
        s
        for s in incident.symptoms
        if s.kind in own
        and covers(component, s.component, rack_of)
        and label in (symptom_labels(s.kind, s.detail) or {label})  # a GPU throttled for heat is no brake's
        and (near_ts_s is None or abs(s.ts_s - near_ts_s) <= NEAR_S)
    ]
    return min(found, key=lambda s: s.ts_s) if found else None


def paused_by(label: str, symptom_kind: str) -> bool:
    """Symptoms that anchor the label wherever they are seen (its spec's `paused_by`): on a lossless fabric a
    port without ECN pauses the NIC that sends to it (its ring peer, on any node), so PFC pauses received
    anchor an ECN candidate."""
    spec = SPEC.get(label)
    return spec is not None and symptom_kind in spec.paused_by


def _distance(a: str, b: str) -> int:
    """0: the same component or one inside the other (a node and its GPU); 1: the same node; 2: further."""
    if a == b or a.startswith(b + "/") or b.startswith(a + "/"):
        return 0
    node = node_of(a)
    return 1 if node is not None and node == node_of(b) else 2


def last_seen_ts_s(symptom: Symptom) -> float:
    """When the symptom was last seen (`aiops.detect.incidents` keeps it in its detail), else its onset."""
    value = symptom.detail.get("last_ts_s")
    return float(value) if isinstance(value, (int, float)) and value >= symptom.ts_s else symptom.ts_s


def onset_window(symptom: Symptom, whole: Window) -> Window:
    """[onset - ONSET_S, onset + max(ONSET_S, the symptom's duration)], clipped to the incident's window; the
    incident's own window when that covers most of it."""
    start_s = max(whole.start_s, symptom.ts_s - ONSET_S)
    end_s = min(whole.end_s, max(symptom.ts_s + ONSET_S, last_seen_ts_s(symptom) + 10.0))
    if end_s - start_s >= WHOLE_SHARE * (whole.end_s - whole.start_s) or end_s <= start_s:
        return whole
    opened_s = min(max(start_s, symptom.ts_s - DETECT_LAG_S), end_s)
    return replace(whole, start_s=start_s, end_s=end_s, opened_s=opened_s)


def distinct_windows(symptoms: Sequence[Symptom], whole: Window) -> dict[int, Window]:
    """Each symptom's onset window (by index into `symptoms`), with windows whose start and end lie within
    `MERGE_S` of each other made one (their union), at most `MAX_WINDOWS` of them (earliest onsets first; the
    symptoms beyond fall back to the incident's window)."""
    order = sorted(range(len(symptoms)), key=lambda i: symptoms[i].ts_s)
    groups: list[tuple[Window, list[int]]] = []
    out: dict[int, Window] = {}
    for i in order:
        w = onset_window(symptoms[i], whole)
        if w is whole:
            out[i] = whole
            continue
        for g, (seen, members) in enumerate(groups):
            if abs(seen.start_s - w.start_s) <= MERGE_S and abs(seen.end_s - w.end_s) <= MERGE_S:
                union = replace(
                    seen,
                    start_s=min(seen.start_s, w.start_s),
                    end_s=max(seen.end_s, w.end_s),
                    opened_s=min(seen.opened_s, w.opened_s),
                )
                groups[g] = (union, [*members, i])
                break
        else:
            if len(groups) < MAX_WINDOWS:
                groups.append((w, [i]))
            else:
                out[i] = whole
    for w, members in groups:
        for i in members:
            out[i] = w
    return out


@dataclass(frozen=True)
class Scored:
    """The candidates of one incident, each scored from its anchoring symptom's onset window."""

    candidates: list[Candidate]
    windows: int  # distinct onset windows scored besides the incident's own


def score_around_onsets(facts: Facts, incident: Incident, scorers: Sequence[Scorer]) -> Scored:
    """Run `scorers` on the incident's facts and on each distinct onset window's; keep, per (label,
    component), the candidate from its anchoring symptom's window, else the whole incident's."""
    whole = _best(c for scorer in scorers for c in scorer(facts))
    symptoms = hardware_symptoms(incident)
    by_symptom = distinct_windows(symptoms, facts.window)
    windows = {_key(w): w for w in by_symptom.values() if w is not facts.window}
    per_window = {
        key: _best(c for scorer in scorers for c in scorer(facts.at(w))) for key, w in windows.items()
    }
    rack_of = facts.racks_of_nodes()
    index = {id(s): i for i, s in enumerate(symptoms)}
    chosen: dict[tuple[str, str], Candidate] = {}
    for found in [whole, *per_window.values()]:
        for key in found:
            if key in chosen:
                continue
            label, component = key
            anchor = anchoring(label, component, incident, rack_of)
            own = by_symptom.get(index[id(anchor)]) if anchor is not None else None
            window_found = per_window.get(_key(own)) if own is not None and own is not facts.window else None
            if window_found is not None and key in window_found and anchor is not None and own is not None:
                c = window_found[key]
                c.summary += (
                    f" (scored over +{own.start_s - incident.opened_ts_s:.0f} to "
                    f"+{own.end_s - incident.opened_ts_s:.0f} s of the incident, around the onset of "
                    f"{anchor.kind} on {anchor.component})"
                )
                chosen[key] = c
            elif key in whole:
                chosen[key] = whole[key]
    return Scored(list(chosen.values()), len(windows))


def _key(w: Window) -> tuple[float, float]:
    return (round(w.start_s, 3), round(w.end_s, 3))


def _best(candidates: Iterable[Candidate]) -> dict[tuple[str, str], Candidate]:
    best: dict[tuple[str, str], Candidate] = {}
    for c in candidates:
        key = (c.label, c.component)
        if key not in best or c.score > best[key].score:
            best[key] = c
    return best
