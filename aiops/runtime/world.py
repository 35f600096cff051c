"""The World seam of a workspace: what its controls read and what its actions act on.

- `twin`: a simulated workspace (made by `aiops demo` / `aiops simulate`) acts on its twin, rebuilt from the
  stored run and log (`aiops.sim.twin`): readings from the twin's NVML, actions through `TwinActuator`.
- `nvml`: this host's GPUs through nvidia-ml-py (`NvmlPowerActuator`: constraints checked, every limit read
  back, rolled back on mismatch); readings from the store. Other nodes' GPUs are refused.
- `none`: readings from the store; nothing executes (proposals only).
`auto` is `twin` for a simulated workspace, else `none`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiops.control.readings import Readings, StoreReadings, validation_context
from aiops.errors import AiopsError, PrerequisiteError
from aiops.sim.readings import WorldReadings
from aiops.sim.twin import Twin, TwinActuator
from aiops.store import Store
from aiops.store.lease import service_pid
from guardrails.actions import Action
from guardrails.actuators import ActuationResult, Actuator
from guardrails.actuators_nvml import NvmlPowerActuator
from guardrails.context import topology_from_store
from guardrails.service import Guardrails
from guardrails.standing import Standing
from guardrails.topology import Topology

ACTUATORS: tuple[str, ...] = ("auto", "twin", "nvml", "none")


@dataclass
class Attached:
    kind: str  # twin | nvml | none
    readings: Readings
    topology: Topology
    actuator: Actuator | None
    describe: str
    twin: Twin | None = None


def load_twin(store: Store, held: Twin | None = None) -> Twin | None:
    """The workspace's twin: `held` (a twin this process keeps) brought up to date, else rebuilt."""
    if held is not None:
        held.sync(store)
        return held
    return Twin.load(store)


def attach(
    store: Store,
    *,
    actuator: str = "auto",
    node: str | None = None,
    twin: Twin | None = None,
    nvml: Any = None,
) -> Attached:
    """The world of the workspace `store` is open on. `twin`: a twin this process already holds (synced here,
    not rebuilt); `nvml`: the NVML module for `actuator="nvml"` (default: pynvml)."""
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
        return _attach_nvml(store, topology, node, nvml)
    held = load_twin(store, twin) if actuator in ("auto", "twin") else None
    if actuator == "twin" and held is None:
        raise AiopsError(
            f"{store.path} has no twin: it was not made by a simulation (aiops demo or aiops simulate)"
        )
    if held is not None:
        topology = dataclasses.replace(topology, job_gpus=held.topology.job_gpus)  # jobs where they run now
        return Attached(
            "twin",
            WorldReadings(held.world),
            topology,
            TwinActuator(held, store),
            "twin (the workspace's simulated world)",
            held,
        )
    return Attached("none", StoreReadings(store), topology, None, "none (proposals only)")


def _attach_nvml(store: Store, topology: Topology, node: str | None, nvml: Any) -> Attached:
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

    actuator = NvmlPowerActuator(nvml_for, topology, initialise=False)
    return Attached("nvml", StoreReadings(store), topology, actuator, f"nvml ({node}, nvidia-ml-py)")


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
