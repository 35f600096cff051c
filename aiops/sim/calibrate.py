"""A fault-free what-if world calibrated from a workspace's stored telemetry and topology (issue 14, item 2).

`world_from_store(store, at_ts_s)` builds a `World` whose scenario holds no fault at all: its cluster comes from
the `topology` table, its jobs and their placement from `jobs`/`job_ranks`, and its state from the readings
of the `window_s` seconds up to the newest GPU reading at or before `at_ts_s`:
- per GPU: the enforced power limit (newest), power draw, utilisation and temperature (means); the thermal
  resistance the temperature implies at that power and coolant (`implied_r_th`), so a GPU that runs hot for
  its power stays hot in a preview without any fault object, and cools when its power drops;
- per rack: coolant supply temperature (held as the CDU's target) and flow (held as the pump setpoint);
- per NIC: lanes enforced (a lane row rather than `fifo`), ECN (a NIC that drops but never marks CE has it
  off), link state (newest);
- the lane rules of the newest `lane_rules` snapshot (a rule that is not the policy's own is an override);
- per busy node: the data loader's wait beyond the healthy one (`host_samples.loader_wait_ms`).
Then the standing hardware and controller state (aiops/sim/calibrate_hw.py): GPUs off the bus, power brakes,
counters, link flaps, the lane and cooling controllers' state and the DCIM cap in force.
What the store does not hold stays at the simulator's defaults; docs/SIMULATOR.md ("What-if") lists it.
Stored values are hostile data: every one is checked finite and clamped to the model's range.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from aiops.datapath.policy import Policy
from aiops.errors import CalibrationError
from aiops.scenarios import ClusterSpec, JobSpec, Scenario
from aiops.sim import calibrate_hw as hw
from aiops.sim import gpu
from aiops.sim import network as net
from aiops.sim.topology import F64
from aiops.sim.world import SIM_EPOCH_TS_S, World
from aiops.store import Store

WINDOW_S = 30.0  # readings averaged per GPU, rack and host
HEALTHY_LOADER_MS = 5.0  # the simulator's loader wait per step on a healthy node (fabric.step)
LOADER_NOISE_MS = 3.0  # its spread: less than this above the healthy wait is noise, not a starved loader
OFFSET_MAX_C = 3.5  # the per-GPU sensor/silicon spread the simulator allows; more is thermal resistance
R_TH_MAX_MULT = 6.0  # an implied resistance is clamped to [nominal / 2, nominal × this]
TEMP_RANGE_C = (0.0, 120.0)
SUPPLY_RANGE_C = (5.0, 60.0)


def _cluster(store: Store) -> tuple[ClusterSpec, set[str]]:
    rows = store.query("SELECT component, kind FROM topology")
    names = {str(r["component"]) for r in rows}
    count = {kind: sum(1 for r in rows if r["kind"] == kind) for kind in ("rack", "node", "gpu", "nic")}
    if not count["rack"] or not count["node"] or not count["gpu"] or count["node"] % count["rack"]:
        raise CalibrationError(f"{store.path}: topology is not a grid of racks, nodes and GPUs ({count})")
    spec = ClusterSpec(
        racks=count["rack"],
        nodes_per_rack=count["node"] // count["rack"],
        gpus_per_node=max(1, count["gpu"] // count["node"]),
        nics_per_node=max(1, count["nic"] // count["node"]),
    )
    return spec, names


def _jobs(store: Store, workload: Sequence[JobSpec], nodes: int) -> list[JobSpec]:
    """Jobs where `job_ranks` places them (node order by rank); step compute and all-reduce size from
    `workload` (the job's own description) by name, else the simulator's defaults."""
    known = {j.name: j for j in workload}
    schedule = {str(r["job"]): r for r in store.query("SELECT * FROM jobs")}
    placed: dict[str, list[str]] = {}
    for r in store.query("SELECT job, node FROM job_ranks ORDER BY job, rank"):
        order = placed.setdefault(str(r["job"]), [])
        if str(r["node"]) not in order:
            order.append(str(r["node"]))
    out = []
    for name, order in sorted(placed.items()):
        if not all(n.startswith("node") and n[4:].isdigit() and int(n[4:]) < nodes for n in order):
            raise CalibrationError(f"job_ranks: job '{name}' names a node outside node0..node{nodes - 1}")
        base = known.get(name) or JobSpec(name=name)
        row = schedule.get(name, {})
        every = hw.finite(row.get("checkpoint_every_s"), 1.0, 1e9)
        update: dict[str, Any] = {"nodes": order, "checkpoint_every_s": every if every else None}
        gb = hw.finite(row.get("checkpoint_gb"), 0.0, 100_000.0)
        if gb is not None:
            update["checkpoint_gb"] = gb
        out.append(base.model_copy(update=update))
    return out


def implied_r_th(temp_c: F64, power_w: F64, coolant_c: F64, flow_factor: F64) -> tuple[F64, F64]:
    """(base thermal resistance °C/W, offset °C) per GPU that reproduce `temp_c` at `power_w` in steady state
    (`gpu.gpus`: T = coolant + P·R·flow_factor + offset). Up to ±OFFSET_MAX_C above the nominal resistance is
    the GPU's own spread; beyond it, the excess is resistance (a fouled cold plate runs hotter with more power)."""
    power = np.maximum(power_w, gpu.IDLE_POWER_W)
    residual = temp_c - (coolant_c + power * gpu.R_TH_C_PER_W * flow_factor)
    offset = np.clip(residual, -OFFSET_MAX_C, OFFSET_MAX_C)
    r_th = gpu.R_TH_C_PER_W + (residual - offset) / (power * flow_factor)
    r_th = np.clip(r_th, gpu.R_TH_C_PER_W / 2, gpu.R_TH_C_PER_W * R_TH_MAX_MULT)
    return r_th, offset


def world_from_store(
    store: Store,
    at_ts_s: float,
    *,
    epoch_ts_s: float = SIM_EPOCH_TS_S,
    lanes_policy: Policy | None = None,
    workload: Sequence[JobSpec] = (),
    window_s: float = WINDOW_S,
) -> World:
    """A fault-free world as the store saw the cluster in the `window_s` before `at_ts_s` (module doc)."""
    cluster, names = _cluster(store)
    scenario = Scenario(name="calibrated", cluster=cluster, jobs=_jobs(store, workload, cluster.nodes))
    world = World(scenario, lanes_policy, epoch_ts_s=epoch_ts_s)
    lay = world.layout
    if {"fleet", *lay.rack_names, *lay.node_names, *lay.gpu_names, *lay.nic_names} != names | {"fleet"}:
        raise CalibrationError(f"{store.path}: topology names are not the simulator's grid names")
    world.elapsed_s = max(0.0, at_ts_s - epoch_ts_s)
    newest = hw.finite(
        store.scalar("SELECT max(ts_s) FROM gpu_samples WHERE ts_s <= ?", [at_ts_s]), 0.0, at_ts_s
    )
    end_s = at_ts_s if newest is None else newest  # a twin advanced past its telemetry: the last readings
    since = (end_s - window_s, end_s)
    _racks(world, store, since)
    _gpus(world, store, since)
    _nics(world, store, since)
    _rules(world, store, at_ts_s)
    _hosts(world, store, since)
    _steps(world, store, at_ts_s)
    hw.lost_gpus(world, store, at_ts_s)
    hw.gpu_state(world, store, end_s)
    hw.nic_state(world, store, end_s, window_s)
    hw.cooling(world, store, at_ts_s)
    hw.dcim_caps(world, store, at_ts_s)
    world.v = world._view()
    return world


def _racks(world: World, store: Store, since: tuple[float, float]) -> None:
    rows = store.query(
        "SELECT rack, avg(coolant_supply_temp_c) AS supply_c, avg(coolant_flow_lpm) AS flow_lpm "
        "FROM rack_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY rack",
        list(since),
    )
    index = {name: i for i, name in enumerate(world.layout.rack_names)}
    for r in rows:
        i = index.get(str(r["rack"]))
        if i is None:
            continue
        supply = hw.finite(r["supply_c"], *SUPPLY_RANGE_C)
        if supply is not None:
            world.supply_target_c[i] = world.supply_c[i] = world.inlet_c[i] = supply
        flow = hw.finite(r["flow_lpm"], 0.0, gpu.MAX_FLOW_LPM)
        if flow is not None:
            world.flow_setpoint_lpm[i] = world.flow_lpm[i] = flow


def _gpus(world: World, store: Store, since: tuple[float, float]) -> None:
    rows = store.query(
        "SELECT gpu, avg(temp_c) AS temp_c, avg(power_w) AS power_w, avg(util_pct) AS util_pct, "
        "arg_max(power_limit_w, ts_s) AS limit_w FROM gpu_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY gpu",
        list(since),
    )
    lay = world.layout
    seen = np.zeros(lay.gpu_count, dtype=bool)
    for r in rows:
        i = lay.gpu_index.get(str(r["gpu"]))
        temp = hw.finite(r["temp_c"], *TEMP_RANGE_C)
        power = hw.finite(r["power_w"], 0.0, gpu.TDP_W * 1.5)
        if i is None or temp is None or power is None:
            continue
        seen[i] = True
        world.temp_c[i], world.power_w[i] = temp, power
        world.util_pct[i] = hw.finite(r["util_pct"], 0.0, 100.0) or 0.0
        limit = hw.finite(r["limit_w"], gpu.MIN_LIMIT_W, gpu.TDP_W)
        if limit is not None:
            world.power_limit_w[i] = limit
    rack = lay.gpu_rack
    flow_penalty = (gpu.FLOW_LPM / np.maximum(world.flow_lpm, 20.0))[rack] - 1.0
    coolant_c = world.supply_c[rack] + gpu.PLATE_RISE_C + 0.6 * flow_penalty
    r_th, offset = implied_r_th(world.temp_c, world.power_w, coolant_c, 1.0 + 0.25 * flow_penalty)
    world.r_th = np.where(seen, r_th, gpu.R_TH_C_PER_W)
    world.offset_c = np.where(seen, offset, 0.0)
    world.power_hunger = np.ones(lay.gpu_count)  # the measured draw already holds each GPU's own spread
    world.mem_temp_c = world.temp_c + 6.0 + 0.004 * world.power_w


def _nics(world: World, store: Store, since: tuple[float, float]) -> None:
    rows = store.query(
        "SELECT nic, arg_max(lane, ts_s) AS lane, arg_max(link_up, ts_s) AS link_up, sum(ce_marks) AS ce, "
        "sum(drops) AS drops FROM nic_samples WHERE ts_s > ? AND ts_s <= ? GROUP BY nic",
        list(since),
    )
    index = world.layout.nic_index
    for r in rows:
        i = index.get(str(r["nic"]))
        if i is None:
            continue
        world.lanes_enforced[i] = str(r["lane"]) != "fifo"
        world.link_up[i] = r["link_up"] is not False
        ce, drops = hw.finite(r["ce"], 0.0, 1e18) or 0.0, hw.finite(r["drops"], 0.0, 1e18) or 0.0
        world.ecn_enabled[i] = not (ce == 0.0 and drops > 0.0)  # drops instead of marks: ECN is off


def _rules(world: World, store: Store, at_ts_s: float) -> None:
    newest = store.scalar("SELECT max(ts_s) FROM lane_rules WHERE ts_s <= ?", [at_ts_s])
    if newest is None:
        return
    rows = store.query(
        "SELECT rule_id, match_kind, match_value, lane, scope FROM lane_rules WHERE ts_s = ? ORDER BY rowid",
        [newest],
    )
    own = set(net.rules_from_policy(world.lanes_policy))
    rules = []
    for r in rows:
        if str(r["lane"]) not in net.LANES:
            continue  # a lane the datapath does not have: never trusted into the model
        rule = net.Rule(
            str(r["rule_id"]),
            str(r["match_kind"]),
            str(r["match_value"] or ""),
            str(r["lane"]),
            str(r["scope"]),
        )
        rules.append(rule if rule in own else replace(rule, override=True))
    world.set_rules(tuple(rules))


def _hosts(world: World, store: Store, since: tuple[float, float]) -> None:
    rows = store.query(
        "SELECT node, avg(loader_wait_ms) AS loader_ms FROM host_samples WHERE ts_s > ? AND ts_s <= ? "
        "GROUP BY node",
        list(since),
    )
    lay = world.layout
    for r in rows:
        name, wait = str(r["node"]), hw.finite(r["loader_ms"], 0.0, 60_000.0)
        if wait is None or name not in lay.node_names:
            continue
        node = lay.node_names.index(name)
        if lay.busy_nodes[node] and wait > HEALTHY_LOADER_MS + LOADER_NOISE_MS:
            world.loader_extra_ms[node] = wait - HEALTHY_LOADER_MS


def _steps(world: World, store: Store, at_ts_s: float) -> None:
    for job in world.layout.jobs:
        value = store.scalar(
            "SELECT arg_max(step_time_s, ts_s) FROM job_steps WHERE job = ? AND ts_s <= ?",
            [job.name, at_ts_s],
        )
        step_s = hw.finite(value, 1e-3, 1e6)
        if step_s is not None:
            world.step_time_s[job.index] = step_s
