"""Assembles an `AgentSession` for a database: the simulated twin (from a scenario, state kept beside the
database), the guardrails (or the stand-in while `guardrails` is not importable), the journal and the LLM."""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiops.agent.config import AgentConfig, load_config
from aiops.agent.ports import Guard, World
from aiops.agent.session import AgentSession, sidecar
from aiops.agent.standin import StandInGuard, sim_actuate
from aiops.agent.twin import Twin
from aiops.store import Store


class TwinWorld:
    """The `World` port over a `Twin`: metrics, advancing time, and what-if previews on copies."""

    def __init__(self, twin: Twin, actuate: Callable[[Any, dict[str, Any]], Any] = sim_actuate) -> None:
        self.twin = twin
        self.actuate = actuate

    def metrics(self, component: str) -> dict[str, Any]:
        return self.twin.metrics(component)

    def advance(self, seconds: float) -> None:
        self.twin.advance(seconds)

    def preview(self, action: dict[str, Any], horizon_s: float) -> dict[str, Any]:
        return self.twin.preview(self.actuate, action, action["target"], horizon_s)


def make_twin(db_path: str | Path, scenario_path: str | Path | None) -> Twin | None:
    """The twin for a simulated run: the scenario's world stepped to where the run ended, or its saved state."""
    state = sidecar(db_path, ".twin.pkl")
    if scenario_path is None and not state.exists():
        return None

    def fresh() -> Any:
        from aiops.scenarios import load_scenario
        from aiops.sim import World

        scenario = load_scenario(str(scenario_path))
        world = World(scenario)
        for _ in range(round(scenario.duration_s)):
            world.step(1.0)
        return world

    return Twin.load_or_create(fresh, state)


def guardrails_available() -> bool:
    return importlib.util.find_spec("guardrails") is not None


def make_guard(db_path: str | Path, twin: Twin | None, *, ttl_s: float, clock: Callable[[], float]) -> Guard:
    with Store(db_path, read_only=True) as store:
        components = {str(r["component"]) for r in store.query("SELECT component FROM topology")}
    return StandInGuard(sidecar(db_path, ""), twin, components, ttl_s=ttl_s, clock=clock)


def open_session(
    db_path: str | Path,
    *,
    scenario: str | Path | None = None,
    config: AgentConfig | None = None,
    ttl_s: float = 900.0,
    clock: Callable[[], float] = time.time,
    settle_s: float = 60.0,
) -> AgentSession:
    twin = make_twin(db_path, scenario)
    guard = make_guard(db_path, twin, ttl_s=ttl_s, clock=clock)
    world: World | None = TwinWorld(twin) if twin else None
    return AgentSession(
        db_path, guard, config=config or load_config(), world=world, clock=clock, settle_s=settle_s
    )
