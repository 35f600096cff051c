"""A playbook's ladder for one diagnosis (`aiops.playbooks.steps_from_store`: actions per rung) turned into plan
steps a person reads: a title, the targets, the expected effect, what it costs the job, how it is undone, and
the verify window, each in the numbers the store has (°C, W, steps/s, GPUs, GPU-hours; `facts.Facts`). Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiops.control.power import expected_throughput
from aiops.detect.effects import DEFAULTS as EFFECT_DEFAULTS
from aiops.plans.facts import Facts
from aiops.plans.ladder import LADDER
from aiops.playbooks import StepRemedy
from guardrails.actions import Action
from guardrails.registry import DEFAULT_REGISTRY

RESTART_S = 60.0  # a restart from a checkpoint: about a minute of loading (the twin's and a typical job's)
REBOOT_S = 600.0


@dataclass(frozen=True)
class StepDraft:
    step_no: int
    kind: str  # the rung
    title: str
    risk: str  # physical | digital
    actions: list[Action]
    effect: str
    cost: str
    rollback: str
    verify_within_s: float | None
    verify_expect: str | None
    reason: str
    hold: str = ""  # why it waits for a person even once the step before it failed ("" : it does not)

    @property
    def targets(self) -> list[str]:
        return [a.target for a in self.actions]


def _listed(items: Sequence[str], limit: int = 4) -> str:
    unique = list(dict.fromkeys(items))
    if len(unique) <= limit:
        return ", ".join(unique)
    return f"{', '.join(unique[: limit - 1])} and {len(unique) - limit + 1} more"


def _gpus_under(facts: Facts, target: str) -> list[str]:
    return [g for g in facts.power if g == target or g.startswith(target + "/")]


def _limit_w(action: Action, facts: Facts, gpu: str) -> float | None:
    params = action.parameters
    if isinstance(params.get("power_limit_w"), int | float):
        return float(params["power_limit_w"])
    if isinstance(params.get("fraction_of_tdp"), int | float) and gpu in facts.power:
        return float(params["fraction_of_tdp"]) * facts.power[gpu].tdp_w
    return None


def _job_text(facts: Facts) -> str:
    return f"job {facts.job[:40]} ({facts.job_gpus} GPUs)" if facts.job else "no job"


def _limit_cost(actions: Sequence[Action], facts: Facts) -> str:
    kept = 1.0
    capped = 0
    for action in actions:
        for gpu in _gpus_under(facts, action.target):
            limit_w = _limit_w(action, facts, gpu)
            if limit_w is not None:
                capped += 1
                demand_w = max(facts.power[gpu].want_w, facts.job_draw_w or 0.0)  # a throttled GPU draws less
                kept = min(kept, expected_throughput(limit_w, demand_w))
    if not capped:
        return LADDER["limit"].cost
    if not facts.job:
        return f"{capped} GPU(s) capped; no job runs there"
    loss = 1.0 - kept
    pace = f"; it runs at {facts.pace()}" if facts.pace() else ""
    demand = f" (its GPUs drew {facts.job_draw_w:.0f} W before the incident)" if facts.job_draw_w else ""
    return (
        f"{capped} GPU(s) capped; {_job_text(facts)} runs at its slowest rank and keeps at least {kept:.0%} of "
        f"its uncapped steps/s{demand}: at most {loss * facts.job_gpus:.1f} GPU-hours per hour of running{pace}"
    )


def _move_cost(facts: Facts) -> str:
    if not facts.job or not facts.job_gpus:
        return LADDER["move"].cost
    if facts.checkpoint_every_s:
        lost_s = facts.checkpoint_every_s / 2 + RESTART_S
        return (
            f"a restart of {_job_text(facts)} from its last checkpoint (every {facts.checkpoint_every_s:.0f} s): "
            f"on average {facts.checkpoint_every_s / 2:.0f} s of steps redone plus about {RESTART_S:.0f} s of "
            f"restart, about {lost_s * facts.job_gpus / 3600:.1f} GPU-hours"
        )
    return (
        f"a restart of {_job_text(facts)} from its last checkpoint: the steps since it plus about "
        f"{RESTART_S:.0f} s of restart, at least {RESTART_S * facts.job_gpus / 3600:.1f} GPU-hours"
    )


def _cost(rung: str, actions: Sequence[Action], facts: Facts) -> str:
    targets = [a.target for a in actions]
    if rung == "limit" and _restores(actions):
        pace = f" ({facts.pace()})" if facts.pace() else ""
        return f"nothing: {_job_text(facts)} runs at full speed again once the GPUs may draw what they need{pace}"
    if rung == "limit":
        return _limit_cost(actions, facts)
    if rung == "move":
        return _move_cost(facts)
    if rung == "drain":
        gpus = sum(facts.gpus_of(t) for t in targets)
        job = f"; {_job_text(facts)} restarts from its last checkpoint" if facts.job else ""
        return f"{_listed(targets)}: {gpus} GPU(s) out of service until resumed{job}"
    if rung == "reboot":
        gpus = sum(facts.gpus_of(t) for t in targets)
        return (
            f"{_listed(targets)} down about {REBOOT_S / 60:.0f} minutes: {gpus} GPU(s), about "
            f"{gpus * REBOOT_S / 3600:.1f} GPU-hours; its work moved when it was drained"
        )
    return LADDER[rung].cost


def _effect(rung: str, actions: Sequence[Action], facts: Facts) -> str:
    if rung == "limit" and _restores(actions):
        limits = sorted(
            {
                f"{facts.power[g].limit_w:.0f} W -> {facts.power[g].tdp_w:.0f} W"
                for a in actions
                for g in _gpus_under(facts, a.target)
            }
        )
        now = f" ({', '.join(limits[:3])})" if limits else ""
        return f"the GPUs' limit back to the default (TDP){now}: the power cap that throttled them is gone"
    return LADDER[rung].effect


def _rollback(rung: str, actions: Sequence[Action]) -> str:
    parts = []
    for a in actions:
        back: Any = a.rollback
        if isinstance(back, dict) and back.get("kind") == "set_power_limit":
            limit = (back.get("parameters") or {}).get("power_limit_w")
            parts.append(f"{back.get('target', a.target)} back to {limit} W")
        elif isinstance(back, dict) and back.get("kind"):
            params = ", ".join(f"{k}={v}" for k, v in sorted((back.get("parameters") or {}).items()))
            parts.append(
                f"{back['kind']} {back.get('target', a.target)}" + (f" ({params})" if params else "")
            )
        elif isinstance(back, str) and back:
            parts.append(back)
    if not parts:
        return LADDER[rung].rollback
    recorded = any(isinstance(a.rollback, dict) and a.rollback.get("kind") for a in actions)
    return f"{_listed(parts, 3)}" + (" (aiops actions rollback ID)" if recorded else "")


def _move_title(actions: Sequence[Action]) -> str:
    parts = []
    for a in actions:
        if a.kind == "restart_job":
            without = f" without {a.parameters['exclude']}" if a.parameters.get("exclude") else ""
            parts.append(f"requeue {a.target.removeprefix('job:')} from its last checkpoint{without}")
        elif a.kind == "migrate_job":
            parts.append(f"move the work on {a.target} to {a.parameters.get('to', 'another node')}")
    text = "; ".join(parts) or LADDER["move"].title.format(targets=_listed([a.target for a in actions]))
    return text[:1].upper() + text[1:]


def _restores(actions: Sequence[Action]) -> bool:
    return bool(actions) and all(a.kind == "reset_power_limit" for a in actions)


def _title(rung: str, actions: Sequence[Action]) -> str:
    if rung == "move":
        return _move_title(actions)
    if rung == "limit" and _restores(actions):
        return f"Restore the default power limit of {_listed([a.target for a in actions])}"
    if rung in ("notify", "rma"):
        teams = [str(a.parameters.get("team")) for a in actions if a.parameters.get("team")]
        about = _listed([a.target for a in actions if a.kind == "open_ticket"] or [a.target for a in actions])
        if rung == "notify":
            return f"Open a ticket for {_listed(teams) or 'the owners'} about {about}"
        return LADDER["rma"].title.format(targets=about)
    return LADDER[rung].title.format(targets=_listed([a.target for a in actions]))


def _hold(rung: str, actions: Sequence[Action], facts: Facts) -> str:
    """Why a step must wait for a person rather than follow a failure: moving or draining a job's node with no
    idle node left to requeue onto stops the job until the node is back (its cost is not a step's). Only where
    the store sees the cluster (the fleet, a simulated cluster): a node agent's sees one node and cannot tell."""
    if facts.idle_nodes or not facts.job or len(facts.node_gpus) < 2:
        return ""  # an idle node is there, or no job to stop, or this store sees one node (a node agent's)
    if rung == "move" and any(a.parameters.get("exclude") or a.kind == "migrate_job" for a in actions):
        return f"no idle node to requeue {_job_text(facts)} onto: it would not run"
    if rung == "drain":
        return (
            f"no idle node to requeue {_job_text(facts)} onto: draining stops it until "
            f"{_listed([a.target for a in actions])} is resumed"
        )
    return ""


def _empty(number: int, rung: str, notes: Sequence[str]) -> StepDraft:
    why = "; ".join(notes)[:2000]
    return StepDraft(
        number,
        rung,
        f"{LADDER[rung].name}: nothing to do",
        "digital",
        [],
        "",
        "",
        "",
        None,
        None,
        why,
        why,
    )


def _within_s(rung: str, actions: Sequence[Action]) -> float | None:
    """The step's verify window: the longest its kinds need (the closed loop's defaults, aiops.detect.effects),
    else the rung's; None for tickets, which are not judged."""
    windows = [EFFECT_DEFAULTS[a.kind][0] for a in actions if a.kind in EFFECT_DEFAULTS]
    return max(windows) if windows else LADDER[rung].within_s


def _expect(rung: str, actions: Sequence[Action]) -> str | None:
    checks = [EFFECT_DEFAULTS[a.kind][1] for a in actions if a.kind in EFFECT_DEFAULTS]
    return checks[0] if checks else LADDER[rung].check


def draft_steps(remedies: Sequence[StepRemedy], facts: Facts) -> list[StepDraft]:
    """One step per rung the ladder uses, numbered from 1, least disruptive first."""
    out = []
    for number, remedy in enumerate((r for r in remedies if r.actions or r.notes), start=1):
        rung, actions = remedy.rung, remedy.actions
        if not actions:  # a computed rung with nothing to do: shown, with why, never proposed
            out.append(_empty(number, rung, remedy.notes))
            continue
        specs = [DEFAULT_REGISTRY.get(a.kind) for a in actions]
        physical = any(s is not None and s.physical for s in specs)
        verify = [e.verify for e in remedy.entries if e.verify is not None]
        effects = [a.expected_effect for a in actions if a.expected_effect]
        reasons = list(dict.fromkeys(a.reason for a in actions if a.reason))
        out.append(
            StepDraft(
                step_no=number,
                kind=rung,
                title=_title(rung, actions),
                risk="physical" if physical else "digital",
                actions=list(actions),
                effect="; ".join(dict.fromkeys(effects)) or _effect(rung, actions, facts),
                cost=_cost(rung, actions, facts),
                rollback=_rollback(rung, actions),
                verify_within_s=max(v.within_s for v in verify) if verify else _within_s(rung, actions),
                verify_expect=verify[0].check if verify else _expect(rung, actions),
                reason="; ".join(reasons)[:2000],
                hold=_hold(rung, actions, facts),
            )
        )
    return out


def first_steps(drafts: Sequence[StepDraft]) -> list[int]:
    """The step numbers proposed at once: every step up to and including the first physical one; a held step
    (`hold`) and those after it wait for a person."""
    out = []
    for draft in drafts:
        if not draft.actions:
            continue  # nothing to propose there (why is its reason)
        if draft.hold:
            break
        out.append(draft.step_no)
        if draft.risk == "physical":
            break
    return out
