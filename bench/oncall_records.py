"""The operator's day's figures: per fault and in total, each measured against the twin's ground truth
(bench/oncall_truth.py) from what the product recorded (bench/oncall_state.py), with pages and proposals matched
by bench/oncall_matching.py."""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

from aiops.sim.world import SIM_EPOCH_TS_S
from bench.oncall_matching import NOT_ACTIONABLE, UNDOES, blind_spells, named, says, says_incident, undoes
from bench.oncall_state import DayState, Records, collect_records, load, save
from bench.oncall_timeline import Timeline, hurt_by_nature
from bench.oncall_truth import Attribution, affected, attribute, gpus_of, nodes_of, touched_by
from guardrails.registry import DEFAULT_REGISTRY


def _median(values: list[float]) -> float | None:
    return round(statistics.median(values), 1) if values else None


def figures(state: DayState, ettr_of: dict[str, float], scrape_s: float) -> dict[str, Any]:
    scenario, truth, records = state.scenario, state.ground, state.records
    world = truth.world
    end_s = scenario.duration_s
    node_days = world.layout.nodes * scenario.duration_s / 86_400.0
    # which incident each proposal remedies (the fleet's own id where a node only executed the fleet's)
    owner: dict[str, tuple[str, str]] = {}
    for p in records.proposals:
        if p.incident_id and not p.origin.startswith("fleet:"):  # the tier that filed it, not one it ran on
            owner.setdefault(p.proposal_id, (p.tier, p.incident_id))
    by_incident: dict[tuple[str, str], list[str]] = defaultdict(list)
    for pid, key in owner.items():
        by_incident[key].append(pid)
    action_fault: dict[str, int | None] = {}
    verdict: dict[tuple[str, str], Attribution] = {}
    for incident in sorted(records.incidents, key=lambda i: i.opened_s):
        key = (incident.tier, incident.incident_id)
        if any(says_incident(e, incident, scrape_s) for e in state.blind):
            verdict[key] = Attribution(
                "blind"
            )  # the day's scripted loss of sight, said: nobody's action caused it
            continue
        found = attribute(incident, truth, records.executed, action_fault, end_s)
        verdict[key] = found
        for pid in by_incident.get(key, []):
            action_fault.setdefault(pid, found.fault if found.what != "false" else None)

    def fault_of(key: tuple[str, str] | None) -> Attribution:
        return verdict.get(key, Attribution("false")) if key is not None else Attribution("false")

    # a plan remedies the fault its own diagnosis names (its cause on the fault's hardware, in force when it was
    # filed), whatever its incident's top cause became: a fleet incident may gather several faults' plans
    plan_fault: dict[tuple[str, str], int] = {}
    for plan in records.plans:
        said = named(f"top cause: {plan.root_cause} on {plan.component}", plan.created_s, truth, end_s)
        if said is not None and said.fault is not None:
            plan_fault[(plan.tier, plan.plan_id)] = said.fault
    for p in records.proposals:
        by_plan = plan_fault.get((p.tier, p.step_id.rsplit(".", 1)[0])) if p.step_id else None
        if by_plan is not None and p.proposal_id in action_fault:
            action_fault[p.proposal_id] = by_plan

    per: dict[int, dict[str, Any]] = {f.index: defaultdict(int) for f in truth.faults}
    timeline = Timeline(truth.faults)
    for incident in records.incidents:
        opened = verdict.get((incident.tier, incident.incident_id))
        if opened is not None and opened.what == "fault":
            timeline.saw(opened.fault, "detected", incident.opened_s)
    for plan in records.plans:
        timeline.saw(plan_fault.get((plan.tier, plan.plan_id)), "planned", plan.created_s)
    # pages where they landed
    pages_false, pages_self, pages_blind = 0, 0, 0
    page_rows = []
    for alert in state.alerts:
        key = (str(alert.details.get("node") or alert.source), str(alert.details.get("incident_id") or ""))
        at_s = alert.opened_ts_s - SIM_EPOCH_TS_S
        found = named(alert.summary, at_s, truth, end_s) or Attribution("unnamed")
        if found.what == "unnamed" and any(says(e, at_s, key, alert.summary, scrape_s) for e in state.blind):
            found = Attribution(
                "blind"
            )  # a page about a real loss of sight (it names no fault): not a fault's
        elif found.what == "unnamed":
            found = fault_of(key)
        page_rows.append((at_s, key, found.what, found.fault, alert.summary))
        if found.what == "blind":
            pages_blind += 1
        elif found.what == "fault" and found.fault is not None:
            per[found.fault]["pages"] += 1
            timeline.saw(found.fault, "paged", at_s)
        elif found.what == "self":
            pages_self += 1
            if found.fault is not None:
                per[found.fault]["self_pages"] += 1
        else:
            pages_false += 1
    for found in verdict.values():
        if found.what == "self" and found.fault is not None:
            per[found.fault]["self_inflicted"] += 1
        if found.what == "fault" and found.fault is not None:
            per[found.fault]["incidents"] += 1
    self_total = sum(1 for f in verdict.values() if f.what == "self")
    # signatures, and steps the on-call took
    unattributed_signatures = 0
    for sig in state.signatures:
        found = fault_of((sig.tier, sig.incident_id))
        by_plan = plan_fault.get((sig.tier, sig.proposal_id.rsplit(".", 1)[0]))
        signed = by_plan if by_plan is not None else found.fault
        if signed is not None:
            per[signed]["signatures"] += 1
            timeline.saw(signed, "signed", sig.ts_s - SIM_EPOCH_TS_S)
        else:
            unattributed_signatures += 1
    for tier, incident_id, steps in state.cases:
        found = fault_of((tier, incident_id))
        if found.fault is not None:
            per[found.fault]["steps"] += steps
    # GPUs the executed physical actions touched
    touched: dict[int, set[str]] = defaultdict(set)
    targets: dict[int, set[str]] = defaultdict(set)  # the yardstick before 2026-12-06: targets' GPUs alone
    for action in records.executed:
        spec = DEFAULT_REGISTRY.get(action.kind)
        fault = action_fault.get(action.proposal_id)
        timeline.saw(fault, "acted", action.elapsed_s)
        if spec is None or not spec.physical or fault is None:
            continue
        touched[fault] |= touched_by(action, truth)
        jobs = truth.jobs_at(action.elapsed_s)
        targets[fault] |= gpus_of(action.target, world, jobs, action.parameters.get("to"))
    # proposals that would undo an executed action
    undo = 0
    for p in records.proposals:
        if p.kind not in UNDOES.values():
            continue
        for action in records.executed:
            if action.elapsed_s > p.created_s or UNDOES.get(action.kind) != p.kind:
                continue
            if undoes(p, action, truth):
                undo += 1
                fault = action_fault.get(action.proposal_id)
                if fault is not None:
                    per[fault]["undo_proposals"] += 1
                break
    # proposals on no real fault that would change the cluster
    false_actionable = sum(
        1
        for p in records.proposals
        if p.kind not in NOT_ACTIONABLE
        and p.status != "denied"
        and not p.origin.startswith("fleet:")  # the fleet's own proposal, counted on the fleet
        and fault_of(owner.get(p.proposal_id)).what != "fault"
    )
    faults = []
    for f in truth.faults:
        row = per[f.index]
        mttm = None
        if f.ever_hurt and not f.hurting_now:
            mttm = round((f.last_hurt_s or f.start_s) + scrape_s - f.start_s, 1)
        elif not f.ever_hurt:
            mttm = 0.0
        mttr = round(f.cleared_s - f.start_s, 1) if f.cleared_s is not None else None
        faults.append(
            {
                "index": f.index,
                "kind": f.kind,
                "target": f.target,
                "start_s": f.start_s,
                "nature": f.nature,
                "pages": row["pages"],
                "incidents": row["incidents"],
                "signatures": row["signatures"],
                "steps": row["steps"],
                "gpus_touched": len(touched[f.index]),
                "gpus_affected": len(affected(f)),
                "gpus_touched_targets": len(targets[f.index]),  # before 2026-12-06: targets' GPUs
                "gpus_affected_hardware": len(f.affected_gpus),  # ... and the fault's hardware alone
                "self_inflicted": row["self_inflicted"],
                "undo_proposals": row["undo_proposals"],
                "mttm_s": mttm,
                "mttr_s": mttr,
                "hurting_at_end": f.hurting_now,
                "in_force_at_end": f.in_force_now,
                "timeline": timeline.row(f.index, f.start_s, f.hurt_s),
            }
        )
    started = [r for r in faults if r["start_s"] < end_s]
    touched_total = sum(r["gpus_touched"] for r in started)
    affected_total = sum(r["gpus_affected"] for r in started)
    targets_total = sum(r["gpus_touched_targets"] for r in started)
    hardware_total = sum(r["gpus_affected_hardware"] for r in started)
    blind = blind_spells(state.blind, page_rows, scrape_s)
    false_pages = pages_false + pages_self
    total = {
        "faults": len(started),
        "pages": len(page_rows),
        "pages_real": sum(r["pages"] for r in started),  # on a real fault (blind spells apart: blind_pages)
        "pages_per_fault": round(sum(r["pages"] for r in started) / len(started), 2) if started else None,
        "faults_paged": sum(1 for r in started if r["pages"] > 0),
        "faults_paged_once": sum(1 for r in started if r["pages"] == 1),
        "false_pages": false_pages,
        "self_inflicted_pages": pages_self,
        "blind_pages": pages_blind,
        "false_pages_per_1000_node_days": round(1000.0 * false_pages / node_days, 1),
        "signatures": len(state.signatures),
        "signatures_median": _median([float(r["signatures"]) for r in started]),
        # over the faults that paged (the person was called): the goal's median
        "signatures_median_paged": _median([float(r["signatures"]) for r in started if r["pages"]]),
        "signatures_unattributed": unattributed_signatures,
        "refused_approvals": state.refusals,
        "steps": sum(r["steps"] for r in started),
        "gpus_touched": touched_total,
        "gpus_affected": affected_total,
        "touched_over_affected": round(touched_total / affected_total, 2) if affected_total else None,
        # the yardstick before 2026-12-06 (targets' GPUs over the faults' hardware), for comparison
        "touched_over_affected_hardware": round(targets_total / hardware_total, 2)
        if hardware_total
        else None,
        "self_inflicted": self_total,
        "undo_proposals": undo,
        "mttm_s_median": _median([r["mttm_s"] for r in started if r["mttm_s"] is not None]),
        "mttr_s_median": _median([r["mttr_s"] for r in started if r["mttr_s"] is not None]),
        "unmitigated": sum(1 for r in started if r["hurting_at_end"]),
        "unrecovered": sum(1 for r in started if r["mttr_s"] is None),
        "incidents": len(records.incidents),
        "incidents_false": sum(1 for f in verdict.values() if f.what == "false"),
        "proposals": len(records.proposals),
        "executed": len(records.executed),
        "false_actionable": false_actionable,
        "false_actionable_per_1000_node_days": round(1000.0 * false_actionable / node_days, 1),
        "node_days": round(node_days, 2),
        "maintenance_windows_announced": state.announced,
        "ettr": {**ettr_of, "product_over_oracle": round(ettr_of["product"] / ettr_of["oracle"], 4)},
        "hurt_by_nature": hurt_by_nature(started),
        "blind": blind,
        "blind_s_max": max((b["blind_s"] for b in blind), default=None),
        "blind_after_last_sample_s_max": max((b["after_last_sample_s"] for b in blind), default=None),
    }
    return {
        "cluster": {
            "nodes": world.layout.nodes,
            "gpus": world.layout.gpu_count,
            "hours": round(scenario.duration_s / 3600.0, 2),
            "scrape_s": scrape_s,
            "seed": scenario.seed,
        },
        "wall_s": state.wall_s,
        "total": total,
        "faults": faults,
        "pages": [
            {
                "at_s": round(t, 1),
                "tier": k[0],
                "incident": k[1],
                "what": what,
                "fault": fault,
                "summary": s[:160],
            }
            for t, k, what, fault, s in page_rows
        ],
    }


__all__ = ["DayState", "Records", "collect_records", "figures", "load", "nodes_of", "save"]
