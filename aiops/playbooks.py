"""Playbooks (the `playbooks` package's *.yaml, one per root-cause label): signature, checks and safe
remediations. They ship as package data, so an installed wheel finds them as a checkout does.

Remediations become guardrails `Action`s (proposer "analyst"): an action kind, a target template
(`{component}`, `{node}`, `{job}`) and parameters. Filing and executing them is the guardrails' business: the
pipeline (aiops/pipeline.py) files them as proposals; this module only computes them.

A remediation marked `computed: thermal` or `computed: allocator` is worked out from telemetry when the caller
has the store (`remediation_from_store`): the thermal manager's moves / capping fallback for the hypothesis'
nodes (aiops/control/thermal.py), or the power allocator's limits for the DCIM budget in force in its racks
(aiops/control/power.py). All of one source's actions take the place of that source's first remediation and
its other remediations are dropped (the manager chose a move or a cap, not both). Without the store, or when
the source has nothing for this component (no hotspot there; no budget in force), the templates stand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import cache
from importlib import resources
from importlib.abc import Traversable
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from aiops.errors import PlaybookError
from aiops.labels import DIAGNOSIS_LABELS, node_of
from aiops.models import Hypothesis
from guardrails.actions import Action

if TYPE_CHECKING:  # the store and the control laws load where actions are computed, not with the YAML:
    # `aiops investigate` reads the playbooks' next steps and must stay small (no DuckDB, Arrow or numpy)
    from aiops.store import Store

PROPOSER = "analyst"


def playbook_dir() -> Traversable:
    """The shipped playbooks (package data of the top-level `playbooks` package)."""
    return resources.files("playbooks")


class Remediation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    action: str
    target: str
    parameters: dict[str, Any] = {}
    physical: bool
    reason: str
    computed: Literal["thermal", "allocator"] | None = None  # worked out from telemetry when available


class Signature(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    supports: list[str]
    refutes: list[str]


class NextStep(BaseModel):
    """A check an operator runs to confirm or rule out the label: the command (`{gpu}`: the GPU's index or PCI
    bus id, `{gpu_index}`: its index only, `{host}`, `{nic}`: filled from the hypothesis' component where
    known, else left as `<gpu>`, `<gpu id>`, `<host>`, `<hca>`) and what its output shows."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    run: str
    shows: str


class Playbook(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    label: str
    title: str
    signature: Signature
    checks: list[str]
    remediations: list[Remediation]
    next_steps: list[NextStep] = []


@cache
def load_playbooks(directory: Traversable | None = None) -> dict[str, Playbook]:
    books: dict[str, Playbook] = {}
    where = directory if directory is not None else playbook_dir()
    for path in sorted((p for p in where.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name):
        try:
            book = Playbook.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")))
        except (ValidationError, yaml.YAMLError) as exc:
            raise PlaybookError(f"{path}: not a valid playbook: {exc}") from exc
        if book.label not in DIAGNOSIS_LABELS:
            raise PlaybookError(
                f"{path}: field 'label': unknown label '{book.label}' (allowed: {', '.join(DIAGNOSIS_LABELS)})"
            )
        books[book.label] = book
    return books


def _fill(template: str, hypothesis: Hypothesis, job: str | None) -> str:
    node = node_of(hypothesis.component) or hypothesis.component
    return template.format(
        component=hypothesis.component, node=node, job=f"job:{job}" if job else "job:unknown"
    )


def remediation(
    hypothesis: Hypothesis,
    job: str | None = None,
    *,
    computed: Mapping[str, Sequence[Action]] | None = None,
    now_ts_s: float = 0.0,
) -> list[Action]:
    """The playbook's remediations for a hypothesis as actions, templates filled. `computed` (source ->
    actions, from `computed_actions`) replaces the remediations marked with that source. Proposal ids are
    drafts (`draft-<i>`): filing gives each its own."""
    book = load_playbooks().get(hypothesis.root_cause)
    if book is None:
        return []
    out: list[Action] = []
    used: set[str] = set()
    for r in book.remediations:
        if r.computed is not None and computed is not None and r.computed in computed:
            if r.computed not in used:
                used.add(r.computed)
                out.extend(computed[r.computed])
            continue
        params = {
            k: (_fill(v, hypothesis, job) if isinstance(v, str) else v) for k, v in r.parameters.items()
        }
        out.append(
            Action(
                proposal_id="draft",
                kind=r.action,
                target=_fill(r.target, hypothesis, job),
                parameters=params,
                reason=r.reason,
                evidence=[e.claim for e in hypothesis.evidence[:4]],
                proposed_by=PROPOSER,
                created_ts_s=now_ts_s,
            )
        )
    return [a.model_copy(update={"proposal_id": f"draft-{i}"}) for i, a in enumerate(out)]


def _scope(store: Store, component: str) -> tuple[set[str], set[str]]:
    """(nodes, racks) a hypothesis' component covers, from the store's topology."""
    rows = store.query("SELECT component, parent FROM topology WHERE kind = 'node'")
    rack_of = {str(r["component"]): str(r["parent"]) for r in rows}
    if component == "fleet":
        nodes = set(rack_of)
    elif component in set(rack_of.values()):
        nodes = {n for n, rack in rack_of.items() if rack == component}
    else:
        node = node_of(component)
        nodes = {node} if node in rack_of else set()
    return nodes, {rack_of[n] for n in nodes}


def computed_actions(store: Store, hypothesis: Hypothesis, now_ts_s: float) -> dict[str, list[Action]]:
    """What the thermal manager and the power allocator advise for this hypothesis' component from telemetry
    at `now_ts_s`: "thermal" when the manager advises a move or a cap there, "allocator" when a DCIM budget
    (the newest `rack_samples.power_cap_kw` within 300 s, else the DCIM signal in force) is in force in its racks. Only the sources the
    playbook uses are computed."""
    book = load_playbooks().get(hypothesis.root_cause)
    sources = {r.computed for r in book.remediations if r.computed} if book else set()
    if not sources:
        return {}
    nodes, racks = _scope(store, hypothesis.component)
    from aiops.control.advice import allocation_advice, thermal_actions, thermal_advice
    from aiops.control.dcim_signals import dcim_caps_kw
    from aiops.control.readings import StoreReadings

    readings = StoreReadings(store, now_ts_s)
    out: dict[str, list[Action]] = {}
    if "thermal" in sources and nodes:
        advice = thermal_advice(readings)
        report = advice.report
        moves = [m for m in report.moves if m.from_node in nodes]
        caps = [c for c in report.power_caps if set(c.nodes) & nodes]
        if moves or caps:
            mine = replace(report, moves=moves, power_caps=caps)
            out["thermal"] = thermal_actions(mine, advice.inputs)
    if "allocator" in sources and racks:
        budgets = store.query(
            "SELECT rack, cap_kw FROM (SELECT rack, arg_max_null(power_cap_kw, ts_s) AS cap_kw FROM rack_samples "
            "WHERE ts_s <= ? AND ts_s > ? GROUP BY rack) WHERE cap_kw IS NOT NULL ORDER BY rack",
            [now_ts_s, now_ts_s - 300.0],
        )
        recorded = {str(r["rack"]) for r in budgets}
        signals = dcim_caps_kw(store, now_ts_s, now_ts_s)  # the DCIM signal in force now
        for rack in sorted(racks - recorded):
            cap_kw = signals.get(rack, signals.get("fleet"))
            if cap_kw is not None:
                budgets.append({"rack": rack, "cap_kw": cap_kw})
        in_scope = [r for r in budgets if str(r["rack"]) in racks]
        if in_scope:
            out["allocator"] = [
                a
                for r in in_scope
                for a in allocation_advice(
                    readings, float(r["cap_kw"]) * 1000.0, str(r["rack"]), id_prefix=f"power-{r['rack']}"
                ).actions
            ]
    return out


def remediation_from_store(
    store: Store, hypothesis: Hypothesis, job: str | None, now_ts_s: float | None = None
) -> list[Action]:
    """`remediation` with the computed remediations worked out from the store at `now_ts_s` (default: the
    newest GPU sample). Advice that cannot be computed (a store without the telemetry it reads) leaves the
    templates in place."""
    import duckdb

    when = now_ts_s if now_ts_s is not None else store.scalar("SELECT max(ts_s) FROM gpu_samples")
    computed: dict[str, list[Action]] = {}
    if when is not None:
        try:
            computed = computed_actions(store, hypothesis, float(when))
        except (duckdb.Error, ValueError, KeyError):
            computed = {}
    return remediation(hypothesis, job, computed=computed, now_ts_s=float(when or 0.0))
