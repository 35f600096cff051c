"""Hypotheses from a GPU's clocks-event reasons, temperature and power limit: thermal throttle, power brake, a
DCIM cap and a power limit set too low.

Cause is separated from symptom by time (the first GPU to throttle) and by scope (all GPUs of one node, or of
one rack). A hot GPU might be a symptom of its rack, so the rack's evidence lowers it. A power limit that an
executed action set (intended state, guardrails/intended.py) is not a misconfiguration: `power_cap_misconfig`
blames only a limit nobody set or one that moved away from it; a limit lowered inside a rack a DCIM signal
capped is the cap's when it went to the level the cap brought its rack to, and a misconfiguration of its own
when it went below it, whenever it happened (issue 40).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from aiops.peer_heat import further_above, peer_offsets
from aiops.rca.candidate import Candidate
from aiops.rca.facts import Facts
from aiops.rca.limit_steps import Lowering, cap_levels, lowerings
from aiops.rca.rack_signs import rack_abnormal, rack_singled_out
from guardrails.intended import intended_history


def throttling(facts: Facts) -> list[Candidate]:
    """Thermal throttle, power brake and power caps from clocks-event reasons and limits."""
    onsets = facts.throttle_onsets()
    changes = {str(r["gpu"]): r for r in facts.gpu_changes()}
    first = {str(r["gpu"]): r for r in facts.first_samples()}
    racks = {str(r["rack"]): r for r in facts.racks()}
    gpus_per_node = Counter(str(r["node"]) for r in changes.values())
    out: list[Candidate] = []

    out.extend(_thermal(facts, onsets, changes, racks, gpus_per_node))

    brake_nodes = Counter(str(r["node"]) for r in onsets if r["brake_samples"])
    for node, count in brake_nodes.items():
        if count >= max(1, 0.5 * gpus_per_node.get(node, 8)):
            out.append(
                Candidate(
                    "power_brake",
                    node,
                    0.93,
                    f"{node}: HwPowerBrakeSlowdown on {count} GPUs",
                    [facts.cite("throttle_onsets", f"{count} GPUs of {node} report HwPowerBrakeSlowdown")],
                )
            )

    capped_racks = {rack for rack, r in racks.items() if r["power_cap_kw"] is not None}
    if capped_racks:
        # the fleet when every rack is capped and there are several, or when the DCIM signal names the fleet
        # (on a single rack the samples alone cannot tell the two apart)
        for component in _cap_components(racks, capped_racks):
            out.append(
                Candidate(
                    "facility_power_cap",
                    component,
                    0.92,
                    f"DCIM power cap in force on {', '.join(sorted(capped_racks))}",
                    [facts.cite("racks", "DCIM power cap signal per rack")],
                )
            )

    history = intended_history(facts.store)
    intended = history.at(facts.window.end_s) if history else {}
    reference_w = {
        gpu: max(
            float(row.get("ref_limit_w") or 0),
            float(row.get("max_limit_w") or 0),
            float(first.get(gpu, {}).get("first_limit_w") or 0),
        )
        for gpu, row in changes.items()
    }
    levels = cap_levels(changes, capped_racks, facts.racks_of_nodes())
    found = lowerings(facts, reference_w, intended, racks, levels)
    uncovered = [lowering for lowering in found if not lowering.covering]
    if len({lowering.node for lowering in uncovered}) > 2:  # limits lowered on many nodes: one candidate
        gpus = sorted({g for lowering in uncovered for g in lowering.gpus})
        out.append(_misconfig(facts, gpus, changes, gpus_per_node, [], uncovered[0]))
    else:  # each lowering a cause: two on one node minutes apart are two, even of one GPU
        for x in uncovered:  # and each GPU of it, unless it took most of its node (`_lowered_parts`)
            out.extend(
                _misconfig(facts, part, changes, gpus_per_node, [], x)
                for part in _lowered_parts(x, gpus_per_node)
            )
    if found and not uncovered:
        covering = sorted({c for lowering in found for c in lowering.covering})
        gpus = sorted({g for lowering in found for g in lowering.gpus})
        out.append(_misconfig(facts, gpus, changes, gpus_per_node, covering, found[0]))
    return out


HOT_C = 8.0  # this much above its loaded reference, or further above its node's peers than it usually runs, is hot
SIMULTANEOUS_CAPS_S = 60.0  # rack caps that began this close together are one fleet-wide cap sent per rack


def _cap_components(racks: dict[str, dict[str, Any]], capped_racks: set[str]) -> list[str]:
    """What the DCIM caps in the window name: the fleet when the signal names it, or when every rack (of
    several) was capped at once; otherwise the first capped rack, or each capped rack when their caps began
    minutes apart (independent caps: incident ranking keeps each with the incident its symptoms opened)."""
    fleet_signal = all(racks[r].get("cap_scope") == "fleet" for r in capped_racks)
    starts = [racks[r].get("cap_from_ts_s") for r in capped_racks]
    known = [float(t) for t in starts if t is not None]
    apart = len(known) == len(starts) and len(known) > 1 and max(known) - min(known) > SIMULTANEOUS_CAPS_S
    if fleet_signal and capped_racks == set(racks):
        return ["fleet"]
    if apart:
        return sorted(capped_racks)
    if capped_racks == set(racks) and len(racks) > 1:
        return ["fleet"]
    return [sorted(capped_racks)[0]]


def _lowered_parts(lowering: Lowering, gpus_per_node: Counter[str]) -> list[list[str]]:
    """What one lowering asks to be put right: its node when it took most of the node's GPUs (`_misconfig`
    names the node), else each GPU it lowered, lowest limit first: one command that lowered three of eight GPUs
    left three limits to restore, and naming only the lowest would hide the other two."""
    gpus = lowering.gpus
    if len(gpus) >= max(2, 0.75 * gpus_per_node.get(lowering.node, 8)):
        return [gpus]
    return [[g] for g in sorted(gpus, key=lambda g: (lowering.limits_w[g], g))]


def _misconfig(
    facts: Facts,
    misconfig: list[str],
    changes: dict[str, dict[str, Any]],
    gpus_per_node: Counter[str],
    covering: list[str],
    lowering: Lowering,
) -> Candidate:
    """A limit set too low on `misconfig` (the node when most of its GPUs, else its lowest GPU), dated by the
    `lowering` when it happened in the window; 0.35 where a DCIM cap covers it, at most 0.5 over many nodes."""
    nodes = Counter(changes[g]["node"] for g in misconfig)
    node, count = nodes.most_common(1)[0]
    limits = {g: lowering.limits_w.get(g, float(changes[g]["limit_w"])) for g in misconfig}
    if len(nodes) == 1 and count >= max(2, 0.75 * gpus_per_node.get(str(node), 8)):
        component = str(node)
    else:
        component = min(misconfig, key=lambda g: limits[g])
    row = changes[component] if component in changes else changes[misconfig[0]]
    limit_w = limits.get(component, row["limit_w"])
    score = 0.9 if not covering else 0.35
    if len(nodes) > 2:
        score = min(score, 0.5)
    when = "" if lowering.before_window else f" at +{lowering.from_ts_s - facts.window.opened_s:.0f} s"
    return Candidate(
        "power_cap_misconfig",
        component,
        score,
        f"power limit of {component} lowered to {_fmt(limit_w)} W{when} "
        f"(max {_fmt(row['max_limit_w'])} W), SwPowerCap",
        [
            facts.cite("limit_steps", f"{len(misconfig)} GPUs with a lowered power limit"),
            facts.cite("gpu_changes"),
            facts.cite(
                "racks",
                f"DCIM cap on {', '.join(covering)}"
                if covering
                else "no DCIM cap over these GPUs at their level",
                supports=not covering,
            ),
        ],
        onset_ts_s=None if lowering.before_window else lowering.from_ts_s,
    )


def _thermal(
    facts: Facts,
    onsets: list[dict[str, Any]],
    changes: dict[str, dict[str, Any]],
    racks: dict[str, dict[str, Any]],
    gpus_per_node: Counter[str],
) -> list[Candidate]:
    """A thermal candidate per node whose GPUs throttle for heat or run hot: the node when most of its GPUs do
    (local cooling), else each of those GPUs (a second GPU of a node overheating minutes after the first is a
    cause of its own: incident ranking keeps each with the incident its onset opened); lowered where its own
    rack's coolant or inlet is abnormal and several of that rack's nodes heat (the rack's cause). A GPU that
    throttles for heat scores above one that only runs hot."""
    rack_of = facts.racks_of_nodes()
    known = bool(rack_of)
    thermal = [str(r["gpu"]) for r in onsets if r["thermal_samples"]]
    throttled = set(thermal)
    above = _above_usual(changes)
    heat = {g: max(_heated(r), above.get(g, 0.0)) for g, r in changes.items()}
    hot = sorted((g for g, h in heat.items() if h >= HOT_C), key=lambda g: -heat[g])
    node_of = {g: str(changes[g]["node"]) if g in changes else g.split("/")[0] for g in {*thermal, *hot}}
    heating = Counter(rack_of.get(n, "?") for n in set(node_of.values()))
    groups: dict[str, list[str]] = {}
    for g in [*thermal, *hot]:  # in order of first throttle, then of heat
        members = groups.setdefault(node_of[g], [])
        if g not in members:
            members.append(g)
    out = []
    for node, gpus in groups.items():
        whole = len(gpus) >= max(2, 0.75 * gpus_per_node.get(node, 8))
        rack = rack_of.get(node, "?")
        rack_hot = _rack_cooling_signal(racks, {rack}, known)
        several = (heating[rack] if known else sum(heating.values())) >= 2
        # the rack's cause when several of its nodes heat, or when its own sensors single it out (its coolant
        # flow fell, or its inlet rose and not every rack's did), however many nodes it holds
        rack_cause = rack_hot and (several or (known and rack_singled_out(racks, rack)))
        for component in [node] if whole else gpus:
            by_heat = throttled & ({component} | (set(gpus) if whole else set()))
            score = 0.35 if rack_cause else (0.86 if by_heat else 0.6)
            row = changes.get(component, {})
            summary = (
                f"{node}: {len(gpus)} of {gpus_per_node.get(node, len(gpus))} GPUs overheating (local cooling)"
                if whole
                else f"{component} {'throttles for heat' if by_heat else 'runs hot'}: "
                f"{_fmt(row.get('max_temp_c'))} °C against a loaded reference of {_fmt(row.get('ref_temp_c'))} °C"
                + (
                    f", {above[component]:.0f} °C further above its node's other GPUs at their power than before"
                    if above.get(component, 0.0) >= HOT_C
                    else ""
                )
            )
            out.append(
                Candidate(
                    "thermal_throttle",
                    component,
                    score,
                    summary,
                    [
                        facts.cite("throttle_onsets"),
                        facts.cite("gpu_changes"),
                        facts.cite("racks", "rack coolant and inlet", supports=not rack_hot),
                    ],
                )
            )
    return out


def _heated(row: dict[str, Any]) -> float:
    if row.get("temp_c") is None or row.get("ref_temp_c") is None:
        return 0.0
    return float(row["temp_c"]) - float(row["ref_temp_c"])


def _rack_cooling_signal(racks: dict[str, dict[str, Any]], hot_racks: set[str], known: bool) -> bool:
    """A rack's coolant or inlet is abnormal where the hot GPUs are (any rack when the topology is unknown)."""
    return any(rack_abnormal(r) for rack, r in racks.items() if not known or rack in hot_racks)


def _fmt(value: Any) -> str:
    return "?" if value is None else f"{float(value):.0f}"


__all__ = ["throttling"]


def _above_usual(changes: dict[str, dict[str, Any]]) -> dict[str, float]:
    """Per GPU, how much further above its node's other GPUs at their power it ran in the incident window than in
    the reference (aiops/peer_heat.py): a GPU its place in the airflow keeps 12 °C above its peers is not hot for
    that; one that ran level with them and now runs 20 °C above them is. No reference, no judgement."""
    now = peer_offsets((g, str(r["node"]), r.get("temp_c"), r.get("power_w")) for g, r in changes.items())
    before = peer_offsets(
        (g, str(r["node"]), r.get("ref_temp_c"), r.get("ref_power_w")) for g, r in changes.items()
    )
    return {g: further_above(now[g], before[g]) for g in now if g in before}
