"""The rules on racks and the site (aiops/detect/rules.py runs them): a DCIM power cap in force, a rack's
coolant flow below its baseline, its inlet hotter than its first minute, every rack drifting warmer at once.
"""

from __future__ import annotations

import math

from aiops.control.dcim_signals import DCIM_SIGNALS_SQL, caps_kw_from, dcim_caps_kw
from aiops.detect import windows as w
from aiops.detect.kinds import symptom
from aiops.detect.rule_state import RuleState
from aiops.models import Symptom
from aiops.store import Store


def caps_in_force(store: Store, t0: float, t1: float) -> dict[str, float]:
    """Scope (a rack, or `fleet`) -> the DCIM cap in force in the window: the DCIM signals' (`fleet` for a
    site-wide one), and a rack's own cap where a facility collector recorded one with its samples."""
    signals = w.for_the_pass(store, "dcim signals", lambda: store.query(DCIM_SIGNALS_SQL, [math.inf]))
    if signals is None:
        caps = dcim_caps_kw(store, t0, t1)
    else:  # every signal read once for detect()'s pass: those up to the window's end, in the same order
        caps = caps_kw_from([r for r in signals if r["ts_s"] is not None and r["ts_s"] <= t1], t0)
    for r in w.window(store, w.RACK_WINDOW_SQL, t0, t1):
        if r["power_cap_kw"] is not None:
            caps[str(r["rack"])] = float(r["power_cap_kw"])
    return caps


def rack_rules(d: RuleState, t0: float, t1: float) -> list[Symptom]:
    rows = w.window(d.store, w.RACK_WINDOW_SQL, t0, t1)
    signals = d.caps_kw
    out: list[Symptom] = []
    flowing = drifting = 0  # racks whose own coolant flows, and those of them warmer than their first minute
    for r in rows:
        rack = str(r["rack"])
        # the cap a facility collector recorded with the rack's samples, else the DCIM signal in force
        cap_kw = (
            r["power_cap_kw"] if r["power_cap_kw"] is not None else signals.get(rack, signals.get("fleet"))
        )
        if cap_kw is not None:
            out.append(symptom("dcim_power_cap", rack, t1, cap_kw=cap_kw))
        flow = r["flow_lpm"]
        flow_base = d.baselines[f"flow:{rack}"]
        low_flow = flow is not None and flow_base.ready() and flow < 0.85 * flow_base.median
        if flow is not None and not low_flow:
            flow_base.add(float(flow))
        if d.persist.update(f"flow:{rack}", low_flow, t1) >= 2:
            out.append(symptom("coolant_flow_drop", rack, t1, flow_lpm=flow, baseline_lpm=flow_base.median))
        inlet = r["inlet_c"]
        inlet_base = d.baselines[f"inlet:{rack}"]
        if inlet is not None and inlet_base.ready():
            if inlet > inlet_base.median + 3.0 and d.persist.update(f"inlet:{rack}", True, t1) >= 2:
                out.append(symptom("rack_inlet_hot", rack, t1, inlet_c=inlet, baseline_c=inlet_base.median))
            if inlet > inlet_base.median + 1.5 and not low_flow:
                drifting += 1
        flowing += not low_flow
        if inlet is not None and len(inlet_base.values) < 6:
            inlet_base.add(float(inlet))  # the first minute is the reference for slow drift
    # the site drifts when every rack whose own coolant flows does: a rack whose flow fell heats on its own, and
    # on a site of one rack that rack is the whole site (its failure is not the air's)
    if flowing and drifting == flowing and d.persist.update("fleet_drift", True, t1) >= 3:
        out.append(symptom("fleet_inlet_drift", "fleet", t1, racks=drifting))
    return out
