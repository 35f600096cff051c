"""The rules on a GPU's telemetry: reason bits, counters that grow only on faults, NVML errors, the PCIe link, a
power limit's steps, heat for the load, idling in a job; and XIDs (aiops/detect/rules.py runs them).

A GPU's temperature is judged against its own at the same load (aiops/detect/heat.py: a GPU back at work after
a long stall is not hot), and its power limit moves in steps, each dated by its own onset and judged against a
DCIM cap in force at the drop (aiops/detect/limits.py: a drop below what the cap asked is not the cap's).
"""

from __future__ import annotations

from typing import Any

from aiops.detect import windows as w
from aiops.detect.heat import load_level
from aiops.detect.kinds import symptom
from aiops.detect.limits import cap_levels
from aiops.detect.rule_state import RuleState
from aiops.models import Symptom
from aiops.nvml_bits import GPU_IDLE, SW_POWER_CAP, THROTTLE, describe, routine_power_cap
from aiops.peer_heat import peer_offsets
from collectors.nvml import DRIVER_GONE

# Xid 92 reports a high rate of *corrected* errors (NVIDIA Xid catalogue): the data is intact and the job runs on,
# so it opens nothing; the analyst still reads it as evidence.
CORRECTED_XIDS = frozenset({92})


def gpu_rules(d: RuleState, t0: float, t1: float) -> list[Symptom]:
    out: list[Symptom] = []
    rows = w.window(d.store, w.GPU_WINDOW_SQL, t0, t1)
    limits_w = {str(r["gpu"]): float(r["power_limit_w"]) for r in rows if r["power_limit_w"] is not None}
    rack_of_gpu = {str(r["gpu"]): d.rack_of.get(str(r["node"])) for r in rows}
    capped = cap_levels(limits_w, list(d.caps_kw), rack_of_gpu)  # what each cap asked, where one is
    warm = d.warm(t1)
    # above its node's other GPUs, judged against how far above them it usually runs at their power (heat.py)
    peers_c = peer_offsets((str(r["gpu"]), str(r["node"]), r["temp_c"], r["power_w"]) for r in rows)
    d.reporting = set()
    d.ends.idle = set()
    for r in rows:
        gpu = str(r["gpu"])
        d.reporting.add(str(r["node"]))
        if r["errors"]:
            if r["error"] not in DRIVER_GONE:  # NVML itself gone: the node's blindness, no GPU's fault
                out.append(symptom("gpu_lost", gpu, t1, error=r["error"]))
            continue
        throttled = (r["throttled"] or 0) >= max(2, 0.3 * r["samples"])
        routine = routine_power_cap(int(r["reasons"] or 0) & THROTTLE, r["power_limit_w"], r["power_max_w"])
        # SwPowerCap alone at a limit the product set (intended state): the cap doing what it was set for
        limit_set = d.set_by_product(gpu, "power_limit_w")
        intended = (
            int(r["reasons"] or 0) & THROTTLE == SW_POWER_CAP
            and limit_set is not None
            and limit_set.matches(r["power_limit_w"])
        )
        throttled = throttled and not routine and not intended  # SwPowerCap at the full limit: at its TDP
        if d.persist.update(f"throttle:{gpu}", throttled, t1) >= 1 and throttled:
            bits = int(r["reasons"] or 0) & THROTTLE
            out.append(
                symptom("gpu_throttle", gpu, t1, reasons=describe(bits), mask=bits, temp_c=r["max_temp_c"])
            )
        if d.counter_delta(f"dbe:{gpu}", r["dbe"]) > 0:
            out.append(symptom("ecc_dbe", gpu, t1, dbe_total=r["dbe"]))
        if d.counter_delta(f"pcie:{gpu}", r["pcie_replay"]) >= 5:
            out.append(symptom("pcie_replay", gpu, t1, replay_total=r["pcie_replay"]))
        crc = d.counter_delta(f"crc:{gpu}", r["nvlink_crc"]) + d.counter_delta(
            f"nvreplay:{gpu}", r["nvlink_replay"]
        )
        if crc >= 5:
            out.append(symptom("nvlink_errors", gpu, t1, crc_total=r["nvlink_crc"]))
        if r["link_width"] is not None and r["link_max_width"] and r["link_width"] < r["link_max_width"]:
            out.append(
                symptom("pcie_downtrain", gpu, t1, width=r["link_width"], max_width=r["link_max_width"])
            )
        limit = r["power_limit_w"]
        if limit is not None:
            # each drop a step of its own, judged against a DCIM cap in force (aiops/detect/limits.py)
            step = d.limits.update(gpu, float(limit), t1, capped.get(gpu))
            # a limit the product set is expected; one that moved away from it, or nobody set, is not
            if step is not None and not (limit_set is not None and limit_set.matches(limit)):
                detail: dict[str, Any] = {"limit_w": limit, "was_w": d.limits.first_w(gpu)}
                detail.update(step.detail())
                if limit_set is not None:
                    detail.update(intended_w=limit_set.value, set_by=limit_set.proposal_id)
                out.append(symptom("power_limit_drop", gpu, t1, **detail))
        # hot for the load it ran at: a GPU back at work after a stall is not hot (aiops/detect/heat.py)
        level = load_level(r["power_w"], r["power_max_w"] or d.limits.first_w(gpu))
        above_usual = d.peers.hot(gpu, peers_c.get(gpu), judge=warm)  # learns every window: not after an `or`
        hot = d.heat.hot(gpu, r["temp_c"], level, judge=warm) or above_usual
        if d.persist.update(f"temp:{gpu}", hot, t1) >= 2:
            baseline_c = d.heat.baseline_c(gpu, level)
            out.append(
                symptom("gpu_hot", gpu, t1, temp_c=r["temp_c"], load_level=level, baseline_c=baseline_c)
            )
        in_job = gpu in d.job_of_gpu and not d.drained(gpu)  # a drained node's GPUs idle by design
        idle = (r["idle"] or 0) >= 0.3 * r["samples"]
        if idle:
            d.ends.idle.add(gpu)
        job = d.job_of_gpu.get(gpu)  # its job ended (killed, crashed): idle by design too
        last = d.last_step_ts_s.get(job or "")
        starved = (
            in_job and idle and not d.ends.killed(job, last) and not d.restarts.restarting(job, last, t1)
        )
        if d.persist.update(f"idle:{gpu}", starved, t1) >= 2:
            out.append(symptom("gpu_idle_in_job", gpu, t1, idle_samples=r["idle"], bits=describe(GPU_IDLE)))
    return out


def xid_rules(d: RuleState, t0: float, t1: float) -> list[Symptom]:
    rows = w.window(d.store, w.XID_WINDOW_SQL, t0, t1)
    d.ends.saw_xids(rows, d.job_of_gpu)
    return [
        symptom("xid", str(r["gpu"]), float(r["ts_s"]), xid=r["xid"])
        for r in rows
        if r["xid"] not in CORRECTED_XIDS
        and not d.restarts.killed_by_product(
            _job_of(d, str(r["gpu"])), str(r["gpu"]), int(r["xid"]), float(r["ts_s"])
        )
    ]


def _job_of(d: RuleState, gpu: str) -> str | None:
    """The job on `gpu`, or the one whose ranks the scheduler just moved off it (their kill's Xids land there)."""
    return d.job_of_gpu.get(gpu) or d.ends.left.get(gpu)
