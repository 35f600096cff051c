"""Which backend executes each action kind on this host, and the one actuator that sends each kind there.

`RoutingActuator(routes)` holds a `Route(backend, actuator)` per kind it can execute; every other kind of the
registry is `TICKET`: shown, and handled as a ticket for a person (the console renders it without an approve
button, `aiops actions` lists it as a ticket, approving it records the approval and executes nothing), never
offered as something the product can do. `table()` answers kind -> backend name or "ticket" for every kind.

Backends (which host builds which: aiops/runtime/world.py; the kinds table: docs/GUARDRAILS.md):
`twin` (the simulated world, every kind), `nvml` (power, clocks, fans, GPU reset on a drained node),
`sysfs` (cooling devices), `kubernetes` (drain, uncordon, restart), `slurm` (drain, resume, requeue, reboot,
migrate), `record` (open_ticket and ack_alert: the audit log is the record).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from guardrails.actions import Action
from guardrails.actuators import ActuationResult, Actuator
from guardrails.registry import DEFAULT_REGISTRY, Registry

TICKET = "ticket"
RECORDED_KINDS = ("open_ticket", "ack_alert")  # what they do is the audit record itself
TICKET_NOTE = "no ticket sink is configured ([notify.ticket]): this ticket is a note in the audit log"


def ticket_error(kind: str) -> str:
    return f"no backend executes {kind} on this host: it stands as a ticket for a person (open_ticket), not an action"


@dataclass(frozen=True)
class Route:
    backend: str
    actuator: Actuator
    # True: the backend waits on another system (a scheduler, a ticket sink): a service calls it with its
    # workspace closed (`acts_remotely`; aiops/service/flush_steps.py)
    remote: bool = False


class RecordActuator:
    """open_ticket and ack_alert: the executor's audit event is the ticket / acknowledgement; nothing else."""

    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        if action.kind not in RECORDED_KINDS:
            return ActuationResult(False, error=ticket_error(action.kind))
        detail: dict[str, Any] = {"recorded": action.kind, "dry_run": dry_run}
        if (
            action.kind == "open_ticket"
        ):  # filed nowhere: say so ([notify.ticket] files it in Jira/ServiceNow)
            detail["note"] = TICKET_NOTE
        return ActuationResult(True, detail, {}, {})

    def read_back(self, action: Action) -> dict[str, Any]:
        return {}

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        return ActuationResult(True, {"restored": "nothing: a record only"})


class RoutingActuator:
    """The `Actuator` protocol over per-kind backends; a kind without a route is refused with the ticket note."""

    def __init__(
        self, routes: Mapping[str, Route], registry: Registry = DEFAULT_REGISTRY, describe: str = ""
    ) -> None:
        unknown = sorted(set(routes) - set(registry.kinds))
        if unknown:
            raise ValueError(f"routes for unknown action kinds: {', '.join(unknown)}")
        self.routes = dict(routes)
        self.registry = registry
        self.describe = describe

    def backend(self, kind: str) -> str:
        route = self.routes.get(kind)
        return route.backend if route is not None else TICKET

    def executable(self, kind: str) -> bool:
        return kind in self.routes

    def table(self) -> dict[str, str]:
        """kind -> the backend that executes it here, or "ticket", for every kind of the registry."""
        return {kind: self.backend(kind) for kind in self.registry.kinds}

    def remote(self, kind: str) -> bool:
        route = self.routes.get(kind)
        return route is not None and route.remote

    def bind(self, action: Action) -> RoutingActuator:
        """This router with `action`'s backend bound to what it reads of the workspace now (`bound`)."""
        route = self.routes.get(action.kind)
        if route is None:
            return self
        routes = {
            **self.routes,
            action.kind: dataclasses.replace(route, actuator=bound(route.actuator, action)),
        }
        return RoutingActuator(routes, self.registry, self.describe)

    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        route = self.routes.get(action.kind)
        if route is None:
            return ActuationResult(
                False, {"dry_run": dry_run, "backend": TICKET}, error=ticket_error(action.kind)
            )
        result = route.actuator.apply(action, dry_run)
        return ActuationResult(
            result.ok,
            {**result.detail, "backend": route.backend},
            result.previous,
            result.expected,
            result.error,
        )

    def read_back(self, action: Action) -> dict[str, Any]:
        route = self.routes.get(action.kind)
        return route.actuator.read_back(action) if route is not None else {}

    def rollback(self, action: Action, previous: dict[str, Any]) -> ActuationResult:
        route = self.routes.get(action.kind)
        if route is None:
            return ActuationResult(False, error=ticket_error(action.kind))
        return route.actuator.rollback(action, previous)


def acts_remotely(actuator: object | None, action: Action) -> bool:
    """Whether `actuator` carries `action` out through another system (its route says `remote`): a service
    then calls it with the workspace closed, between two short holds (Guardrails.begin / finish)."""
    remote = getattr(actuator, "remote", None)
    return bool(remote(action.kind)) if callable(remote) else False


def bound(actuator: Actuator, action: Action) -> Actuator:
    """`actuator` as it acts on `action` with no store: an actuator that reads the workspace to act (a
    ticket's incident) reads it now, in its `bind(action)`; any other is itself."""
    bind = getattr(actuator, "bind", None)
    return bind(action) if callable(bind) else actuator  # type: ignore[no-any-return]


def executors_table(actuator: object | None, registry: Registry = DEFAULT_REGISTRY) -> dict[str, str]:
    """kind -> backend for what `actuator` executes: its own `table()` when it routes, every kind "ticket"
    when nothing is attached."""
    table = getattr(actuator, "table", None)
    if callable(table):
        answer: dict[str, str] = table()
        return answer
    return dict.fromkeys(registry.kinds, TICKET)


SCHEDULER_KINDS: dict[str, tuple[str, ...]] = {
    "none": (),
    "kubernetes": ("drain_node", "resume_node", "restart_job"),
    # guardrails/actuators_slurm.py (SlurmActuator): scontrol drain/resume, reboot, requeue, requeue excluding
    "slurm": ("drain_node", "resume_node", "restart_job", "migrate_job", "reboot_node"),
}
NVML_KINDS = ("set_power_limit", "reset_power_limit", "set_clock_limit", "set_fan_speed")


def host_backends(scheduler: str, *, nvml: bool, cooling: bool) -> dict[str, str]:
    """kind -> backend on a real host (no twin), from its configuration alone: what `aiops.runtime.world`
    attaches there. gpu_reset needs both NVML and a scheduler that says the node is drained."""
    backends = dict.fromkeys(RECORDED_KINDS, "record")
    scheduled = SCHEDULER_KINDS.get(scheduler, ())
    backends.update(dict.fromkeys(scheduled, scheduler))
    if nvml:
        backends.update(dict.fromkeys(NVML_KINDS, "nvml"))
        if "drain_node" in scheduled:
            backends["gpu_reset"] = "nvml"
    if cooling:
        backends["set_cooling_state"] = "sysfs"
    return backends


# Kinds no real-host backend executes, each with why: on a host they stand as tickets (the walk in
# tests/test_executors_walk.py fails on a kind that is neither routed on some host nor listed here).
HOST_TICKET_ONLY: dict[str, str] = {
    "rerun_check": "the checks are a person's commands (nvidia-smi, dmesg); nothing here runs them",
    "enable_lanes": "the service attaches no kernel datapath (aiops/datapath) to its actions yet",
    "enable_ecn": "ECN is switch and NIC firmware configuration: no backend here writes it",
    "set_lane_rate": "the service attaches no kernel datapath (aiops/datapath) to its actions yet",
    "update_lane_rule": "lane rules live in the policy file a person edits (aiops lanes)",
}
