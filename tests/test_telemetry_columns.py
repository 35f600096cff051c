"""A telemetry column is declared once (aiops/columns.py) and everything else about it derives: the collectors'
Arrow schema, the store's column (its migration's SQL), the node's export, the fleet's families and pivot,
docs/METRICS.md's rows and the twin-leak test's allowance. Shown for gpu_samples (every column declared, the
store's table and the declarations equal), for a probe column added to a copy of the declarations (each
derivation carries it), and for the real column added by the recipe (`retired_rows`: a GPU's memory rows
retired for uncorrectable errors), followed from the twin's NVML through the node's export, a real Prometheus
and the fleet's pivot to the analyst's evidence line."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from aiops import columns
from aiops.columns import (
    GPU_SAMPLES,
    Column,
    Family,
)
from aiops.fleet import families
from aiops.fleet.pivot import (
    gpu_samples_sql,
)
from aiops.pipeline import analyze_store
from aiops.runtime.analysis import simulate_into
from aiops.scenarios import parse_scenario
from aiops.service.metrics import MetricsCache
from aiops.sources.exposition import render_snapshot
from aiops.sources.mapping import _gpu_names, _gpu_samples_sql
from aiops.sources.names import DCGM_FIELDS
from aiops.store import Store
from collectors.schema import FLEET_ONLY_COLUMNS, columns_typed
from evals.harness import through_prometheus
from tests.service_helpers import require_binary
from tests.twin.twin_observed import OBSERVED

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("aiops", "collectors", "guardrails", "evals")


def _scrape(cache: MetricsCache) -> str:
    """The node's /metrics text for what the cache observed."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(cache)
    return generate_latest(registry).decode()


@pytest.mark.parametrize("name", sorted(columns.TABLES))
def test_the_store_holds_every_declared_column_with_its_type_and_nothing_else(name: str) -> None:
    table = columns.TABLES[name]
    with Store(":memory:") as store:
        held = {
            r["column_name"]: r["data_type"]
            for r in store.query(
                "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ?", [name]
            )
        }
    declared = {c.name: columns.SQL_TYPES[c.arrow] for c in table.columns}
    assert held == declared
    assert columns_typed(name) == dict(columns.arrow_columns(table))
    assert FLEET_ONLY_COLUMNS.get(name, ()) == tuple(c.name for c in table.columns if not c.collected)
    assert FLEET_ONLY_COLUMNS["gpu_samples"] == ("samples", "throttled_samples", "idle_samples")


@pytest.mark.parametrize("name", sorted(columns.TABLES))
def test_docs_metrics_lists_the_declared_families_as_generated(name: str) -> None:
    """docs/METRICS.md holds `python -m aiops.columns`' rows, in one block, word for word."""
    doc = (ROOT / "docs" / "METRICS.md").read_text()
    generated = "\n".join(columns.markdown_rows(columns.TABLES[name]))
    assert generated in doc, (
        f"regenerate docs/METRICS.md's {name} rows (python -m aiops.columns):\n{generated}"
    )


def test_the_leak_tests_allowances_for_a_declared_table_are_its_declarations() -> None:
    """No allowance of a declared table is written by hand in tests/twin/twin_observed.py: its columns', its row
    rate's (`<rows>`) and its entities' (`<entities>`) come from the declaration, and all of it is there."""
    for name, table in columns.TABLES.items():
        held = {key: value for key, value in OBSERVED.items() if key[0] == name}
        assert held == columns.leak_allowances(table), name
    assert OBSERVED[("job_steps", "<rows>")][0] == columns.ANY
    assert ("flow_class_samples", "<entities>") in columns.leak_allowances(
        columns.TABLES["flow_class_samples"]
    )


def _probe_table() -> columns.Table:
    probe = Column(
        "probe_widgets",
        "int32",
        Family("aiops_gpu_probe_widgets", "widgets", "widgets", "gpu_samples.probe_widgets: a probe"),
        scale=0.001,  # stored in milliwidgets
        reacts_to=frozenset({"gpu_ecc_error"}),
        observed_by="a probe",
        migration=99,
    )
    return dataclasses.replace(GPU_SAMPLES, columns=(*GPU_SAMPLES.columns, probe))


def test_a_probe_column_added_to_the_declarations_reaches_every_derivation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    table = _probe_table()
    monkeypatch.setitem(columns.TABLES, "gpu_samples", table)
    assert ("probe_widgets", "int32") in columns.arrow_columns(table)
    assert (
        columns.schema_additions(99)
        == "ALTER TABLE gpu_samples ADD COLUMN IF NOT EXISTS probe_widgets INTEGER"
    )
    assert "aiops_gpu_probe_widgets" in [f.name for f in columns.families(table)]
    assert "aiops_gpu_probe_widgets" in columns.integer_families(table)
    assert [c.name for c in columns.fleet_read(table)][-1] == "probe_widgets"
    assert columns.leak_allowances(table)[("gpu_samples", "probe_widgets")] == (
        frozenset({"gpu_ecc_error"}),
        "a probe",
    )
    assert any(
        "`aiops_gpu_probe_widgets` | gauge | gpu, node | widgets" in r for r in columns.markdown_rows(table)
    )
    # the exporter and the pivot read the declarations when they run
    monkeypatch.setattr("aiops.service.metrics.GPU_SAMPLES", table)
    monkeypatch.setattr("aiops.fleet.pivot.GPU_SAMPLES", table)
    cache = MetricsCache("node0")
    cache.observe(
        "gpu_samples", ("ts_s", "gpu", "node", "probe_widgets"), [(1.0, "node0/gpu0", "node0", 7000)]
    )
    assert 'aiops_gpu_probe_widgets{gpu="node0/gpu0",node="node0"} 7.0' in _scrape(cache)
    assert (
        "CAST(max(value * 1000.0) FILTER (WHERE name = 'aiops_gpu_probe_widgets') AS INTEGER) AS probe_widgets"
        in (gpu_samples_sql())
    )


def test_adding_retired_rows_was_one_declaration_plus_its_producers_and_readers() -> None:
    """The column's name and family appear in product code only where it is declared (aiops/columns_gpu.py), made
    (the NVML collector, the twin's fleet view) and read (the analyst's facts and evidence): never in the store's
    migrations, the exporter, the fleet's families or pivot, nor the leak test's allowances."""
    named: dict[str, set[str]] = {"retired_rows": set(), "retired_memory_rows": set()}  # column, family
    for package in PRODUCT:
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text()
            for word in named:
                if re.search(rf"\b{word}\b", text):
                    named[word].add(str(path.relative_to(ROOT)))
    assert named["retired_rows"] == {
        "aiops/columns_gpu.py",
        "collectors/nvml.py",
        "aiops/sim/fleet_view.py",
        "aiops/rca/facts.py",
        "aiops/rca/gpu_scorers.py",
    }
    assert named["retired_memory_rows"] == {"aiops/columns_gpu.py"}
    assert "retired_rows" not in (ROOT / "tests" / "twin" / "twin_observed.py").read_text()
    # ... and each derivation has it
    assert "ADD COLUMN IF NOT EXISTS retired_rows INTEGER" in columns.schema_additions(36)
    assert "aiops_gpu_retired_memory_rows" in families.GPU_GAUGES
    assert "aiops_gpu_retired_memory_rows" in families.INTEGER_VALUED
    assert OBSERVED[("gpu_samples", "retired_rows")][0] == frozenset({"gpu_ecc_error"})


SCENARIO = {
    "name": "retired-rows",
    "seed": 5,
    "duration_s": 600,
    "cluster": {"racks": 1, "nodes_per_rack": 2, "gpus_per_node": 2, "nics_per_node": 1},
    "jobs": [{"name": "llm", "nodes": "all", "step_compute_s": 1.0, "allreduce_mb": 64}],
    "faults": [{"kind": "gpu_ecc_error", "target": "node1/gpu1", "start_s": 360, "severity": 0.9}],
}


def test_retired_rows_from_the_twins_nvml_through_prometheus_to_the_fleets_evidence(tmp_path: Path) -> None:
    """The twin's GPU remaps a row for each uncorrectable error; the node exports the count; a real Prometheus
    holds it; the fleet reads it back into gpu_samples; the analyst's ECC hypothesis says the rows rose."""
    require_binary("prometheus")
    require_binary("promtool")
    with Store(":memory:") as twin:
        simulate_into(twin, parse_scenario(SCENARIO))
        fleet, _report = through_prometheus(twin, 30.0, tmp_path)
    with fleet:
        rows = fleet.query(
            "SELECT gpu, min(retired_rows) AS low, max(retired_rows) AS high FROM gpu_samples GROUP BY gpu ORDER BY gpu"
        )
        assert {r["gpu"]: (r["low"], r["high"]) for r in rows} == {
            "node0/gpu0": (0, 0),
            "node0/gpu1": (0, 0),
            "node1/gpu0": (0, 0),
            "node1/gpu1": (0, 2),
        }
        hypotheses = [h for d in analyze_store(fleet).diagnoses for h in d.hypotheses]
    ecc = next(h for h in hypotheses if h.root_cause == "gpu_ecc_error")
    assert ecc.component == "node1/gpu1"
    claims = [e.claim for e in ecc.evidence]
    assert "node1/gpu1 retired 2 more memory rows (NVML remapped rows)" in claims, claims


def test_retired_rows_as_dcgm_exporter_serves_and_the_prometheus_source_reads_it() -> None:
    """Declared with its DCGM field: /metrics/dcgm serves DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS (as
    dcgm-exporter's counters CSV names it) and `aiops analyze --prometheus` maps it back into the column."""
    row = {"gpu": "node0/gpu1", "node": "node0", "uuid": "GPU-1", "temp_c": 50.0, "retired_rows": 2}
    text = render_snapshot({"node0/gpu1": row}, {}, {})
    assert "# TYPE DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS counter" in text
    assert re.search(r'^DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS\{.*gpu="1".*\} 2$', text, re.M), text
    # every gpu_samples column's DCGM names come from its declaration, the newer of a renamed field first
    assert {f.column for f in DCGM_FIELDS} <= {c.name for c in GPU_SAMPLES.columns} and len(DCGM_FIELDS) == 23
    clocks = [f.name for f in DCGM_FIELDS if f.column == "clocks_event_reasons"]
    assert clocks == ["DCGM_FI_DEV_CLOCKS_EVENT_REASONS", "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"]
    # the pivot reads the field under its key (its place among the staged names) into the column, as an integer
    key = _gpu_names().index("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS") + 1
    sql = _gpu_samples_sql()
    assert f"max(CASE WHEN k.nid = {key} THEN x.value END) AS v{key}" in sql
    targets = sql.split("(", 1)[1].split(")", 1)[0].split(", ")[4:]  # after ts_s, gpu, node, uuid
    picks = re.split(
        r", (?![^(]*\))", sql.split("u.uuid, ", 1)[1].split("\nFROM", 1)[0]
    )  # commas outside ( )
    assert dict(zip(targets, picks, strict=True))["retired_rows"] == f"CAST(v{key} AS INTEGER)"
