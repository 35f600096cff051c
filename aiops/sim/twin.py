"""The twin of a simulated workspace, kept as plain data and rebuilt deterministically: no pickle, ever.

A simulated workspace records the run it was made from (`sim_runs`: the scenario as YAML, the lanes policy, the
simulated seconds) and every change to its twin since (`twin_log`: actions applied, rollbacks, time advanced),
in order. `Twin.load(store)` validates the stored scenario and policy with the same parsers as a file, builds
the world from the scenario's seed, steps it to where the run ended, checks that its cluster is the stored
topology (else `TwinMismatch`), and replays the log. The world is deterministic, so every process that loads
the twin holds the same world; `sync(store)` applies what other processes appended since.

Every actuation of the twin goes through `TwinActuator` (the guardrails' `Actuator` protocol over
`aiops.sim.actuator.SimActuator`): it syncs first, applies, and appends the change, all inside the caller's
write transaction on the workspace, so the log's order is the order the world saw. What-if previews act on
copies (`World.copy`) and are never logged.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np
import yaml

from aiops.datapath.policy import Policy, parse_policy
from aiops.errors import InputError, TwinMismatch
from aiops.safeload import safe_load
from aiops.scenarios import Scenario, parse_scenario_text, scenario_yaml
from aiops.sim.actuator import SimActuator
from aiops.sim.world import SIM_EPOCH_TS_S, World
from aiops.store import Store
from guardrails.actions import Action, canonical_json
from guardrails.actuators import ActuationResult
from guardrails.registry import DEFAULT_REGISTRY
from guardrails.topology import Topology

FORMAT_VERSION = 1
LOG_KINDS = ("action", "rollback", "advance")
SOURCE = "<workspace sim_runs>"


def record_run(
    store: Store,
    scenario: Scenario,
    lanes_policy: Policy | None,
    simulated_s: float,
    now_ts_s: float | None = None,
    *,
    epoch_ts_s: float | None = None,
    node: str | None = None,
) -> None:
    """Remember the run a simulated workspace was made from (the newest row is the one the twin uses);
    `epoch_ts_s`: the wall time of its elapsed 0 when not the simulator's epoch; `node`: the one node of the
    cluster the workspace serves (a node agent's slice), None for the whole cluster."""
    policy_text = (
        yaml.safe_dump(lanes_policy.model_dump(mode="json"), sort_keys=True) if lanes_policy else None
    )
    store.conn.execute(
        "INSERT INTO sim_runs (ts_s, scenario_name, scenario_yaml, lanes_policy_yaml, simulated_s, format_version, "
        "epoch_ts_s, node) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
        [
            time.time() if now_ts_s is None else now_ts_s,
            scenario.name,
            scenario_yaml(scenario),
            policy_text,
            float(simulated_s),
            FORMAT_VERSION,
            epoch_ts_s,
            node,
        ],
    )


def has_run(store: Store) -> bool:
    return bool(store.scalar("SELECT count(*) FROM sim_runs"))


def _stored_topology(store: Store) -> set[str]:
    return {str(r["component"]) for r in store.query("SELECT component FROM topology")}


def _world_topology(world: World, node: str | None = None) -> set[str]:
    """The components of the world's cluster; with `node`, those its node agent stores (the fleet, its rack,
    itself, its GPUs and NICs: `NodeSlice.owns` on `topology`)."""
    lay = world.layout
    if node is not None:
        n = lay.node_names.index(node)
        gpus = [g for g, at in zip(lay.gpu_names, lay.gpu_node.tolist(), strict=True) if at == n]
        nics = [k for k, at in zip(lay.nic_names, lay.nic_node.tolist(), strict=True) if at == n]
        return {"fleet", str(lay.rack_names[lay.node_rack[n]]), node, *map(str, gpus), *map(str, nics)}
    names = {"fleet", *lay.rack_names, *lay.node_names, *lay.gpu_names, *lay.nic_names}
    return {str(n) for n in names}


def _shape(names: set[str]) -> str:
    racks = sum(1 for n in names if n.startswith("rack"))
    nodes = sum(1 for n in names if n.startswith("node") and "/" not in n)
    gpus = sum(1 for n in names if "/gpu" in n)
    return f"{racks} racks, {nodes} nodes, {gpus} GPUs"


_RUNS: OrderedDict[tuple[str, str | None, int, float], World] = OrderedDict()
_RUNS_LOCK = threading.Lock()
# a few worlds: a console or a test process opens the same workspace's twin again and again
_RUNS_KEPT = 4


def _simulated(
    text: str,
    policy_text: str | None,
    steps: int,
    epoch_ts_s: float,
    scenario: Scenario,
    policy: Policy | None,
) -> World:
    """The stored run simulated `steps` seconds, before its log: deterministic in its inputs, so simulated once
    per process and copied (a copy costs ~1 ms; the run ~0.15 s of CPU for a tiny cluster's 5 minutes, paid at
    every chat session that loads the twin)."""
    key = (text, policy_text, steps, epoch_ts_s)
    with _RUNS_LOCK:
        world = _RUNS.get(key)
        if world is None:
            world = World(scenario, policy, epoch_ts_s=epoch_ts_s)
            for _ in range(steps):
                world.step(1.0)
            _RUNS[key] = world
            while len(_RUNS) > _RUNS_KEPT:
                _RUNS.popitem(last=False)
        _RUNS.move_to_end(key)
        return copy.deepcopy(world)


class Twin:
    """A world and how far through the workspace's `twin_log` it is (`applied_seq`); `node`: the node whose slice
    the workspace holds (`aiops run --sim S --node N`), None for the whole cluster. The world is always the whole
    cluster: the simulation is coupled (collectives, stragglers, racks)."""

    def __init__(self, world: World, applied_seq: int = 0, node: str | None = None) -> None:
        self.world = world
        self.applied_seq = applied_seq
        self.node = node
        # `vouched`: its holder (the service, for its flush's hold: Service.flush) says nothing but this twin
        # writes the log while it is set; `current`: meanwhile, the log ends at `applied_seq` (read or written
        # here), so `sync` and `append` need not ask the log. Both false otherwise: every call asks.
        self.vouched = False
        self.current = False

    @property
    def topology(self) -> Topology:
        """The cluster as the twin runs it now: jobs where they run after any migration."""
        return world_topology(self.world)

    # -- building -------------------------------------------------------------------------------------------
    @classmethod
    def load(cls, store: Store, *, reuse: bool = False) -> Twin | None:
        """The workspace's twin, rebuilt from its stored run and log; None for a workspace that was not
        simulated. Raises `TwinMismatch` when the stored run cannot be read or its cluster is not the stored
        topology. `reuse`: a copy of the run this process simulated already (a chat session per console chat or
        question; never a service, which steps its own world for days and would keep the first one besides)."""
        row = store.conn.execute(
            "SELECT scenario_yaml, lanes_policy_yaml, simulated_s, format_version, epoch_ts_s, node FROM sim_runs "
            "ORDER BY ts_s DESC LIMIT 1"
        ).fetchone()
        if row is None:
            return None
        text, policy_text, simulated_s, version = str(row[0]), row[1], float(row[2]), int(row[3])
        epoch_ts_s = SIM_EPOCH_TS_S if row[4] is None else float(row[4])
        if version != FORMAT_VERSION:
            raise TwinMismatch(f"{store.path}: twin format {version}; this aiops reads {FORMAT_VERSION}")
        try:
            scenario = parse_scenario_text(text, SOURCE)
            policy = parse_policy(safe_load(policy_text), SOURCE) if policy_text else None
        except (InputError, yaml.YAMLError) as exc:
            raise TwinMismatch(f"{store.path}: the stored run does not validate: {exc}") from None
        node = None if row[5] is None else str(row[5])
        steps = round(simulated_s)
        if reuse:
            world = _simulated(text, policy_text, steps, epoch_ts_s, scenario, policy)
        else:
            world = World(scenario, policy, epoch_ts_s=epoch_ts_s)
            for _ in range(steps):
                world.step(1.0)
        if node is not None and node not in world.layout.node_names:
            raise TwinMismatch(f"{store.path}: serves {node}, which scenario '{scenario.name}' does not have")
        twin = cls(world, node=node)
        twin.check_topology(store)
        twin.sync(store)
        return twin

    def check_topology(self, store: Store) -> None:
        stored, mine = _stored_topology(store), _world_topology(self.world, self.node)
        if stored and stored != mine:
            raise TwinMismatch(
                f"{store.path}: the twin's cluster ({_shape(mine)}) is not the stored topology ({_shape(stored)}); "
                "refusing to act on it"
            )

    # -- the log ----------------------------------------------------------------------------------------------
    def sync(self, store: Store) -> int:
        """Apply what the workspace's log holds beyond `applied_seq`; returns how many changes were applied."""
        if self.vouched and self.current:
            return 0  # the log ends where this twin is (see __init__)
        rows = store.conn.execute(
            "SELECT seq, elapsed_s, kind, payload FROM twin_log WHERE seq > ? ORDER BY seq",
            [self.applied_seq],
        ).fetchall()
        for seq, elapsed_s, kind, payload in rows:
            self._replay(str(kind), float(elapsed_s), json.loads(str(payload)))
            self.applied_seq = int(seq)
        self.current = self.vouched
        return len(rows)

    def _replay(self, kind: str, elapsed_s: float, data: dict[str, Any]) -> None:
        while self.world.elapsed_s < elapsed_s - 1e-9:  # an older log may have advanced without an event
            self.world.step(1.0)
        if kind == "advance":
            for _ in range(max(0, round(float(data["seconds"])))):
                self.world.step(1.0)
            return
        action = Action.model_validate(data["action"])
        actuator = SimActuator(self.world, self.topology)
        result = (
            actuator.apply(action, False) if kind == "action" else actuator.rollback(action, data["previous"])
        )
        if not result.ok:
            raise TwinMismatch(f"replaying twin_log ({kind} {action.proposal_id}) failed: {result.error}")

    def append(
        self,
        store: Store,
        kind: str,
        proposal_id: str,
        data: dict[str, Any],
        *,
        elapsed_s: float | None = None,
    ) -> None:
        """Record a change this process is making to the world (it must be in sync first); `elapsed_s`: the
        twin's clock when it happened (default: now)."""
        if kind not in LOG_KINDS:
            raise ValueError(f"unknown twin_log kind '{kind}' ({', '.join(LOG_KINDS)})")
        if self.vouched and self.current:
            seq = self.applied_seq + 1  # the log ends where this twin is (see __init__)
        else:
            seq = int(store.scalar("SELECT coalesce(max(seq), 0) FROM twin_log") or 0) + 1
        if seq != self.applied_seq + 1:
            raise TwinMismatch(f"twin_log moved on (seq {seq - 1}, this twin {self.applied_seq}): sync first")
        store.conn.execute(
            "INSERT INTO twin_log VALUES (?, ?, ?, ?, ?, ?)",
            [
                seq,
                time.time(),
                float(self.world.elapsed_s if elapsed_s is None else elapsed_s),
                kind,
                proposal_id,
                canonical_json(data),
            ],
        )
        self.applied_seq = seq
        self.current = self.vouched

    def advance(self, store: Store, seconds: float) -> None:
        """Run the twin `seconds` forward (recorded, so every process's twin moves alike)."""
        self.sync(store)
        self.append(store, "advance", "", {"seconds": float(round(seconds))})
        for _ in range(max(0, round(seconds))):
            self.world.step(1.0)

    def log_steps(self, store: Store, seconds: float) -> None:
        """Record that this process already stepped its world `seconds` forward (the service steps it as time
        passes and records the steps with each flush)."""
        if seconds > 0:
            self.append(
                store, "advance", "", {"seconds": float(seconds)}, elapsed_s=self.world.elapsed_s - seconds
            )

    # -- reading ----------------------------------------------------------------------------------------------
    def metrics(self, component: str) -> dict[str, Any]:
        return metrics(self.world, component)

    def preview(
        self, actuate: Callable[[World, Action], Any], action: Action, component: str, horizon_s: float
    ) -> dict[str, Any]:
        """Metrics after `horizon_s` simulated seconds without and with the action (on copies only). The copies
        know only the present (`known_now`): no fault that has not begun, no end of one in progress. The agent's
        preview does not use this (it runs the fault-free `aiops.sim.calibrate.world_from_store`); this stays
        for the simulator's own what-ifs."""
        return preview_on(known_now(self.world.copy()), actuate, action, component, horizon_s)


class TwinActuator:
    """The `Actuator` of a simulated workspace: `SimActuator` on the twin's world, every change appended to
    `twin_log` in the same write transaction (`store` is the caller's open workspace)."""

    def __init__(self, twin: Twin, store: Store) -> None:
        self.twin = twin
        self.store = store
        self.inner = SimActuator(twin.world, twin.topology)

    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        self.twin.sync(self.store)
        if dry_run:
            return self.inner.apply(action, True)
        result = self.inner.apply(action, False)
        if result.ok:
            self.twin.append(
                self.store, "action", action.proposal_id, {"action": action.model_dump(mode="json")}
            )
        return result

    def read_back(self, action: Action) -> dict[str, Any]:
        return self.inner.read_back(action)

    def table(self) -> dict[str, str]:
        """Every kind executes on the twin (guardrails.routing's table shape)."""
        return dict.fromkeys(DEFAULT_REGISTRY.kinds, "twin")

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        result = self.inner.rollback(action, previous)
        if result.ok:
            data = {"action": action.model_dump(mode="json"), "previous": previous}
            self.twin.append(self.store, "rollback", action.proposal_id, data)
        return result


def world_topology(world: World) -> Topology:
    """A world's cluster as the guardrails see it: jobs where they run after any migration."""
    lay = world.layout
    jobs = {job.name: [lay.gpu_names[g] for g in job.gpus.tolist()] for job in lay.jobs}
    return Topology.grid(lay.racks, lay.nodes_per_rack, lay.gpus_per_node, lay.nics_per_node, jobs=jobs)


def preview_on(
    world: World, actuate: Callable[[World, Action], Any], action: Action, component: str, horizon_s: float
) -> dict[str, Any]:
    """Metrics of `component` after `horizon_s` simulated seconds on two copies of `world`, without and with
    the action; `world` itself is left as it is."""
    without, with_action = world.copy(), world.copy()
    before = metrics(without, component)
    actuate(with_action, action)
    for _ in range(max(1, round(horizon_s))):
        without.step(1.0)
        with_action.step(1.0)
    return {
        "horizon_s": horizon_s,
        "now": before,
        "without_action": metrics(without, component),
        "with_action": metrics(with_action, component),
    }


def known_now(world: World) -> World:
    """`world` (a copy) as an operator's what-if may see it: what has happened stays (a lowered limit, a lost
    GPU, a hot cold plate), but a fault scheduled later is unknown and one in progress has no known end, so a
    preview never shows a problem arriving or clearing by itself. Ongoing faults still drive `Twin.preview`; the
    agent's preview runs on a world calibrated from stored telemetry instead (docs/SIMULATOR.md, "What-if")."""
    kept = []
    for f in world.faults:
        if f.started and not f.ended:
            f.spec = f.spec.model_copy(update={"duration_s": None})
            kept.append(f)
    world.faults = kept
    return world


def _num(value: Any) -> float:
    return round(float(value), 2)


def _lost(world: World, gpus: np.ndarray) -> dict[str, Any]:
    """`lost_gpus`: the GPUs off the bus among `gpus` (absent when none): work placed there cannot run."""
    lost = [world.layout.gpu_names[int(g)] for g in gpus if world.lost[int(g)]]
    return {"lost_gpus": lost} if lost else {}


def metrics(world: World, component: str) -> dict[str, Any]:
    """What the twin says about a component now (GPU/node/rack/fleet: its GPUs; NIC; job)."""
    layout = world.layout
    out: dict[str, Any] = {"component": component, "elapsed_s": _num(world.elapsed_s)}
    if component.startswith("job:"):
        name = component.removeprefix("job:")
        for job in layout.jobs:
            if job.name == name:
                out["step_time_s"] = _num(world.step_time_s[job.index])
                gpus = np.asarray(job.gpus)
                out["max_temp_c"] = _num(np.max(world.temp_c[gpus]))
                out["nodes"] = [layout.node_names[n] for n in job.nodes]
                if world.restart_until_s[job.index] >= world.elapsed_s:
                    out["restarting_for_s"] = _num(world.restart_until_s[job.index] - world.elapsed_s + 1.0)
                out.update(_lost(world, gpus))
                if world.dead[gpus].any() or world.hung_since[job.index] >= 0:
                    out["hung"] = True  # a rank is gone: no step completes
        return out
    if component in layout.nic_index:
        i = layout.nic_index[component]
        out.update(
            lanes_enforced=bool(world.lanes_enforced[i]),
            ecn_enabled=bool(world.ecn_enabled[i]),
            link_up=bool(world.link_up[i]),
            carrier_changes=int(world.carrier_changes[i]),  # cumulative: a flapping link's count climbs
        )
        return out
    try:
        gpus = np.asarray(layout.gpus_of(component))
    except (KeyError, ValueError):
        gpus = np.asarray([], dtype=np.int64)
    if gpus.size == 0:
        out["unknown"] = True
        return out
    out.update(
        gpus=int(gpus.size),
        max_temp_c=_num(np.max(world.temp_c[gpus])),
        mean_power_w=_num(np.mean(world.power_w[gpus])),
        power_limit_w=_num(np.min(world.power_limit_w[gpus])),
        min_sm_clock_mhz=_num(np.min(world.sm_clock_mhz[gpus])),
        throttled_gpus=int(np.count_nonzero(world.reasons[gpus] & 0x60)),  # SW/HW thermal slowdown
        **_lost(world, gpus),
    )
    if component in layout.rack_names:
        out["coolant_flow_lpm"] = _num(world.flow_lpm[layout.rack_names.index(component)])
    jobs = {int(j) for j in world.layout.gpu_job[gpus] if j >= 0}
    if jobs:
        out["job_step_time_s"] = {layout.jobs[j].name: _num(world.step_time_s[j]) for j in sorted(jobs)}
    return out
