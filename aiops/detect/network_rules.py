"""The rules on a NIC's counters and the traffic lanes (aiops/detect/rules.py runs them): loss where peers mark
ECN, carrier changes, lanes not enforced or traffic in the wrong lane, drops, queueing delay and PFC pause
frames above the NIC's own baseline.
"""

from __future__ import annotations

from collections import defaultdict

from aiops.detect import windows as w
from aiops.detect.kinds import symptom
from aiops.detect.rule_state import RuleState
from aiops.models import Symptom

PAUSE_FLOOR = 50.0  # pause frames per window a NIC may receive above its baseline without a symptom


def nic_rules(d: RuleState, t0: float, t1: float) -> list[Symptom]:
    rows = w.window(d.store, w.NIC_WINDOW_SQL, t0, t1)
    out: list[Symptom] = []
    # lanes are enforced where a NIC sent through them; a NIC that sent nothing (its link down a whole window,
    # idle) says nothing either way: counted as enforced, a link flap on a fleet of FIFOs told every other NIC
    # that its lanes were missing
    enforced_somewhere = any(r["laned"] for r in rows)
    ce_rates = sorted(float(r["ce_marks"] or 0) for r in rows)
    peer_ce = ce_rates[len(ce_rates) // 2] if ce_rates else 0.0
    for r in rows:
        nic = str(r["nic"])
        # Peer comparison needs no baseline: a NIC that drops where its peers mark CE under the same load.
        loss = float(r["drops"] or 0) + float(r["retransmits"] or 0)
        unmarked = peer_ce >= 20 and float(r["ce_marks"] or 0) < 0.1 * peer_ce and loss >= 20
        if d.persist.update(f"noecn:{nic}", unmarked, t1) >= 2:
            out.append(
                symptom(
                    "loss_without_ecn",
                    nic,
                    t1,
                    drops=r["drops"],
                    ce_marks=r["ce_marks"],
                    peer_ce_marks=peer_ce,
                )
            )
        if (r["carrier_changes"] or 0) > 0 or not r["link_up_all"]:
            out.append(symptom("carrier_flap", nic, t1, carrier_changes=r["carrier_changes"]))
        if r["fifo"] and enforced_somewhere:
            out.append(symptom("lane_enforcement_missing", nic, t1))
        if d.relative(f"drops:{nic}", loss, t1, ratio=3.0, floor=50.0, windows=2):
            detail = {"drops": r["drops"], "retransmits": r["retransmits"], "ce_marks": r["ce_marks"]}
            out.append(symptom("nic_drops", nic, t1, **detail))
        if d.relative(f"qdelay:{nic}", r["queue_delay_ms"], t1, ratio=2.0, floor=1.0, windows=2):
            out.append(symptom("queue_delay", nic, t1, queue_delay_ms=r["queue_delay_ms"]))
    return out


def pause_rules(d: RuleState, t0: float, t1: float) -> list[Symptom]:
    """PFC pause frames received above the NIC's own baseline (relative, 2 windows): on a lossless fabric a
    queue that overflows pauses the port feeding it instead of dropping, so this is the hardware trace of
    congestion there (the NIC paused is the sender, not the congested port: the analyst names that)."""
    out: list[Symptom] = []
    for r in w.window(d.store, w.PAUSE_WINDOW_SQL, t0, t1):
        nic = str(r["nic"])
        pauses = d.counter_delta(f"pause:{nic}", r["rx_pause_total"])
        if d.relative(f"pauses:{nic}", pauses, t1, ratio=3.0, floor=PAUSE_FLOOR, windows=2):
            out.append(symptom("pfc_pauses", nic, t1, rx_pause_frames=pauses))
    return out


def lane_class_rules(d: RuleState, t0: float, t1: float) -> list[Symptom]:
    """Traffic of a class in a lane not meant for it (collectives in bulk or standard, bulk in vip), 1 % of the
    NIC's bytes or more."""
    rows = w.window(d.store, w.FLOW_WINDOW_SQL, t0, t1)
    total: dict[str, float] = defaultdict(float)
    for r in rows:
        total[r["nic"]] += float(r["tx_bytes"] or 0)
    out: list[Symptom] = []
    for r in rows:
        wrong = (r["traffic_class"] == "collective" and r["lane"] in ("bulk", "standard")) or (
            r["traffic_class"] == "bulk" and r["lane"] == "vip"
        )
        share = float(r["tx_bytes"] or 0) / total[r["nic"]] if total[r["nic"]] else 0.0
        if wrong and share >= 0.01:
            detail = {"traffic_class": r["traffic_class"], "lane": r["lane"], "rule_id": r["rule_id"]}
            out.append(symptom("lane_mismatch", str(r["nic"]), t1, **detail, share=round(share, 3)))
    return out
