"""Hypotheses whose cause sits in the facility (rack cooling, ambient) or the network (lanes, links, ECN)."""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from aiops.rca.candidate import Candidate
from aiops.rca.facts import Facts
from aiops.rca.rack_signs import flow_dropped, rack_abnormal
from aiops.rca.rdma_scorers import hca_nics
from aiops.rca.throttle_scorers import _heated


def facility(facts: Facts) -> list[Candidate]:
    racks = facts.racks()
    changes = facts.gpu_changes()
    rack_of_node = {
        str(r["node"]): str(r["rack"])
        for r in facts.store.query("SELECT node, rack FROM topology WHERE kind = 'node'")
    }
    hot_nodes: dict[str, set[str]] = defaultdict(set)
    for row in changes:
        if _heated(row) >= 5.0:
            hot_nodes[rack_of_node.get(str(row["node"]), "?")].add(str(row["node"]))
    out: list[Candidate] = []
    rack_size = Counter(rack_of_node.values())
    abnormal = [r for r in racks if rack_abnormal(r)]
    for r in abnormal:
        rack = str(r["rack"])
        nodes = hot_nodes.get(rack, set())
        share = len(abnormal) / max(1, len(racks))
        # several of its nodes heating, or every one of them (a rack of one node is no less a rack); an inlet
        # that rose with the coolant flowing and no node heating is as much the weather as a CDU
        score = 0.9 if len(nodes) >= min(2, rack_size.get(rack, 2)) else 0.7
        if not nodes and not flow_dropped(r):
            score = 0.45
        if share == 1.0 and len(racks) > 1 and not flow_dropped(r):
            score = 0.45  # every rack's inlet at once looks like the weather, not a CDU (the weather drops no flow)
        out.append(
            Candidate(
                "rack_cooling_failure",
                rack,
                score,
                f"{rack}: coolant flow {_f(r['min_flow_lpm'])} L/min (reference "
                f"{_f(r['ref_flow_lpm'])}), inlet {_f(r['max_inlet_c'])} °C (reference "
                f"{_f(r['ref_inlet_c'])}); {len(nodes)} nodes heating",
                [facts.cite("racks"), facts.cite("gpu_changes", "GPU temperatures against reference")],
            )
        )
    drift = [
        r
        for r in racks
        if r["ref_inlet_c"] is not None
        and r["inlet_c"] is not None
        and float(r["inlet_c"]) - float(r["ref_inlet_c"]) >= 1.0
    ]
    if racks and len(drift) == len(racks):
        throttled = facts.throttle_onsets()
        # the outside air raises every rack's inlet with its coolant flowing: a rack whose flow fell is a fault
        # of its own beside the drift, as long as another rack's inlet rose with its flow normal
        normal = [r for r in racks if not flow_dropped(r)]
        flows_ok = bool(normal) and (len(racks) > 1 or len(normal) == len(racks))
        # throttling on a few nodes is some fault beside the weather (its own incident); on most of them it is no
        # benign drift
        # (counted in the racks whose coolant flows: a rack whose flow fell explains its own nodes' throttling)
        flowing = {str(r["rack"]) for r in racks if not flow_dropped(r)}
        throttled_nodes = {
            str(r["node"]) for r in throttled if r["thermal_samples"]
        }  # for heat: a cap is no weather
        under = {n for n, rack in rack_of_node.items() if rack in flowing}
        if rack_of_node:  # without a topology every throttling node counts
            throttled_nodes &= under
        widespread = len(throttled_nodes) >= max(2, 0.5 * len(under))
        score = 0.75 if (not widespread and flows_ok) else 0.3
        rise = min(float(r["inlet_c"]) - float(r["ref_inlet_c"]) for r in drift)
        out.append(
            Candidate(
                "ambient_drift",
                "fleet",
                score,
                f"every rack's inlet is {rise:.1f} °C or more above its reference, coolant flow normal"
                f"{', no throttling' if not throttled else ''}: benign drift with outside temperature",
                [
                    facts.cite("racks", "inlet temperature rose on every rack"),
                    facts.cite("throttle_onsets", "throttle reasons", supports=not throttled),
                ],
            )
        )
    return out


def nics_and_lanes(facts: Facts) -> list[Candidate]:
    nics = facts.nics()
    flows = facts.flows()
    rules = {str(r["rule_id"]): r for r in facts.lane_rules()}
    out: list[Candidate] = []

    for r in nics:
        if (r["carrier_changes"] or 0) > 0:
            out.append(
                Candidate(
                    "nic_link_flap",
                    str(r["nic"]),
                    0.92,
                    f"{r['nic']}: {r['carrier_changes']} carrier changes, {r['drops']} drops, "
                    f"{r['retransmits']} retransmits",
                    [facts.cite("nics", f"carrier changes on {r['nic']}")],
                )
            )

    # Lane misclassification: bytes of a traffic class in a lane it must not be in, grouped by the rule.
    wrong: dict[str, Counter[str]] = defaultdict(Counter)
    for f in flows:
        bad = (f["traffic_class"] == "collective" and f["lane"] in ("bulk", "standard")) or (
            f["traffic_class"] == "bulk" and f["lane"] == "vip"
        )
        if bad and (f["tx_bytes"] or 0) > 0:
            wrong[str(f["rule_id"] or "")][str(f["nic"])] += int(f["tx_bytes"])
    for rule_id, per_nic in wrong.items():
        rule = rules.get(rule_id)
        scope = str(rule["scope"]) if rule else "fleet"
        if scope != "fleet":
            component = scope
        elif len(per_nic) >= 2 or not rule_id:
            component = f"policy:{rule_id}" if rule_id else per_nic.most_common(1)[0][0]
        else:
            component = per_nic.most_common(1)[0][0]
        out.append(
            Candidate(
                "lane_misclassification",
                component,
                0.9,
                f"rule '{rule_id}' ({rule['match_kind'] if rule else '?'} → "
                f"{rule['lane'] if rule else '?'}, scope {scope}) puts traffic in the wrong lane on "
                f"{len(per_nic)} NIC(s)",
                [facts.cite("flows", "traffic class vs lane per rule"), facts.cite("lane_rules")],
            )
        )

    enforced = [r for r in nics if r["laned"]]  # a NIC that sent nothing (down, idle) enforces nothing
    bulk_bytes: dict[str, int] = defaultdict(int)
    for f in flows:
        if f["traffic_class"] == "bulk":
            bulk_bytes[str(f["nic"])] += int(f["tx_bytes"] or 0)
    for r in nics:
        if not r["fifo"]:
            continue
        congested = _ratio(r["queue_ms"], r["ref_queue_ms"]) >= 2.0 or (r["drops"] or 0) > 0
        if enforced:
            score = 0.88 if congested else 0.6
        else:
            score = 0.55 if congested and _stands_out(r, nics) else 0.0
        if score:
            out.append(
                Candidate(
                    "bulk_traffic_contention",
                    str(r["nic"]),
                    score,
                    f"{r['nic']}: no lane enforcement (one FIFO) while bulk traffic "
                    f"({bulk_bytes[str(r['nic'])] / 1e9:.1f} GB) shares it with collectives; queue "
                    f"delay {_f(r['queue_ms'])} ms vs {_f(r['ref_queue_ms'])} ms",
                    [facts.cite("nics"), facts.cite("flows")],
                )
            )

    ce_rates = sorted(float(r["ce_per_s"] or 0) for r in nics)
    peer_ce = ce_rates[len(ce_rates) // 2] if ce_rates else 0.0
    marking = [r for r in nics if float(r["ce_per_s"] or 0) > 0.3 * peer_ce]
    losses = sorted(float(r["loss_per_s"] or 0) for r in nics)
    peer_loss = losses[len(losses) // 2] if losses else 0.0
    with_hca = hca_nics(facts)  # RDMA NICs: their HCA counters speak for ECN (rdma_scorers.roce_ecn)
    for r in nics:
        if str(r["nic"]) in with_hca:
            continue
        loss = float(r["loss_per_s"] or 0)
        lossy = loss > max(3.0 * float(r["ref_loss_per_s"] or 0), 1.0) or loss > max(10.0 * peer_loss, 1.0)
        if lossy and peer_ce > 0 and float(r["ce_per_s"] or 0) < 0.3 * peer_ce and len(marking) >= 1:
            out.append(
                Candidate(
                    "ecn_misconfig",
                    str(r["nic"]),
                    0.86,
                    f"{r['nic']}: {r['drops']} drops and {r['retransmits']} retransmits but no CE marks "
                    f"while {len(marking)} other NICs mark CE under the same load",
                    [facts.cite("nics", "drops, retransmits and CE marks per NIC")],
                )
            )
    return out


def _ratio(value: Any, reference: Any) -> float:
    if value is None or not reference:
        return 0.0
    return float(value) / float(reference)


def _stands_out(row: dict[str, Any], rows: list[dict[str, Any]]) -> bool:
    delays = sorted(float(r["queue_ms"] or 0) for r in rows)
    mid = delays[len(delays) // 2] if delays else 0.0
    return float(row["queue_ms"] or 0) > 3.0 * max(mid, 0.1)


def _f(value: Any) -> str:
    return "?" if value is None else f"{float(value):.1f}"
