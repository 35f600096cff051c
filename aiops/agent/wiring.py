"""Assembles an `AgentSession` for a database: the simulated twin (from a scenario, its state kept beside the
database), the configuration and the LLM."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiops.agent.config import AgentConfig, load_config
from aiops.agent.session import AgentSession, sidecar
from aiops.agent.twin import Twin


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


def open_session(
    db_path: str | Path,
    *,
    scenario: str | Path | None = None,
    config: AgentConfig | None = None,
    clock: Callable[[], float] = time.time,
    settle_s: float = 60.0,
) -> AgentSession:
    if not Path(db_path).exists():
        return AgentSession(db_path)  # raises the "no such database" error
    twin = make_twin(db_path, scenario)
    return AgentSession(db_path, config=config or load_config(), twin=twin, clock=clock, settle_s=settle_s)
