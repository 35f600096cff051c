"""Scoring of several expected causes per scenario (the list form of `expect`), on the analyst's output alone.

A cause's fault window is its own `start_s`/`end_s` when given, else the window of the fault with the same kind
and target, else the whole run. The contract (docs/ARCHITECTURE.md) counts a cause among "the incidents opened
after each cause's fault began": an incident is a candidate for a cause when it opened at or after the start of
the cause's window. An incident opened earlier (another fault's, into which this one was merged) does not find
a later cause: the analyst must open an incident for it.

- a cause is *found* (recall@3) when a candidate incident has a hypothesis with the cause's label on the cause's
  component among its first three; scope-like components (`fleet`, `rack{r}`, `node{n}`) that cover the same
  set of GPUs in the scenario's cluster are the same component (`same_scope`: on a one-rack cluster `fleet` is
  `rack0`; a rack of one node is that node), never a GPU or NIC and its node;
- an incident *explains* a cause when it is a candidate with the cause among its first three; incident
  precision = incidents explaining some expected cause / incidents opened;
- the confusion table counts, per expected label, the top-1 label of the incident that found the cause (else
  of the first candidate incident, the answer the operator saw), or `missed` when no incident opened after the
  cause began; a healthy run adds a `healthy` row: `healthy` when no incident opened, else the first
  incident's top-1 label.

Only this module and evals/harness.py read a scenario's `faults` and `expect`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aiops.labels import Label, component_kind
from aiops.models import Diagnosis
from aiops.scenarios import ClusterSpec, Scenario

DETECT_GRACE_S = 60.0
TOP_K = 3
MISSED = "missed"
NO_HYPOTHESIS = "none"  # an incident the analyst could not explain


@dataclass(frozen=True)
class CauseWindow:
    root_cause: str
    component: str
    start_ts_s: float
    end_ts_s: float  # already widened by DETECT_GRACE_S
    same_as: frozenset[str] = frozenset()  # other names of the same scope in the scenario's cluster


SCOPE_KINDS = ("fleet", "rack", "node")


def _scope_nodes(component: str, cluster: ClusterSpec) -> frozenset[int] | None:
    """The nodes a scope-like component covers (each node holds the same GPUs), None for any other name or
    one outside the cluster."""
    kind = component_kind(component)
    if kind == "fleet":
        return frozenset(range(cluster.nodes))
    if kind == "rack":
        rack = int(component.removeprefix("rack"))
        per = cluster.nodes_per_rack
        return frozenset(range(rack * per, (rack + 1) * per)) if rack < cluster.racks else None
    if kind == "node" and component.removeprefix("node").isdecimal() and component.isascii():  # twin: node{n}
        node = int(component.removeprefix("node"))
        return frozenset([node]) if node < cluster.nodes else None
    return None


def same_scope(component: str, cluster: ClusterSpec) -> frozenset[str]:
    """Every scope-like name (`fleet`, racks, nodes) that covers the same GPUs as `component` in `cluster`,
    itself included; just `component` when it is not scope-like (a GPU is never its node, nor a NIC)."""
    nodes = _scope_nodes(component, cluster)
    if nodes is None:
        return frozenset([component])
    names = ["fleet", *(f"rack{r}" for r in range(cluster.racks))]
    if len(nodes) == 1:  # only a rack, or the fleet, of one node can equal a node
        names.append(f"node{min(nodes)}")
    return frozenset([component, *(name for name in names if _scope_nodes(name, cluster) == nodes)])


def matches(root_cause: str, component: str, expected_root_cause: str, expected: frozenset[str]) -> bool:
    """A hypothesis names the expected cause: same label, and a component among the expected scope's names."""
    return root_cause == expected_root_cause and component in expected


def cause_windows(scenario: Scenario, epoch_ts_s: float) -> list[CauseWindow]:
    """Each expected cause with its fault window in absolute seconds (`epoch_ts_s` is the run's t=0)."""
    out = []
    for cause in scenario.expected_causes:
        fault = next(
            (f for f in scenario.faults if (f.kind, f.target) == (cause.root_cause, cause.component)), None
        )
        start_s = cause.start_s if cause.start_s is not None else (fault.start_s if fault else 0.0)
        end_s = cause.end_s
        if end_s is None and cause.start_s is None and fault and fault.duration_s is not None:
            end_s = fault.start_s + fault.duration_s
        end_s = min(end_s if end_s is not None else scenario.duration_s, scenario.duration_s)
        out.append(
            CauseWindow(
                cause.root_cause,
                cause.component,
                epoch_ts_s + start_s,
                epoch_ts_s + end_s + DETECT_GRACE_S,
                same_scope(cause.component, scenario.cluster),
            )
        )
    return out


def _candidate(d: Diagnosis, w: CauseWindow) -> bool:
    """The incident opened after the cause's fault began (the contract's rule)."""
    return d.incident.opened_ts_s >= w.start_ts_s


def _rank(d: Diagnosis, w: CauseWindow) -> int | None:
    """1-based rank of the cause among the incident's first `TOP_K` hypotheses, or None."""
    names = w.same_as | {w.component}
    for i, h in enumerate(d.hypotheses[:TOP_K]):
        if matches(h.root_cause, h.component, w.root_cause, names):
            return i + 1
    return None


def _top_label(d: Diagnosis) -> str:
    return d.hypotheses[0].root_cause if d.hypotheses else NO_HYPOTHESIS


def score_causes(windows: Sequence[CauseWindow], diagnoses: Sequence[Diagnosis]) -> dict[str, Any]:
    """Per-cause findings, recall@3, incident precision and this case's confusion rows (see the module doc)."""
    ordered = sorted(diagnoses, key=lambda d: d.incident.opened_ts_s)
    causes: list[dict[str, Any]] = []
    explaining: set[str] = set()
    confusion: list[tuple[str, str]] = []
    for w in windows:
        overlapping = [d for d in ordered if _candidate(d, w)]
        ranked = [(d, r) for d in overlapping if (r := _rank(d, w)) is not None]
        explaining.update(d.incident.incident_id for d, _ in ranked)
        hit = ranked[0] if ranked else None
        if hit is not None:
            confusion.append((w.root_cause, _top_label(hit[0])))
        else:
            confusion.append((w.root_cause, _top_label(overlapping[0]) if overlapping else MISSED))
        causes.append(
            {
                "root_cause": w.root_cause,
                "component": w.component,
                "found": hit is not None,
                "rank": hit[1] if hit else None,
                "incident": hit[0].incident.incident_id if hit else None,
            }
        )
    if not windows:  # healthy: right only when nothing opened
        confusion.append((Label.HEALTHY.value, _top_label(ordered[0]) if ordered else Label.HEALTHY.value))
    found = sum(c["found"] for c in causes)
    return {
        "causes": causes,
        "cause_recall_at_3": round(found / len(causes), 4) if causes else None,
        "incidents_opened": len(ordered),
        "incidents_explaining": len(explaining),
        "incident_precision": round(len(explaining) / len(ordered), 4) if ordered else None,
        "confusion": [list(pair) for pair in confusion],
    }


def confusion_table(cases: Iterable[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """expected label -> {top-1 label or `missed` -> count}, over every case's confusion rows."""
    table: dict[str, dict[str, int]] = {}
    for case in cases:
        for expected, got in case.get("confusion", []):
            row = table.setdefault(expected, {})
            row[got] = row.get(got, 0) + 1
    return {label: dict(sorted(row.items())) for label, row in sorted(table.items())}


def summarize_causes(cases: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Suite figures: recall@3 over every expected cause, incident precision over every incident opened."""
    causes = [c for case in cases for c in case.get("causes", [])]
    opened = sum(case.get("incidents_opened", 0) for case in cases)
    explaining = sum(case.get("incidents_explaining", 0) for case in cases)
    return {
        "expected_causes": len(causes),
        "cause_recall_at_3": round(sum(c["found"] for c in causes) / len(causes), 4) if causes else None,
        "incidents_opened": opened,
        "incident_precision": round(explaining / opened, 4) if opened else None,
        "confusion": confusion_table(cases),
    }
