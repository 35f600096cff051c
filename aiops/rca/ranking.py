"""Ranking the candidates of one incident among the others: by the incident's own symptoms, their onset and the
jobs' loss.

- **Anchors.** A candidate is *anchored* in an incident when one of the incident's hardware symptoms sits on a
  component causally related to the candidate's (`aiops.causal`); its *onset* is that of its anchoring symptom
  (`aiops.rca.onsets.anchoring`: the earliest of those its label produces on its own component, else the
  earliest of the nearest others), the symptom whose onset window it was scored from.
  A candidate anchored only in another incident that overlaps what this one's facts read (its window, and the
  look-back before it over which the driver's Xids are read) is that incident's cause seen through a long
  window: it is lowered here (`FOREIGN_FACTOR`), so a later independent fault does not outrank the fault that
  opened the incident, and a rack's DCIM cap explains only what lies in that rack. So is one
  whose own signs (`aiops.rca.onsets.own_sign`: a DCIM signal, a PCIe replay, a coolant drop) lie in another
  overlapping incident and not in this one, even where this incident holds consequences it shares (a GPU's
  throttling, which a later fleet-wide cap also lowers): the cause belongs to the incident its own signs opened.
  Such a cause, explained by its own incident, also ranks below every candidate this incident anchors (of at
  least `OWN_FLOOR`): a cause that has no incident of its own comes first here, whatever the two scores.
- **Onset and impact.** Among anchored candidates, the earliest onset gains `ONSET_BONUS` and the impact on jobs
  gains up to `IMPACT_BONUS`: GPU-seconds lost by the jobs whose ranks sit under the candidate's component,
  counted from its onset (`Facts.job_loss`: each step's time over the job's reference, times the job's GPUs,
  plus a stall's wait). A fault on a node no job uses loses nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from aiops.causal import is_everywhere, is_facility, node_of
from aiops.models import Incident
from aiops.rca.candidate import Candidate
from aiops.rca.facts import LOOKBACK_S, Facts
from aiops.rca.onsets import anchoring, own_sign

FOREIGN_FACTOR = 0.5
OWN_FLOOR = 0.3  # anchored candidates scored below this are noise: a foreign cause is not put under them
BELOW_OWN = 0.005
ONSET_BONUS = 0.03
IMPACT_BONUS = 0.02


@dataclass(frozen=True)
class Anchor:
    onset_ts_s: float
    kind: str
    component: str


def anchor(candidate: Candidate, incident: Incident, rack_of: dict[str, str]) -> Anchor | None:
    """The incident's hardware symptom that the candidate's component explains and that dates it
    (`aiops.rca.onsets.anchoring`: its label's own signs and its own component first, then the earliest)."""
    found = anchoring(candidate.label, candidate.component, incident, rack_of)
    return None if found is None else Anchor(found.ts_s, found.kind, found.component)


def rank(
    facts: Facts, incident: Incident, others: Sequence[Incident], candidates: list[Candidate]
) -> list[Candidate]:
    """Adjust scores (foreign causes, onset, impact) and sort, best first."""
    rack_of = facts.racks_of_nodes()
    # the incidents whose symptoms this one's facts can see: the window's, and the look-back before it that the
    # widest fact reads (the driver's Xids, `Facts.xids`), so an Xid whose incident closed before the window
    # began is that incident's cause here too, not a fresh one
    seen_from_s = facts.window.start_s - LOOKBACK_S
    overlapping = [
        o
        for o in others
        if o.incident_id != incident.incident_id
        and o.opened_ts_s <= facts.window.end_s
        and o.last_ts_s >= seen_from_s
    ]
    anchors: dict[int, Anchor] = {}
    explained: list[int] = []  # candidates whose cause another incident holds
    for i, c in enumerate(candidates):
        own = anchor(c, incident, rack_of)
        # the cause's own signs (a DCIM signal, a PCIe replay) were seen in another incident, not here: this
        # incident holds only consequences it shares with its own cause
        elsewhere = None
        if own_sign(c.label, c.component, incident, rack_of, c.onset_ts_s) is None:
            elsewhere = next(
                (o for o in overlapping if own_sign(c.label, c.component, o, rack_of, c.onset_ts_s)), None
            )
        if own is not None and elsewhere is None:
            anchors[i] = own
            onset = facts.around_onset(own.component, own.onset_ts_s)
            if onset is not None:
                c.evidence.append(
                    onset.model_copy(update={"claim": f"{own.kind} on {own.component}: {onset.claim}"})
                )
            continue
        foreign = elsewhere or next((o for o in overlapping if anchor(c, o, rack_of) is not None), None)
        if foreign is not None and (elsewhere is not None or not is_everywhere(c.component)):
            c.score *= FOREIGN_FACTOR
            c.summary += f" (its symptoms opened {foreign.incident_id}, not this incident)"
            explained.append(i)
    # a cause its own incident explains ranks below every cause this incident's symptoms anchor (one that has
    # no incident of its own: a loader stall seen only here is not pushed down by an NVLink fault named there)
    here = [candidates[i].score for i in anchors if candidates[i].score >= OWN_FLOOR]
    for i in explained:
        if here:
            candidates[i].score = min(candidates[i].score, min(here) - BELOW_OWN)
    strong = {i: a for i, a in anchors.items() if candidates[i].score >= 0.5}
    if len(strong) >= 2:
        earliest = min(a.onset_ts_s for a in strong.values())
        losses = {
            i: facts.job_loss(_nodes(candidates[i].component, rack_of), a.onset_ts_s)
            for i, a in strong.items()
        }
        top_loss = max(losses.values())
        for i, a in strong.items():
            c = candidates[i]
            if a.onset_ts_s <= earliest:
                c.score += ONSET_BONUS
            if top_loss > 0:
                c.score += IMPACT_BONUS * losses[i] / top_loss
            c.summary += (
                f"; onset {a.kind} on {a.component} at +{a.onset_ts_s - incident.opened_ts_s:.0f} s, "
                f"{losses[i]:.0f} GPU-seconds lost by its jobs since"
            )
    return sorted(candidates, key=lambda c: (-c.score, c.label, c.component))


def _nodes(component: str, rack_of: dict[str, str]) -> set[str] | None:
    """The nodes under a component (None: every node)."""
    if is_everywhere(component):
        return None
    if is_facility(component, rack_of):
        return {n for n, r in rack_of.items() if r == component}
    node = node_of(component, rack_of)
    return {node} if node is not None else None
