"""Workspaces for the report tests: the demo database, and a simulated day with three incidents
(aiops/data/report-day.yaml) sampled every 60 s and analysed with 120 s detection windows, so that one day of
simulated time takes about 15 s of CPU here instead of the many minutes of 1 Hz samples and 10 s windows. The
samples are ingested an hour at a time: the same rows as the runner's default of a transaction per simulated
minute (every table compared), without 1,440 transactions (40 of the 55 s it took)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from aiops.detect import detect
from aiops.pipeline import save_hypotheses
from aiops.rca import diagnose
from aiops.scenarios import load_scenario
from aiops.sim import World, simulate
from aiops.sim.twin import record_run
from aiops.store import Store

DAY_SCENARIO = str(resources.files("aiops") / "data" / "report-day.yaml")
DAY_SAMPLE_INTERVAL_S = 60.0
DAY_WINDOW_S = 120.0
DAY_FLUSH_EVERY_S = 3600.0


def simulate_day(path: Path) -> Path:
    """The report-day scenario simulated into `path` and analysed (incidents and hypotheses stored)."""
    scenario = load_scenario(DAY_SCENARIO)
    with Store(path) as store:
        world = World(scenario, None)
        simulate(
            scenario,
            store,
            sample_interval_s=DAY_SAMPLE_INTERVAL_S,
            flush_every_s=DAY_FLUSH_EVERY_S,
            world=world,
        )
        record_run(store, scenario, None, world.elapsed_s)
        incidents = detect(store, window_s=DAY_WINDOW_S)
        save_hypotheses(store, diagnose(store, incidents))
        store.commit_pending()
    return path
