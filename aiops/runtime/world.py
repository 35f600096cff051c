"""The World seam of a workspace: what its controls read and what its actions act on.

- `twin`: a simulated workspace (made by `aiops demo` / `aiops simulate`) acts on its twin, rebuilt from the
  stored run and log (`aiops.sim.twin`): readings from the twin's NVML, actions through `TwinActuator`.
- `nvml`: this host's GPUs through nvidia-ml-py (`NvmlPowerActuator`: constraints checked, every limit read
  back, rolled back on mismatch); readings from the store. Other nodes' GPUs are refused.
- `none`: readings from the store; nothing executes (proposals only).
`auto` is `twin` for a simulated workspace, else the host's scheduler when `[scheduler]` names one (drain and
restart through it, `aiops.runtime.schedulers.SCHEDULER_BACKENDS`) and nothing else.
On a real host the actuator is a `guardrails.routing.RoutingActuator`: each kind goes to the backend that
executes it here (`host_backends`: the scheduler's kinds, NVML's under `nvml`, open_ticket/ack_alert recorded)
and every other kind stands as a ticket. `executors_here(store)` answers the same table without connecting to
anything, for the console and `aiops actions`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aiops.config import SchedulerConfig
from aiops.control.readings import Readings, StoreReadings, validation_context
from aiops.errors import AiopsError, PrerequisiteError
from aiops.store import Store
from aiops.store.lease import service_pid
from guardrails.actions import Action
from guardrails.actuators import ActuationResult, Actuator
from guardrails.breaker import SchedulerView
from guardrails.context import topology_from_store
from guardrails.proposal_desk import Guardrails
from guardrails.registry import DEFAULT_REGISTRY
from guardrails.routing import (
    SCHEDULER_KINDS,
    TICKET,
    RecordActuator,
    Route,
    RoutingActuator,
    executors_table,
    host_backends,
)
from guardrails.standing import Standing
from guardrails.topology import Topology

if TYPE_CHECKING:  # the twin (numpy, its world) is loaded only for a simulated workspace: a node agent never
    from aiops.integrations.ticket import TicketActuator
    from aiops.sim.twin import Twin

ACTUATORS: tuple[str, ...] = ("auto", "twin", "nvml", "none")
TICKETS_ONLY = "tickets"  # Attached.kind where only open_ticket executes (a fleet with a ticket sink)


@dataclass
class Attached:
    kind: str  # twin | nvml | host | none | tickets (only open_ticket executes: a fleet with a ticket sink)
    readings: Readings
    topology: Topology
    actuator: Actuator | None
    describe: str
    twin: Twin | None = None
    # the scheduler's view of out-of-service nodes for the circuit breaker (None: no scheduler configured)
    scheduler_view: Callable[[], SchedulerView | None] | None = None

    @property
    def data_clock(self) -> Callable[[], float] | None:
        """The telemetry's clock where it is not the wall clock: the twin's (it runs `--speed` times faster)."""
        twin = self.twin
        return None if twin is None else (lambda: twin.world.now_ts_s)

    @property
    def executors(self) -> dict[str, str]:
        """kind -> the backend that executes it here, or "ticket"."""
        return executors_table(self.actuator)


def load_twin(store: Store, held: Twin | None = None) -> Twin | None:
    """The workspace's twin: `held` (a twin this process keeps) brought up to date, else rebuilt."""
    if held is not None:
        held.sync(store)
        return held
    if store.scalar("SELECT count(*) FROM sim_runs") == 0:
        return None  # no simulated run: the twin's modules are not loaded
    from aiops.sim.twin import Twin

    return Twin.load(store)


def attach(
    store: Store,
    *,
    actuator: str = "auto",
    node: str | None = None,
    twin: Twin | None = None,
    nvml: Any = None,
    kube_api: Any = None,
    sysfs_root: str = "/sys",
    ticket: TicketActuator | None = None,
    view: Callable[[], SchedulerView | None] | None = None,
) -> Attached:
    """The world of the workspace `store` is open on. `twin`: a twin this process already holds (synced here,
    not rebuilt); `nvml`: the NVML module for `actuator="nvml"` (default: pynvml); `kube_api`: a CoreV1Api
    (default: built from `store.scheduler`); `ticket`: the ticket sink open_ticket files in (`[notify.ticket]`;
    None: an open_ticket is a note in the audit log). Its `scheduler_view` reads the configured scheduler's
    drained or cordoned nodes for the circuit breaker, whatever executes here: `view` when given (a service's
    `HeldView`, read before its flush holds the workspace), else a reader that asks the scheduler each time."""
    attached = _attach(store, actuator, node, twin, nvml, kube_api, sysfs_root)
    attached.scheduler_view = view if view is not None else scheduler_view(store.scheduler, node, kube_api)
    return attached if ticket is None else _with_ticket(store, attached, ticket)


def scheduler_view(
    config: SchedulerConfig, node: str | None, kube_api: Any = None
) -> Callable[[], SchedulerView | None] | None:
    """The reader of `[scheduler]`'s view (guardrails.scheduler_view); this agent's own scheduler name maps to
    its component name (a twin rig's node0 is Slurm's aiops-xxxx)."""
    if config.kind == "none":
        return None
    # the schedulers' clients (Slurm's, Kubernetes'): loaded where a scheduler is configured
    from aiops.runtime.schedulers import local_name
    from guardrails.actuators_k8s import core_api
    from guardrails.scheduler_view import view_reader

    names = {local_name(config): node} if node else {}

    def api() -> Any:
        if kube_api is not None:
            return kube_api
        return core_api(config.kubeconfig, in_cluster=config.in_cluster or not config.kubeconfig)

    return view_reader(
        config.kind, binaries=config.binaries, timeout_s=config.timeout_s, kube_api=api, names=names
    )


def _with_ticket(store: Store, attached: Attached, ticket: TicketActuator) -> Attached:
    """`attached` with open_ticket routed to the ticket sink (the ticket's text names the proposal's incident)."""

    def incident_of(proposal_id: str) -> str:
        found = store.scalar("SELECT incident_id FROM proposals WHERE proposal_id = ?", [proposal_id])
        return str(found or "")

    sink = dataclasses.replace(ticket, incident_of=incident_of)
    inner = attached.actuator
    describe = f"{attached.describe}; tickets to {ticket.config.kind}"
    if inner is None:  # nothing acts here (the fleet): open_ticket alone executes, the rest is dispatched
        only = RoutingActuator(
            {"open_ticket": Route(ticket.config.kind, sink, remote=True)}, describe=describe
        )
        return dataclasses.replace(attached, kind=TICKETS_ONLY, actuator=only, describe=describe)
    if isinstance(inner, RoutingActuator):
        routes = dict(inner.routes)
    else:
        routes = {kind: Route(attached.kind, inner) for kind in DEFAULT_REGISTRY.kinds}
    routes["open_ticket"] = Route(ticket.config.kind, sink, remote=True)
    return dataclasses.replace(
        attached, actuator=RoutingActuator(routes, describe=describe), describe=describe
    )


def _attach(
    store: Store,
    actuator: str,
    node: str | None,
    twin: Twin | None,
    nvml: Any,
    kube_api: Any,
    sysfs_root: str,
) -> Attached:
    if actuator not in ACTUATORS:
        raise AiopsError(f"unknown actuator '{actuator[:40]}' (allowed: {', '.join(ACTUATORS)})")
    topology = topology_from_store(store)
    owner = service_pid(store.path)
    if owner is not None and owner != os.getpid():  # the service acts on this workspace's world, not us
        return Attached(
            "none",
            StoreReadings(store),
            topology,
            None,
            f"the service (PID {owner}) executes on this workspace; approvals wait for it",
        )
    if actuator == "nvml":
        return _attach_nvml(store, topology, node, nvml, kube_api, sysfs_root)
    held = load_twin(store, twin) if actuator in ("auto", "twin") else None
    if actuator == "twin" and held is None:
        raise AiopsError(
            f"{store.path} has no twin: it was not made by a simulation (aiops demo or aiops simulate)"
        )
    if held is not None:
        from aiops.sim.twin import TwinActuator
        from aiops.sim.world_readings import WorldReadings

        topology = dataclasses.replace(topology, job_gpus=held.topology.job_gpus)  # jobs where they run now
        twin_actuator: Actuator = TwinActuator(held, store)
        describe = "twin (the workspace's simulated world)"
        if store.scheduler.kind != "none":
            # simulated GPUs beside a real scheduler (a node agent rig): the scheduler's kinds go to it
            routes = {kind: Route("twin", twin_actuator) for kind in DEFAULT_REGISTRY.kinds}
            routes.update(_scheduled(store, node, kube_api))
            describe = f"twin, with {store.scheduler.kind} for the scheduler's actions"
            twin_actuator = RoutingActuator(routes, describe=describe)
        return Attached("twin", WorldReadings(held.world), topology, twin_actuator, describe, held)
    if actuator == "auto" and store.scheduler.kind != "none":
        routes = _scheduled(store, node, kube_api)
        routes.update({kind: Route("record", RecordActuator()) for kind in ("open_ticket", "ack_alert")})
        describe = f"{store.scheduler.kind} (this host's scheduler); other kinds stand as tickets"
        routing = RoutingActuator(routes, describe=describe)
        return Attached("host", StoreReadings(store), topology, routing, describe)
    return Attached("none", StoreReadings(store), topology, None, "none (proposals only)")


def executors_here(
    store: Store,
    *,
    actuator: str = "auto",
    node: str | None = None,
    sysfs_root: str = "/sys",
    nvml: Any = None,
) -> dict[str, str]:
    """kind -> backend (or "ticket") that `attach(store, actuator=...)` executes with, from the workspace and
    its configuration alone (nothing is connected): a simulated workspace's twin executes every kind. Under
    `nvml`, fan speed counts only when the (initialised) NVML given says the GPUs have fans."""
    simulated = actuator in ("auto", "twin") and int(store.scalar("SELECT count(*) FROM sim_runs") or 0) > 0
    if simulated:  # the twin executes every kind; a configured scheduler takes its own kinds
        scheduled = dict.fromkeys(SCHEDULER_KINDS.get(store.scheduler.kind, ()), store.scheduler.kind)
        return {kind: scheduled.get(kind, "twin") for kind in DEFAULT_REGISTRY.kinds}
    if actuator == "none" or (actuator == "auto" and store.scheduler.kind == "none"):
        return dict.fromkeys(DEFAULT_REGISTRY.kinds, TICKET)
    cooling = actuator == "nvml" and node is not None and _cools(node, sysfs_root, None)
    backends = host_backends(store.scheduler.kind, nvml=actuator == "nvml", cooling=cooling)
    if backends.get("set_fan_speed") and not (nvml is not None and _has_fans(nvml)):
        del backends["set_fan_speed"]
    return {kind: backends.get(kind, TICKET) for kind in DEFAULT_REGISTRY.kinds}


def _has_fans(nvml: Any) -> bool:
    """Whether this host's first GPU has fans NVML controls (nvmlDeviceGetNumFans > 0)."""
    try:
        return int(nvml.nvmlDeviceGetNumFans(nvml.nvmlDeviceGetHandleByIndex(0))) > 0
    except Exception:
        return False


def _scheduled(store: Store, node: str | None, kube_api: Any) -> dict[str, Route]:
    """The routes of the workspace's `[scheduler]` (aiops.runtime.schedulers: its clients are loaded only here)."""
    from aiops.runtime.schedulers import scheduler_routes

    return scheduler_routes(store, node, kube_api)


def _cools(node: str, sysfs_root: str, topology: Topology | None) -> bool:
    """Whether this host has cooling devices `set_cooling_state` may drive (guardrails.actuators_sysfs)."""
    from guardrails.actuators_sysfs import CoolingActuator

    try:
        return bool(CoolingActuator({node: sysfs_root}, topology).devices(node))
    except (AiopsError, OSError):
        return False


def _attach_nvml(
    store: Store, topology: Topology, node: str | None, nvml: Any, kube_api: Any, sysfs_root: str = "/sys"
) -> Attached:
    from guardrails.actuators_nvml import NvmlPowerActuator
    from guardrails.actuators_nvml_ops import NvmlOpsActuator
    from guardrails.actuators_sysfs import CoolingActuator

    scope = topology.expand(node) if node else None
    if node is None or scope is None or scope.kind != "node":
        raise AiopsError(
            f"--actuator nvml needs --node: this host's name in {store.path} "
            f"({', '.join(sorted(topology.node_gpus)[:8]) or 'no node stored'})"
        )
    if nvml is None:
        import pynvml

        nvml = pynvml
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        raise PrerequisiteError(f"--actuator nvml: NVML is not usable on this host ({exc})") from None

    def nvml_for(name: str) -> Any:  # this host's NVML only; a GPU's index is its local one ({host}/gpu{g})
        if name != node:
            raise AiopsError(f"{name} is not this host ({node}): its GPUs are set by its own agent")
        return nvml

    power = NvmlPowerActuator(nvml_for, topology, initialise=False)
    routes = {kind: Route("nvml", power) for kind in NvmlPowerActuator.KINDS}
    scheduled = _scheduled(store, node, kube_api)
    drain = scheduled.get("drain_node")
    is_drained = getattr(drain.actuator, "is_drained", None) if drain is not None else None
    ops = NvmlOpsActuator(nvml_for, topology, node_drained=is_drained, initialise=False)
    routes["set_clock_limit"] = Route("nvml", ops)
    if _has_fans(nvml):  # an SXM GPU reports 0 fans (an H200 does): fan speed then stands as a ticket
        routes["set_fan_speed"] = Route("nvml", ops)
    if is_drained is not None:  # a reset only where a scheduler says the node is drained
        routes["gpu_reset"] = Route("nvml", ops, remote=True)  # asks the scheduler first
    if _cools(node, sysfs_root, topology):  # cooling devices that do not throttle compute
        routes["set_cooling_state"] = Route("sysfs", CoolingActuator({node: sysfs_root}, topology))
    routes.update(scheduled)
    routes.update({kind: Route("record", RecordActuator()) for kind in ("open_ticket", "ack_alert")})
    routing = RoutingActuator(routes, describe=f"nvml ({node}, nvidia-ml-py)")
    return Attached("nvml", StoreReadings(store), topology, routing, f"nvml ({node}, nvidia-ml-py)")


def desk(
    store: Store,
    attached: Attached,
    *,
    clock: Callable[[], float] = time.time,
    standing: Standing | None = None,
) -> Guardrails:
    """The guardrails over this workspace and its world: validation against the world's GPUs now, execution
    through its actuator (none attached: nothing can run, see `Attached.actuator`)."""
    return Guardrails(
        store,
        actuator=attached.actuator if attached.actuator is not None else _NoActuator(),
        context_for=lambda now: validation_context(attached.readings, attached.topology, now),
        clock=clock,
        standing=standing,
        scheduler_view=attached.scheduler_view,
        data_clock=attached.data_clock,
    )


class _NoActuator:
    """What a workspace without a world executes with: nothing (callers check `Attached.actuator` first)."""

    ERROR = "no actuator is attached to this workspace"

    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        return ActuationResult(False, error=self.ERROR)

    def read_back(self, action: Action) -> dict[str, Any]:
        return {}

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        return ActuationResult(False, error=self.ERROR)
