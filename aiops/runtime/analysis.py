"""Simulate into a workspace, analyse a workspace: the library behind `aiops demo`, `aiops simulate` and
`aiops analyze`. A simulation records its run (`aiops.sim.twin.record_run`) so the workspace's twin can be
rebuilt later without any file beside the database; an analysis files its remediation as pending proposals
against the workspace's world (the twin, or the store's readings)."""

from __future__ import annotations

import time
from collections.abc import Callable

from aiops.datapath.policy import Policy
from aiops.errors import InputError
from aiops.pipeline import RunResult, analyze_store
from aiops.runtime.world import attach, desk
from aiops.scenarios import Scenario
from aiops.sim import World, simulate
from aiops.sim.twin import Twin, has_run, record_run
from aiops.store import Store, Workspace

Progress = Callable[[float, float], None]


def simulate_into(
    store: Store, scenario: Scenario, *, lanes_policy: Policy | None = None, progress: Progress | None = None
) -> Twin:
    """Simulate `scenario` into `store` and record the run; returns the twin (the world where the run ended).
    A workspace that already holds telemetry or a run is refused: a twin must be the world of its telemetry."""
    if has_run(store) or store.scalar("SELECT count(*) FROM gpu_samples"):
        raise InputError(
            store.path,
            "--db",
            "already holds telemetry (a run, or a killed run's rows): a second scenario would mix into it",
            "--replace to start this workspace afresh, or a new --db",
        )
    world = World(scenario, lanes_policy)
    simulate(scenario, store, progress=progress, lanes_policy=lanes_policy, world=world)
    record_run(store, scenario, lanes_policy, world.elapsed_s)
    return Twin(world)


def analyze(
    store: Store, *, twin: Twin | None = None, origin: str = "analyze", clock: Callable[[], float] = time.time
) -> RunResult:
    """Detect, diagnose and file the remediation as pending proposals, validated against the workspace's
    world (`twin`: the one this process holds; else loaded from the store when it was simulated)."""
    attached = attach(store, twin=twin)
    return analyze_store(store, desk=desk(store, attached, clock=clock), origin=origin)


def demo(
    workspace: Workspace,
    scenario: Scenario,
    *,
    lanes_policy: Policy | None = None,
    progress: Progress | None = None,
    replace: bool = False,
) -> RunResult:
    """A fresh workspace, the scenario simulated into it, then analysed. A database file that exists already
    (telemetry, proposals, an audit log) is removed with its workspace files only with `replace`."""
    if workspace.exists() and not workspace.memory and not replace:
        raise InputError(
            workspace.path,
            "--db",
            "exists: the demo would replace its telemetry, proposals and audit log",
            "--replace to start it afresh, or a new --db",
        )
    workspace.remove()
    with workspace.write() as store:
        twin = simulate_into(store, scenario, lanes_policy=lanes_policy, progress=progress)
        return analyze(store, twin=twin, origin="demo")
