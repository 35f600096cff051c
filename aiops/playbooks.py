"""Playbooks (the `playbooks` package's *.yaml, one per root-cause label): signature, checks and safe
remediations. They ship as package data, so an installed wheel finds them as a checkout does.

Remediations become guardrails `Action`s (proposer "analyst"): an action kind, a target template
(`{component}`, `{node}`, `{job}`) and parameters. Filing and executing them is the guardrails' business: the
pipeline (aiops/pipeline.py) files them through a plan (aiops/plans); this module only computes them.

The ladder (issue 34): every remediation names its rung (`step:`), and `remediation_steps` groups a playbook's
remediations by rung in `RUNGS` order, least disruptive and smallest blast radius first: observe, notify (a
ticket to the team that repairs it), configure, limit (the hot GPUs or node), move (the job, from its last
checkpoint), drain (the node), reset (a GPU, on the drained node), reboot, rma (a ticket with a captured
bug-report bundle). A plan proposes the first steps and keeps the others waiting until one fails.
A remediation may say how its effect is judged (`verify: {within_s, expect}`: the window after execution and
the check); without it the plan uses its rung's default (aiops/plans/ladder.py).

A remediation marked `computed: thermal` or `computed: allocator` is worked out from telemetry when the caller
has the store (`remediation_from_store`): the thermal manager's caps on the hot GPUs (aiops/control/capping.py)
and its moves off the hot node (aiops/control/thermal.py), or the power allocator's limits for the DCIM budget
in force in its racks (aiops/control/power.py). A computed action belongs to the rung of its kind
(`COMPUTED_RUNG`: a cap to `limit`, a move to `move`); a source that was computed decides its remediations'
rungs, "nothing here" included (no hot GPU a cap would cool now: no limit step; no idle node in a cool rack:
the job requeued without the hot node instead). Without the store, or when the source could not be computed
(no temperatures; no budget in force for the allocator), the templates stand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from importlib.abc import Traversable
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from aiops.errors import PlaybookError
from aiops.labels import DIAGNOSIS_LABELS, node_of
from aiops.models import Hypothesis
from aiops.safeload import safe_load
from guardrails.actions import Action

if TYPE_CHECKING:  # the store and the control laws load where actions are computed, not with the YAML:
    # `aiops investigate` reads the playbooks' next steps and must stay small (no DuckDB, Arrow or numpy)
    from aiops.store import Store

PROPOSER = "analyst"
RUNGS: tuple[str, ...] = (
    "observe",
    "notify",
    "configure",
    "limit",
    "move",
    "drain",
    "reset",
    "reboot",
    "rma",
)
Rung = Literal["observe", "notify", "configure", "limit", "move", "drain", "reset", "reboot", "rma"]
# The rung a computed action belongs to, by its kind (a computed entry's `step` must be its kind's rung).
COMPUTED_RUNG: dict[str, str] = {
    "set_power_limit": "limit",
    "reset_power_limit": "limit",
    "migrate_job": "move",
    "restart_job": "move",
}


def playbook_dir() -> Traversable:
    """The shipped playbooks (package data of the top-level `playbooks` package)."""
    return resources.files("playbooks")


class Verify(BaseModel):
    """How a remediation's effect is judged: `expect` (a check's name) within `within_s` of its execution."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    within_s: float = Field(gt=0, le=86_400)
    check: str = Field(alias="expect", min_length=1, max_length=64)  # `expect:` in YAML (contract 3)


class Remediation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    action: str
    target: str
    parameters: dict[str, Any] = {}
    physical: bool
    reason: str
    step: Rung  # its rung on the ladder (RUNGS)
    computed: Literal["thermal", "allocator"] | None = None  # worked out from telemetry when available
    verify: Verify | None = None  # None: the rung's default (aiops/plans/ladder.py)


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
    # the steps for an early warning that forecasts this label (aiops/detect/early_watch.py): nothing has
    # failed yet, so a diagnostic and a drain at the next checkpoint, never the fault's own ladder
    early_warning: list[Remediation] = []


@cache
def load_playbooks(directory: Traversable | None = None) -> dict[str, Playbook]:
    books: dict[str, Playbook] = {}
    where = directory if directory is not None else playbook_dir()
    for path in sorted((p for p in where.iterdir() if p.name.endswith(".yaml")), key=lambda p: p.name):
        try:
            book = Playbook.model_validate(safe_load(path.read_text(encoding="utf-8")))
        except (ValidationError, yaml.YAMLError) as exc:
            raise PlaybookError(f"{path}: not a valid playbook: {exc}") from exc
        if book.label not in DIAGNOSIS_LABELS:
            raise PlaybookError(
                f"{path}: field 'label': unknown label '{book.label}' (allowed: {', '.join(DIAGNOSIS_LABELS)})"
            )
        for i, r in enumerate([*book.remediations, *book.early_warning]):
            if r.computed is not None and COMPUTED_RUNG.get(r.action) != r.step:
                raise PlaybookError(
                    f"{path}: field 'remediations[{i}].step': a computed {r.action} belongs to the rung "
                    f"'{COMPUTED_RUNG.get(r.action, '(none: not a computed kind)')}', not '{r.step}' "
                    f"(computed kinds: {', '.join(COMPUTED_RUNG)})"
                )
        books[book.label] = book
    return books


def _fill(template: str, hypothesis: Hypothesis, job: str | None) -> str:
    node = node_of(hypothesis.component) or hypothesis.component
    return template.format(
        component=hypothesis.component, node=node, job=f"job:{job}" if job else "job:unknown"
    )


@dataclass(frozen=True)
class StepRemedy:
    """One rung of a playbook's ladder for a hypothesis: its actions (templates filled, or computed from
    telemetry) and the playbook entries behind them (their `verify`)."""

    rung: str
    actions: list[Action]
    entries: list[Remediation]
    computed: bool = False  # the actions were worked out from telemetry
    notes: list[str] = field(default_factory=list)  # why a computed rung advises less, or nothing, in numbers


def _template(r: Remediation, hypothesis: Hypothesis, job: str | None, now_ts_s: float) -> Action:
    params = {k: (_fill(v, hypothesis, job) if isinstance(v, str) else v) for k, v in r.parameters.items()}
    return Action(
        proposal_id="draft",
        kind=r.action,
        target=_fill(r.target, hypothesis, job),
        parameters=params,
        reason=r.reason,
        evidence=[e.claim for e in hypothesis.evidence[:4]],
        proposed_by=PROPOSER,
        created_ts_s=now_ts_s,
    )


def remediation_steps(
    hypothesis: Hypothesis,
    job: str | None = None,
    *,
    computed: Mapping[str, Sequence[Action]] | None = None,
    notes: Mapping[str, Sequence[str]] | None = None,
    now_ts_s: float = 0.0,
    warning: bool = False,
) -> list[StepRemedy]:
    """The playbook's ladder for a hypothesis: one `StepRemedy` per rung it uses, in `RUNGS` order. `computed`
    (source -> actions, from `computed_actions`) replaces that source's remediations in the rung of each
    computed action's kind; `notes` (rung -> why) say why a computed rung holds nothing. Proposal ids are
    drafts (`draft-<i>`, numbered across the ladder). `warning`: the hypothesis is an early warning's forecast:
    the playbook's `early_warning` steps instead of its ladder."""
    book = load_playbooks().get(hypothesis.root_cause)
    if book is None:
        return []
    out: list[StepRemedy] = []
    count = 0
    ladder = book.early_warning if warning else book.remediations
    for rung in RUNGS:
        entries = [r for r in ladder if r.step == rung]
        if not entries:
            continue
        actions: list[Action] = []
        used: set[str] = set()
        for r in entries:
            if r.computed is None or computed is None or r.computed not in computed:
                actions.append(_template(r, hypothesis, job, now_ts_s))
            elif r.computed not in used:  # the source decides its rung, even "nothing here"
                used.add(r.computed)
                actions.extend(a for a in computed[r.computed] if COMPUTED_RUNG.get(a.kind) == rung)
        numbered = [a.model_copy(update={"proposal_id": f"draft-{count + i}"}) for i, a in enumerate(actions)]
        count += len(numbered)
        said = list((notes or {}).get(rung, [])) if used else []
        out.append(StepRemedy(rung, numbered, entries, computed=bool(used), notes=said))
    return out


def remediation(
    hypothesis: Hypothesis,
    job: str | None = None,
    *,
    computed: Mapping[str, Sequence[Action]] | None = None,
    now_ts_s: float = 0.0,
) -> list[Action]:
    """Every action of the playbook's ladder for a hypothesis, in rung order (`remediation_steps` flattened)."""
    steps = remediation_steps(hypothesis, job, computed=computed, now_ts_s=now_ts_s)
    return [a for step in steps for a in step.actions]


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


@dataclass
class Computed:
    """What telemetry worked out for a hypothesis: source -> actions, and rung -> why a computed source
    advises nothing there (said in numbers, shown on the plan's step)."""

    actions: dict[str, list[Action]] = field(default_factory=dict)
    notes: dict[str, list[str]] = field(default_factory=dict)


def computed_actions(store: Store, hypothesis: Hypothesis, now_ts_s: float) -> Computed:
    """What the thermal manager and the power allocator advise for this hypothesis' component from telemetry
    at `now_ts_s`: "thermal" whenever GPU temperatures are at hand (aiops/control/capping.py: caps where they
    cut heat now, a move or a requeue off the hot node; possibly nothing, with why), "allocator" when a DCIM
    budget (the newest `rack_samples.power_cap_kw` within 300 s, else the DCIM signal in force) is in force in
    its racks. Only the sources the playbook uses are computed."""
    book = load_playbooks().get(hypothesis.root_cause)
    sources = {r.computed for r in book.remediations if r.computed} if book else set()
    out = Computed()
    if not sources:
        return out
    nodes, racks = _scope(store, hypothesis.component)
    from aiops.control.advice import allocation_advice, thermal_remedy
    from aiops.control.dcim_signals import dcim_caps_kw
    from aiops.control.readings import StoreReadings

    readings = StoreReadings(store, now_ts_s)
    if (
        "thermal" in sources and nodes and readings.thermal().gpus
    ):  # temperatures at hand: the manager decides
        remedy = thermal_remedy(readings, nodes)
        out.actions["thermal"] = remedy.actions
        out.notes.update(remedy.notes)
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
            out.actions["allocator"] = [
                a
                for r in in_scope
                for a in allocation_advice(
                    readings, float(r["cap_kw"]) * 1000.0, str(r["rack"]), id_prefix=f"power-{r['rack']}"
                ).actions
            ]
    return out


def steps_from_store(
    store: Store,
    hypothesis: Hypothesis,
    job: str | None,
    now_ts_s: float | None = None,
    *,
    warning: bool = False,
) -> list[StepRemedy]:
    """`remediation_steps` with the computed remediations worked out from the store at `now_ts_s` (default:
    the newest GPU sample). Advice that cannot be computed (a store without the telemetry it reads) leaves the
    templates in place."""
    import duckdb

    when = now_ts_s if now_ts_s is not None else store.scalar("SELECT max(ts_s) FROM gpu_samples")
    computed = Computed()
    if when is not None and not warning:  # a warning's steps are templates: nothing is hot or capped yet
        try:
            computed = computed_actions(store, hypothesis, float(when))
        except (duckdb.Error, ValueError, KeyError):
            computed = Computed()
    return remediation_steps(
        hypothesis,
        job,
        computed=computed.actions,
        notes=computed.notes,
        now_ts_s=float(when or 0.0),
        warning=warning,
    )


def remediation_from_store(
    store: Store, hypothesis: Hypothesis, job: str | None, now_ts_s: float | None = None
) -> list[Action]:
    """Every action of `steps_from_store`, in rung order."""
    return [a for step in steps_from_store(store, hypothesis, job, now_ts_s) for a in step.actions]
