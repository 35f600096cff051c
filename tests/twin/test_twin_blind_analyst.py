"""Issue 22 item 2: the analyst cannot see the twin. A simulated workspace holds the scenario it was made from
(`sim_runs`, faults included) and the twin's log (`twin_log`); detection, diagnosis and remediation
(aiops.detect, aiops.rca, aiops.playbooks) must judge the telemetry alone. Each scenario is simulated once the way
`aiops eval` does and analysed there through the eval's own entry point (`aiops.runtime.analysis.analyze` with the
twin the process holds, as evals/harness.py `score_analysis` calls it); a copy, its twin tables dropped (any read
of them fails there), is analysed by `aiops.pipeline.analyze_store` in a fresh process that never ran the twin, so
nothing the twin left in a module-level variable reaches it (one such process for the module's copies: a Python
start and the product's imports once, not once a scenario). The incidents, the hypotheses (root cause,
component, confidence, evidence) and the remediation must be identical. tests/test_layers.py forbids the import
path to aiops.sim.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from aiops.pipeline import RunResult
from aiops.runtime.analysis import analyze, simulate_into
from aiops.store import Store
from tests.simkit import fault, scenario
from tests.twin.twin_observed import TWIN_TABLES

SCENARIOS: dict[str, list[dict[str, Any]]] = {
    "thermal": [fault("thermal_throttle", "node3/gpu2", 0.8)],
    "flap": [fault("nic_link_flap", "node1/nic0", 0.9)],
    "loader": [fault("input_pipeline_bottleneck", "node2", 0.8)],
    "ecc and cap": [fault("gpu_ecc_error", "node2/gpu1", 0.8), fault("power_cap_misconfig", "node0", 0.8)],
}


def _hide_the_twin(path: Path) -> None:
    with Store(path) as store:
        for table in sorted(TWIN_TABLES):
            store.conn.execute(f"DROP TABLE {table}")


def _canonical(value: Any) -> Any:
    """Lists of rows and symptoms in one order: a DuckDB answer without ORDER BY may come back in another order
    on a loaded machine (parallel aggregation); what is in them, and the ranking of hypotheses, must match."""
    if isinstance(value, dict):
        return {k: _canonical(v) for k, v in value.items()}
    if isinstance(value, list):
        items = [_canonical(v) for v in value]
        return sorted(items, key=lambda v: json.dumps(v, sort_keys=True, default=str))
    return value


def _unordered(d: dict[str, Any], *keys: str) -> dict[str, Any]:
    return {k: (_canonical(v) if k in keys else v) for k, v in d.items()}


def diagnosis(result: RunResult) -> dict[str, Any]:
    """What the analyst concluded, in full (hypotheses in their ranked order; symptoms and evidence rows as sets)."""
    return {
        "incidents": [_unordered(i.model_dump(), "symptoms", "components") for i in result.incidents],
        "diagnoses": [
            {
                **d.model_dump(exclude={"hypotheses"}),
                "incident": _unordered(d.incident.model_dump(), "symptoms", "components"),
                "hypotheses": [
                    {**h.model_dump(exclude={"evidence"}), "evidence": _canonical(h.model_dump()["evidence"])}
                    for h in d.hypotheses
                ],
            }
            for d in result.diagnoses
        ],
        "remediations": {
            k: [a.model_dump(exclude={"proposal_id", "created_ts_s"}) for a in v]
            for k, v in result.remediations.items()
        },
    }


BLIND = """
import json, sys
from aiops.pipeline import analyze_store
from aiops.runtime.world import attach, desk
from aiops.store import Store
from tests.twin.test_twin_blind_analyst import diagnosis
answers = {}
for path in sys.argv[1:]:
    with Store(path) as store:
        now_ts_s = float(store.scalar("SELECT max(ts_s) FROM gpu_samples") or 0.0)
        guard = desk(store, attach(store, actuator="none"), clock=lambda: now_ts_s)
        answers[path] = diagnosis(analyze_store(store, desk=guard, origin="eval"))
print(json.dumps(answers, default=str))
"""


def _json(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def analysed_blind(paths: list[Path]) -> dict[str, Any]:
    """Each of `paths` analysed in one fresh Python process (nothing of the twin's in its memory), by path."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", BLIND, *map(str, paths)], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@dataclass(frozen=True)
class Analysed:
    runs_recorded: int  # rows of sim_runs in the simulated workspace
    refused: str  # what reading sim_runs in the blind copy raised (empty: it did not)
    normal: dict[str, Any]  # the eval's analysis, the twin held
    blind: dict[str, Any]  # the blind copy's, in the fresh process


def _analysed_seen(store: Store, twin: Any) -> dict[str, Any]:
    now_ts_s = float(store.scalar("SELECT max(ts_s) FROM gpu_samples") or 0.0)
    return dict(_json(diagnosis(analyze(store, twin=twin, origin="eval", clock=lambda: now_ts_s))))


@pytest.fixture(scope="module")
def analysed(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Analysed]:
    """Every scenario simulated as the eval does and analysed there with its twin held; then every blind copy
    analysed in one fresh process."""
    seen_of: dict[str, tuple[int, str, dict[str, Any]]] = {}
    blind_of: dict[str, Path] = {}
    for name in sorted(SCENARIOS):
        folder = tmp_path_factory.mktemp("blind")
        seen, blind = folder / "seen.duckdb", folder / "blind.duckdb"
        with Store(seen) as store:  # simulated as the eval does; the twin stays in this process
            twin = simulate_into(store, scenario(SCENARIOS[name]))
            runs_recorded = int(store.scalar("SELECT count(*) FROM sim_runs"))
        shutil.copyfile(seen, blind)
        _hide_the_twin(blind)
        refused = ""
        with Store(blind) as store:
            try:
                store.query("SELECT * FROM sim_runs")
            except Exception as e:  # the test judges what was raised
                refused = f"{type(e).__name__}: {e}"
        with Store(seen) as store:  # the eval's entry point (evals/harness.py score_analysis), the twin held
            normal = _analysed_seen(store, twin)
        seen_of[name] = (runs_recorded, refused, normal)
        blind_of[name] = blind
    answers = analysed_blind(list(blind_of.values()))
    return {name: Analysed(*seen_of[name], blind=answers[str(blind_of[name])]) for name in sorted(SCENARIOS)}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_the_analyst_concludes_the_same_without_the_twins_tables(
    name: str, analysed: dict[str, Analysed]
) -> None:
    run = analysed[name]
    assert run.runs_recorded == 1  # the run is recorded: there is something to hide
    assert re.search("sim_runs", run.refused), run.refused  # the blind copy refuses any read of it
    normal = run.normal
    assert normal["diagnoses"] and all(d["hypotheses"] for d in normal["diagnoses"]), normal["incidents"]
    causes = {d["hypotheses"][0]["root_cause"] for d in normal["diagnoses"]}
    assert causes & {f["kind"] for f in SCENARIOS[name]}, causes  # a real diagnosis, not an empty one
    assert run.blind == normal
