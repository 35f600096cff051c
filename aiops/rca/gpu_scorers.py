"""Hypotheses whose cause sits on a GPU or its node: XIDs and counters, throttling, power limits, host stalls.

Each scorer returns candidates (label, component, score in 0..1, summary, evidence). Scores reflect how specific
the evidence is: an XID 79 names the GPU; a hot GPU might be a symptom of its rack, so the rack's evidence
lowers it. Cause is separated from symptom by time (the first GPU to throttle) and by scope (all GPUs of one
node, or of one rack). A power limit that an executed action set (intended state, guardrails/intended.py) is
not a misconfiguration: `power_cap_misconfig` blames only a limit nobody set or one that moved away from it.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from aiops.nvml_bits import describe
from aiops.rca.candidate import Candidate
from aiops.rca.facts import Facts
from aiops.rca.rack_signs import rack_abnormal, rack_singled_out
from guardrails.intended import intended_history

ECC_XIDS = {48, 63, 64, 92, 94, 95}
# Xid 92 is a high rate of corrected single-bit errors: a warning, not an uncorrectable error (Xid catalogue)
UNCORRECTABLE_XIDS = ECC_XIDS - {92}
APP_XIDS = {13, 31, 43, 45, 68}
NVLINK_XIDS = {74}
NVML_NODE_TIMEOUT = "TIMEOUT"  # facts' nvml_error is TIMEOUT only when every error of the GPU was a timeout
OFF_BUS_XIDS = {79}


def _xids_by_gpu(facts: Facts) -> dict[str, set[int]]:
    out: dict[str, set[int]] = defaultdict(set)
    for r in facts.xids():
        out[str(r["gpu"])].add(int(r["xid"]))
    return out


def _delta(row: dict[str, Any], now: str, ref: str, first: dict[str, Any] | None, first_key: str) -> float:
    cur = row.get(now)
    base = row.get(ref)
    if base is None and first is not None:
        base = first.get(first_key)
    if cur is None or base is None:
        return 0.0
    return max(0.0, float(cur) - float(base))


def gpu_health(facts: Facts) -> list[Candidate]:
    """XID- and counter-backed GPU faults: off the bus, ECC, NVLink, PCIe, application errors."""
    xids = _xids_by_gpu(facts)
    first = {str(r["gpu"]): r for r in facts.first_samples()}
    out: list[Candidate] = []
    for row in facts.gpu_changes():
        gpu = str(row["gpu"])
        codes = xids.get(gpu, set())
        f = first.get(gpu)
        dbe = _delta(row, "dbe", "ref_dbe", f, "first_dbe")
        replay = _delta(row, "replay", "ref_replay", f, "first_replay")
        nvlink = _delta(row, "nvlink", "ref_nvlink", f, "first_nvlink")
        downtrained = bool(row["width"] and row["max_width"] and row["width"] < row["max_width"])
        # NVML times out for every GPU of a node while one of them is off the bus: a TIMEOUT alone is the
        # node's symptom, not this GPU's; GPU_IS_LOST or Xid 79 names the GPU that fell off
        lost = (bool(row["nvml_errors"]) and row["nvml_error"] != NVML_NODE_TIMEOUT) or bool(
            codes & OFF_BUS_XIDS
        )
        if lost:
            out.append(
                Candidate(
                    "gpu_fell_off_bus",
                    gpu,
                    0.97,
                    f"{gpu} fell off the bus: NVML answers {row['nvml_error'] or 'errors'}"
                    f"{', XID 79' if 79 in codes else ''}",
                    [
                        facts.cite("gpu_changes", f"NVML errors on {gpu}: {row['nvml_errors']} samples"),
                        facts.cite("xids"),
                    ],
                )
            )
        if dbe > 0 or codes & UNCORRECTABLE_XIDS:
            out.append(
                Candidate(
                    "gpu_ecc_error",
                    gpu,
                    0.95 if dbe > 0 else 0.85,
                    f"{gpu}: uncorrectable ECC errors (+{dbe:g} DBE, XIDs {sorted(codes & ECC_XIDS)})",
                    [facts.cite("gpu_changes", f"{gpu} DBE total rose by {dbe:g}"), facts.cite("xids")],
                )
            )
        if nvlink >= 5 or codes & NVLINK_XIDS:
            out.append(
                Candidate(
                    "nvlink_degraded",
                    gpu,
                    min(0.93, 0.8 + 0.01 * min(nvlink, 13)),
                    f"{gpu}: NVLink CRC/replay counters +{nvlink:g}{', XID 74' if 74 in codes else ''}",
                    [
                        facts.cite("gpu_changes", f"{gpu} NVLink error counters rose by {nvlink:g}"),
                        facts.cite("xids"),
                    ],
                )
            )
        if replay >= 10 or downtrained:
            score = 0.9 if (replay >= 10 and downtrained) else 0.82
            out.append(
                Candidate(
                    "pcie_degraded",
                    gpu,
                    score,
                    f"{gpu}: PCIe replays +{replay:g}, link x{row['width']} of x{row['max_width']}"
                    f" gen{row['gen']}",
                    [facts.cite("gpu_changes", f"{gpu} PCIe replay counter rose by {replay:g}")],
                )
            )
        app = codes & APP_XIDS
        if app:
            clean = dbe == 0 and replay < 10 and nvlink < 5 and not lost
            out.append(
                Candidate(
                    "application_error",
                    gpu,
                    0.9 if clean else 0.4,
                    f"{gpu}: XID {sorted(app)} with {'clean' if clean else 'non-zero'} hardware counters",
                    [
                        facts.cite("xids", f"XID {sorted(app)} on {gpu}"),
                        facts.cite("gpu_changes", "ECC, PCIe and NVLink counters", supports=clean),
                    ],
                )
            )
    return out


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

    lowered = []
    history = intended_history(facts.store)
    intended = history.at(facts.window.end_s) if history else {}
    for gpu, row in changes.items():
        f = first.get(gpu, {})
        reference = max(
            float(row.get("ref_limit_w") or 0),
            float(row.get("max_limit_w") or 0),
            float(f.get("first_limit_w") or 0),
        )
        if row["limit_w"] is not None and reference and float(row["limit_w"]) < 0.85 * reference:
            set_here = intended.get((gpu, "power_limit_w"))
            if set_here is not None and all(set_here.matches(row[k]) for k in ("limit_w", "last_limit_w")):
                continue  # the limit an executed action set (intended state): not a misconfiguration
            lowered.append(gpu)
    power_capped = {str(r["gpu"]) for r in onsets if r["power_cap_samples"]}
    misconfig = [g for g in sorted(set(lowered) | power_capped) if g in lowered]
    # A DCIM cap explains a lowered limit only inside the capped rack(s), from the cap's start on: the GPUs
    # it does not cover are judged on their own.
    uncovered = [g for g in misconfig if not _covering_caps(facts, racks, capped_racks, g, onsets, changes)]
    lowered_by_node: dict[str, list[str]] = {}
    for g in uncovered:
        lowered_by_node.setdefault(str(changes[g]["node"]), []).append(g)
    if 1 < len(lowered_by_node) <= 2:  # limits lowered on two nodes: two misconfigurations, a candidate each
        out.extend(_misconfig(facts, gpus, changes, gpus_per_node, []) for gpus in lowered_by_node.values())
    elif uncovered:
        out.append(_misconfig(facts, uncovered, changes, gpus_per_node, []))
    elif misconfig:
        covering = sorted(
            {c for g in misconfig for c in _covering_caps(facts, racks, capped_racks, g, onsets, changes)}
        )
        out.append(_misconfig(facts, misconfig, changes, gpus_per_node, covering))
    return out


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


def _misconfig(
    facts: Facts,
    misconfig: list[str],
    changes: dict[str, dict[str, Any]],
    gpus_per_node: Counter[str],
    covering: list[str],
) -> Candidate:
    nodes = Counter(changes[g]["node"] for g in misconfig)
    node, count = nodes.most_common(1)[0]
    if len(nodes) == 1 and count >= max(2, 0.75 * gpus_per_node.get(str(node), 8)):
        component = str(node)
    else:
        component = min(misconfig, key=lambda g: float(changes[g]["limit_w"]))
    row = changes[component] if component in changes else changes[misconfig[0]]
    score = 0.9 if not covering else 0.35
    if len(nodes) > 2:
        score = min(score, 0.5)
    return Candidate(
        "power_cap_misconfig",
        component,
        score,
        f"power limit of {component} lowered to {_fmt(row['limit_w'])} W "
        f"(max {_fmt(row['max_limit_w'])} W), SwPowerCap",
        [
            facts.cite("gpu_changes", f"{len(misconfig)} GPUs with a lowered power limit"),
            facts.cite("throttle_onsets"),
            facts.cite(
                "racks",
                f"DCIM cap on {', '.join(covering)}" if covering else "no DCIM cap over these GPUs",
                supports=not covering,
            ),
        ],
    )


def _thermal(
    facts: Facts,
    onsets: list[dict[str, Any]],
    changes: dict[str, dict[str, Any]],
    racks: dict[str, dict[str, Any]],
    gpus_per_node: Counter[str],
) -> list[Candidate]:
    """A thermal candidate per node whose GPUs throttle for heat: the node when most of its GPUs do (local
    cooling), else its first GPU to throttle; lowered where its own rack's coolant or inlet is abnormal and
    several of that rack's nodes heat (the rack's cause). Without any thermal throttling, the hottest GPU."""
    rack_of = facts.racks_of_nodes()
    known = bool(rack_of)
    thermal = [str(r["gpu"]) for r in onsets if r["thermal_samples"]]
    hot = sorted((g for g, r in changes.items() if _heated(r) >= 8.0), key=lambda g: -_heated(changes[g]))
    node_of = {g: str(changes[g]["node"]) if g in changes else g.split("/")[0] for g in {*thermal, *hot}}
    heating = Counter(rack_of.get(n, "?") for n in set(node_of.values()))
    groups: dict[str, list[str]] = {}
    for g in [*thermal, *hot]:
        members = groups.setdefault(node_of[g], [])
        if g not in members:
            members.append(g)
    nodes = list(dict.fromkeys(node_of[g] for g in thermal))  # in order of first throttle
    if not thermal and hot:
        nodes = [node_of[hot[0]]]
    out = []
    for node in nodes:
        gpus = groups[node] if thermal else [hot[0]]
        whole = len(gpus) >= max(2, 0.75 * gpus_per_node.get(node, 8))
        component = node if whole else gpus[0]
        rack = rack_of.get(node, "?")
        rack_hot = _rack_cooling_signal(racks, {rack}, known)
        several = (heating[rack] if known else sum(heating.values())) >= 2
        # the rack's cause when several of its nodes heat, or when its own sensors single it out (its coolant
        # flow fell, or its inlet rose and not every rack's did), however many nodes it holds
        rack_cause = rack_hot and (several or (known and rack_singled_out(racks, rack)))
        score = 0.35 if rack_cause else (0.86 if thermal else 0.6)
        row = changes.get(component, {})
        summary = (
            f"{node}: {len(gpus)} of {gpus_per_node.get(node, len(gpus))} GPUs overheating (local cooling)"
            if whole
            else f"{component} throttles first: {_fmt(row.get('max_temp_c'))} °C against a reference of "
            f"{_fmt(row.get('ref_temp_c'))} °C"
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


def host_stalls(facts: Facts) -> list[Candidate]:
    """A starved node: loader wait and CPU up, its GPUs idle, no hardware throttle."""
    idle = Counter(str(r["node"]) for r in facts.idle_gpus() if r["idle_samples"] >= 3)
    out: list[Candidate] = []
    throttled_nodes = {str(r["node"]) for r in facts.throttle_onsets()}
    hosts = facts.hosts()
    waits = sorted(float(r["loader_ms"] or 0) for r in hosts if (r["loader_ms"] or 0) > 0)
    peer = waits[len(waits) // 2] if waits else 0.0
    for r in hosts:
        node = str(r["node"])
        loader, ref = r["loader_ms"], r["ref_loader_ms"]
        if loader is None:
            continue
        high = float(loader) > max(3.0 * float(ref or 0), float(ref or 0) + 50.0)
        high = high or (len(waits) >= 3 and float(loader) > max(10.0 * peer, peer + 50.0))
        if high or (idle.get(node, 0) >= 2 and (r["cpu_pct"] or 0) >= 90):
            score = 0.85 if node not in throttled_nodes else 0.45
            evidence = [facts.cite("hosts"), facts.cite("idle_gpus")]
            profiled = [p for p in facts.profile_stacks() if str(p["node"]) == node]
            if profiled:  # the code paths behind the stall, when someone ran `aiops profile --db` there
                views = sorted({str(p["view"]) for p in profiled})
                claim = f"{node}: eBPF profile in the window, top {' and '.join(views)} stacks in the rows"
                evidence.append(
                    facts.cite("profile_stacks", claim)
                )  # stack names stay in rows: they are data
            out.append(
                Candidate(
                    "input_pipeline_bottleneck",
                    node,
                    score,
                    f"{node}: data-loader wait {_fmt(loader)} ms (reference {_fmt(ref)} ms), "
                    f"CPU {_fmt(r['cpu_pct'])} %, {idle.get(node, 0)} GPUs idle",
                    evidence,
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


def _covering_caps(
    facts: Facts,
    racks: dict[str, dict[str, Any]],
    capped: set[str],
    gpu: str,
    onsets: list[dict[str, Any]],
    changes: dict[str, dict[str, Any]] | None = None,
) -> list[str]:
    """The capped racks that hold `gpu` (every one when the topology is unknown) and whose cap began before
    that GPU's power limit was lowered (10 s slack; its first throttle when the limit's drop is not dated). A
    cap that arrives while the GPU throttles for another cause (heat) still explains the limit it lowered, in
    every incident that sees it."""
    rack_of = facts.racks_of_nodes()
    rack = rack_of.get(gpu.split("/")[0])
    lowered = (changes or {}).get(gpu, {}).get("lowered_from_ts_s")
    first = next((float(r["first_ts_s"]) for r in onsets if str(r["gpu"]) == gpu), None)
    since = float(lowered) if lowered is not None else first
    out = []
    for cap in sorted(capped):
        began = racks[cap].get("cap_from_ts_s")
        inside = rack is None or cap == rack
        in_time = began is None or since is None or float(began) <= since + 10.0
        if inside and in_time:
            out.append(cap)
    return out


def _fmt(value: Any) -> str:
    return "?" if value is None else f"{float(value):.0f}"


__all__ = ["describe", "gpu_health", "host_stalls", "throttling"]
