"""Live detection judging several windows in one call (a replay at start; at 10x and faster, the windows a flush
closed) reads their rows in one query a table (aiops/service/live.py `_read_together`): what it opens, resolves
and stores must be what judging the same windows one at a time gives, whatever the number of windows a call
covers and across a restart's replay."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import pytest

from aiops.runtime.analysis import simulate_into
from aiops.scenarios import load_scenario
from aiops.service import live
from aiops.store import Store

# a small cluster with a fault that ends (its incident resolves within the run) and one that lasts
SCENARIO = """
name: windows-together
seed: 5
duration_s: 420
cluster: {racks: 1, nodes_per_rack: 2, gpus_per_node: 4, nics_per_node: 1}
jobs:
- {name: train, nodes: all, step_compute_s: 1.0, allreduce_mb: 64}
faults:
- {kind: nic_link_flap, target: node1/nic0, start_s: 90, duration_s: 100, severity: 0.7}
- {kind: thermal_throttle, target: node0/gpu2, start_s: 200, severity: 0.8}
"""


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("together")
    (folder / "s.yaml").write_text(SCENARIO)
    db = folder / "sim.duckdb"
    with Store(db) as store:
        simulate_into(store, load_scenario(str(folder / "s.yaml")))
    return db


def judged(db: Path, copy: Path, step_s: float, restart: bool) -> tuple[list[Any], list[Any]]:
    copy.write_bytes(db.read_bytes())
    with Store(copy) as store:
        span = store.conn.execute("SELECT min(ts_s), max(ts_s) FROM gpu_samples").fetchone()
        assert span is not None
        lo, hi = span
        live._save_progress(store, lo - 1e-6)
        detection = live.LiveDetection(id_prefix="INC-node0-", quiet_s=40)
        detection.start(store)
        said: list[Any] = []
        t, restarted = lo + step_s, False
        while t <= hi:
            for tr in detection.advance(store, t, lo):
                i = tr.incident
                said.append((tr.kind, i.incident_id, i.opened_ts_s, i.resolved_ts_s, tuple(i.components)))
            if restart and not restarted and t >= (lo + hi) / 2:  # a new service resumes: replays before it
                detection = live.LiveDetection(id_prefix="INC-node0-", quiet_s=40, replay_s=120)
                detection.start(store)
                restarted = True
            t += step_s
        stored = store.conn.execute(
            "SELECT incident_id, opened_ts_s, resolved_ts_s, title, severity FROM incidents ORDER BY incident_id"
        ).fetchall()
    return said, stored


@pytest.mark.parametrize(
    ("step_s", "restart"), [(40.0, False), (25.0, True)], ids=["four-windows", "2.5-windows-and-a-restart"]
)
def test_windows_read_together_judge_as_one_at_a_time(
    simulated: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, step_s: float, restart: bool
) -> None:
    together = judged(simulated, tmp_path / "together.duckdb", step_s, restart)
    monkeypatch.setattr(live, "_read_together", lambda *_: contextlib.nullcontext())
    alone = judged(simulated, tmp_path / "alone.duckdb", step_s, restart)
    assert together[0], "the scenario's faults opened nothing: the comparison would say nothing"
    assert any(kind == "resolved" for kind, *_ in together[0]), together[0]
    assert together == alone
