"""The standing hardware and controller state of a what-if world, from stored rows only (issue 14, item 2;
`aiops.sim.calibrate.world_from_store` calls these after the readings):
- GPUs off the bus: a GPU whose newest NVML row says `GPU_IS_LOST`, or with an Xid 79 (gpu_events, kernel_events)
  or a kernel `fallen off the bus` line (kernel_events kind fell_off_bus) and no good reading since, is lost
  and its rank dead (a job on it hangs; a preview that puts work on it says so). A node-wide NVML `TIMEOUT` without an Xid 79 removes nothing;
- power brakes: a GPU whose newest clocks-event reasons carry HwPowerBrakeSlowdown keeps the clock factor its
  stored clocks imply (SM clock / max SM clock) as `World.brake_factor`, so more power limit is no speed-up; an
  idle braked GPU takes its last busy braked clock, else its node's braked GPUs', else half clock;
- counters: ECC, PCIe replay, NVLink CRC/replay and the PCIe link width/generation from each GPU's newest row;
  carrier changes per NIC summed from the stored intervals (within `HISTORY_S`);
- link flaps: a NIC with two or more carrier changes within `FLAP_WINDOW_S` keeps an outage rate
  (`World.flap_period_s`/`flap_down_s`); one down in its newest row with fewer stays down;
- the lane controller's ceilings per NIC and lane (`lane_rate_bps`: the eBPF telemetry reports each lane's ceil);
- the cooling controller: each rack's pump setpoint as last executed, and the share of it the loop delivers;
- DCIM caps: the signal in force per scope at the preview time (newest row at or before it; `clear` ends it) as a
  ceiling on the limits of the GPUs it covers (`World.facility_limit_w`: the scope's budget less its hosts; limits
  in force that fit it keep their allocation plus an even part of the rest, else an even share each).
Only the `HISTORY_S` before the preview time is read (a preview costs the same on a store of a day or a year;
a state older than that is not "the newest"): a GPU silent that long is not marked lost, counters start from
their newest value within it, carrier changes are summed over it.
Every stored value is hostile: checked finite, clamped to the model's range; unknown names are skipped.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from aiops import nvml_bits as bits
from aiops.sim import gpu
from aiops.sim import network as net
from aiops.sim.world import World
from aiops.store import Store

HISTORY_S = 6 * 3600.0  # the stored history a preview reads (module doc)
FLAP_WINDOW_S = 300.0  # carrier changes over this long give a NIC's outage rate (a flap period is ~15–60 s)
XID_OFF_THE_BUS = 79
LOST = "GPU_IS_LOST"
BRAKE_MIN_FACTOR = 0.1  # the lowest clock factor a stored brake is taken at
BRAKE_UNKNOWN_FACTOR = 0.5  # a brake seen only on idle GPUs: its depth is unknown, half clock is assumed
COUNTER_MAX = 2**62
COUNTERS = ("ecc_sbe_total", "ecc_dbe_total", "pcie_replay_total", "nvlink_crc_total", "nvlink_replay_total")
WORLD_COUNTERS = ("ecc_sbe", "ecc_dbe", "pcie_replay", "nvlink_crc", "nvlink_replay")


def finite(value: Any, low: float, high: float) -> float | None:
    """A stored number clamped to [low, high]; None when it is missing or not a finite number."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return min(high, max(low, number)) if math.isfinite(number) else None


def lost_gpus(world: World, store: Store, at_ts_s: float) -> None:
    """Mark GPUs off the bus lost and their ranks dead (module doc)."""
    since = (at_ts_s - HISTORY_S, at_ts_s)
    rows = store.query(
        "WITH newest AS (SELECT gpu, max(ts_s) AS ts_s FROM gpu_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY gpu), "
        "good AS (SELECT gpu, max(ts_s) AS ts_s FROM gpu_samples WHERE ts_s > ? AND ts_s <= ? "
        "AND nvml_error IS NULL AND temp_c IS NOT NULL GROUP BY gpu), "
        "xid AS (SELECT gpu, max(ts_s) AS ts_s FROM gpu_events WHERE xid = ? AND ts_s > ? AND ts_s <= ? GROUP BY gpu "
        "UNION ALL SELECT component AS gpu, max(ts_s) AS ts_s FROM kernel_events "
        "WHERE ((kind = 'xid' AND code = ?) OR kind = 'fell_off_bus') "
        "AND ts_s > ? AND ts_s <= ? "
        "GROUP BY component) "
        "SELECT n.gpu, bool_or(s.nvml_error = ?) AS lost_row, max(x.ts_s) AS xid_ts_s, max(g.ts_s) AS good_ts_s "
        "FROM newest n JOIN gpu_samples s ON s.gpu = n.gpu AND s.ts_s = n.ts_s "
        "LEFT JOIN xid x ON x.gpu = n.gpu LEFT JOIN good g ON g.gpu = n.gpu GROUP BY n.gpu "
        "UNION ALL SELECT x.gpu, false, max(x.ts_s), NULL FROM xid x "
        "WHERE x.gpu NOT IN (SELECT gpu FROM newest) GROUP BY x.gpu",
        [*since, *since, XID_OFF_THE_BUS, *since, XID_OFF_THE_BUS, *since, LOST],
    )
    index = world.layout.gpu_index
    for r in rows:
        i = index.get(str(r["gpu"]))
        if i is None:
            continue
        xid_ts_s, good_ts_s = finite(r["xid_ts_s"], 0.0, at_ts_s), finite(r["good_ts_s"], 0.0, at_ts_s)
        xid_unanswered = xid_ts_s is not None and (good_ts_s is None or good_ts_s <= xid_ts_s)
        if r["lost_row"] is True or xid_unanswered:
            world.lost[i] = world.dead[i] = True


def gpu_state(world: World, store: Store, at_ts_s: float) -> None:
    """Power brakes and cumulative counters from each GPU's newest rows (module doc)."""
    counters = ", ".join(f"arg_max({c}, ts_s) FILTER (WHERE {c} IS NOT NULL) AS {c}" for c in COUNTERS)
    rows = store.query(
        f"SELECT gpu, {counters}, "
        "arg_max(clocks_event_reasons, ts_s) FILTER (WHERE clocks_event_reasons IS NOT NULL) AS reasons, "
        "arg_max(sm_clock_mhz / max_sm_clock_mhz, ts_s) FILTER (WHERE sm_clock_mhz IS NOT NULL "
        "AND max_sm_clock_mhz > 0) AS clock_factor, "
        "arg_max(sm_clock_mhz / max_sm_clock_mhz, ts_s) FILTER (WHERE sm_clock_mhz IS NOT NULL "
        "AND max_sm_clock_mhz > 0 AND clocks_event_reasons & ? <> 0 AND clocks_event_reasons & ? = 0) "
        "AS busy_brake_factor, "
        "arg_max(pcie_link_width, ts_s) FILTER (WHERE pcie_link_width IS NOT NULL) AS width, "
        "arg_max(pcie_link_gen, ts_s) FILTER (WHERE pcie_link_gen IS NOT NULL) AS gen "
        "FROM gpu_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY gpu",
        [bits.HW_POWER_BRAKE_SLOWDOWN, bits.GPU_IDLE, at_ts_s - HISTORY_S, at_ts_s],
    )
    index = world.layout.gpu_index
    idle_braked: list[int] = []
    for r in rows:
        i = index.get(str(r["gpu"]))
        if i is None:
            continue
        for column, attribute in zip(COUNTERS, WORLD_COUNTERS, strict=True):
            value = finite(r[column], 0.0, COUNTER_MAX)
            if value is not None:
                getattr(world, attribute)[i] = int(value)
        width, gen = finite(r["width"], 1.0, 32.0), finite(r["gen"], 1.0, 6.0)
        if width is not None:
            world.link_width[i] = int(width)
        if gen is not None:
            world.link_gen[i] = int(gen)
        reasons = finite(r["reasons"], 0.0, 2.0**63)
        factor = finite(r["clock_factor"], BRAKE_MIN_FACTOR, 1.0)
        if factor is not None:  # the clock as last read (the preview's `now`); stepping recomputes it
            world.clock_factor[i] = factor
            world.sm_clock_mhz[i] = factor * gpu.MAX_SM_CLOCK_MHZ
        if reasons is None or not int(reasons) & bits.HW_POWER_BRAKE_SLOWDOWN:
            continue
        # an idle GPU's clock says nothing of the brake's depth: its own last busy braked clock, else later
        # its node's braked busy GPUs, else BRAKE_UNKNOWN_FACTOR
        busy = finite(r["busy_brake_factor"], BRAKE_MIN_FACTOR, 1.0)
        if int(reasons) & bits.GPU_IDLE:
            if busy is None:
                idle_braked.append(i)
            else:
                world.brake_factor[i] = busy
        elif factor is not None:
            world.brake_factor[i] = factor
    node = world.layout.gpu_node
    for i in idle_braked:
        known = world.brake_factor[(node == node[i]) & (world.brake_factor < 1.0)]
        world.brake_factor[i] = float(known.min()) if known.size else BRAKE_UNKNOWN_FACTOR


def nic_state(world: World, store: Store, at_ts_s: float, window_s: float) -> None:
    """Carrier changes, link flaps and the lane controller's ceilings per NIC (module doc)."""
    index = world.layout.nic_index
    since_s = at_ts_s - FLAP_WINDOW_S
    flaps = store.query(
        "SELECT nic, sum(carrier_changes) FILTER (WHERE ts_s > ?) AS changes, sum(carrier_changes) AS total, "
        "min(ts_s) FILTER (WHERE ts_s > ?) AS first_ts_s, avg(interval_s) FILTER (WHERE ts_s > ?) AS interval_s, "
        "count(DISTINCT ts_s) FILTER (WHERE ts_s > ? AND link_up = false) AS down, "
        "arg_max(link_up, ts_s) AS newest_up FROM nic_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY nic",
        [since_s] * 4 + [at_ts_s - HISTORY_S, at_ts_s],
    )
    for r in flaps:
        i = index.get(str(r["nic"]))
        if i is None:
            continue
        world.carrier_changes[i] = int(finite(r["total"], 0.0, COUNTER_MAX) or 0)
        world.link_up[i] = r["newest_up"] is not False
        changes = finite(r["changes"], 0.0, 1e9) or 0.0
        if changes < 2.0:
            continue  # steady: no flap (down and back up) in the window; a link down since then stays down
        first_ts_s = finite(r["first_ts_s"], since_s, at_ts_s)
        seen_s = max(1.0, at_ts_s - (since_s if first_ts_s is None else first_ts_s))
        interval_s = finite(r["interval_s"], 0.01, 60.0) or 1.0
        outages = max(1.0, changes / 2.0)  # a flap is a change down and one back up
        down_s = (finite(r["down"], 0.0, 1e9) or 0.0) * interval_s / outages
        world.flap_period_s[i] = period_s = max(2.0, seen_s / outages)
        world.flap_down_s[i] = min(period_s / 2.0, max(1.0, down_s))
    ceilings = store.query(
        "SELECT nic, lane, arg_max(lane_rate_bps, ts_s) AS rate_bps FROM nic_samples "
        "WHERE ts_s > ? AND ts_s <= ? AND lane_rate_bps IS NOT NULL GROUP BY nic, lane",
        [at_ts_s - window_s, at_ts_s],
    )
    for r in ceilings:
        i, lane = index.get(str(r["nic"])), str(r["lane"])
        rate = finite(r["rate_bps"], 0.0, net.LINK_BPS)
        if i is not None and lane in net.LANES and rate is not None:
            world.lane_control.ceil_fraction[i, net.LANES.index(lane)] = rate / net.LINK_BPS


def cooling(world: World, store: Store, at_ts_s: float) -> None:
    """Each rack's CDU pump setpoint as last executed (`executions` of `set_cooling_state`, the detail's
    `coolant_flow_setpoint_lpm`), else the nominal flow (or the measured one when above it); the measured flow
    over it is what the loop delivers (`World.flow_health`), so a preview that raises the setpoint of a failing
    loop gets that share of it. Runs after the readings (`World.flow_lpm` is the measured flow)."""
    rows = store.query(
        "SELECT target, arg_max(result, ts_s) AS result FROM executions WHERE kind = 'set_cooling_state' "
        "AND status = 'executed' AND ts_s <= ? GROUP BY target",
        [at_ts_s],
    )
    executed: dict[str, float] = {}
    for r in rows:
        try:
            payload = json.loads(str(r["result"]))
        except ValueError:
            continue
        detail = payload.get("detail") if isinstance(payload, dict) else None
        if isinstance(detail, dict) and detail.get("dry_run") is not True:
            lpm = finite(detail.get("coolant_flow_setpoint_lpm"), 0.0, gpu.MAX_FLOW_LPM)
            if lpm is not None:
                executed[str(r["target"])] = lpm
    for i, rack in enumerate(world.layout.rack_names):
        measured = float(world.flow_lpm[i])
        setpoint = executed.get(rack, max(gpu.FLOW_LPM, measured))
        world.flow_setpoint_lpm[i] = setpoint
        world.flow_health[i] = min(1.0, measured / setpoint) if setpoint > 0.0 else 1.0


def dcim_caps(world: World, store: Store, at_ts_s: float) -> None:
    """The DCIM cap in force at `at_ts_s` per scope as a ceiling on its GPUs' limits (module doc)."""
    rows = store.query(
        "SELECT scope, arg_max(kind, ts_s) AS kind, arg_max(budget_kw, ts_s) AS budget_kw FROM dcim_signals "
        "WHERE ts_s <= ? GROUP BY scope",
        [at_ts_s],
    )
    lay = world.layout
    for r in rows:
        scope = str(r["scope"])
        budget_kw = finite(r["budget_kw"], 0.0, 1e6)
        if r["kind"] != "cap" or budget_kw is None or (scope != "fleet" and scope not in lay.rack_names):
            continue
        gpus = lay.gpus_of(scope)
        if gpus.size == 0:
            continue
        nodes = int(np.unique(lay.gpu_node[gpus]).size)
        gpus_w = (budget_kw - gpu.HOST_POWER_KW * nodes) * 1000.0  # what the scope's GPUs may draw together
        limits_w = world.power_limit_w[gpus]
        spare_w = gpus_w - float(limits_w.sum())
        # limits that fit the budget are the controller's allocation (its priorities): each keeps its own plus
        # an even part of what is left; limits over it (the cap just arrived) come down to an even share
        ceiling_w = limits_w + spare_w / gpus.size if spare_w >= 0 else np.full(gpus.size, gpus_w / gpus.size)
        ceiling_w = np.clip(ceiling_w, gpu.MIN_LIMIT_W, gpu.TDP_W)
        world.facility_limit_w[gpus] = np.minimum(world.facility_limit_w[gpus], ceiling_w)
