"""Simulate into a workspace, analyse a workspace: the library behind `aiops demo`, `aiops simulate` and
`aiops analyze`. A simulation records its run (`aiops.sim.twin.record_run`) so the workspace's twin can be
rebuilt later without any file beside the database; an analysis files its remediation as pending proposals
against the workspace's world (the twin, or the store's readings)."""

from __future__ import annotations

import time
from collections.abc import Callable

from aiops.datapath.policy import Policy
from aiops.errors import AiopsError
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
        raise AiopsError(f"{store.path} already holds telemetry: simulate into a new database")
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
) -> RunResult:
    """A fresh workspace (its files removed first), the scenario simulated into it, then analysed."""
    workspace.remove()
    with workspace.write() as store:
        twin = simulate_into(store, scenario, lanes_policy=lanes_policy, progress=progress)
        return analyze(store, twin=twin, origin="demo")
