"""Issue 14 item 2, issue 22 item 5: the twin does not leak its faults. Every fault kind is simulated into a
workspace the way `aiops simulate` and `aiops demo` make one (`simulate_into`: telemetry, then the run recorded
in `sim_runs`), and EVERY column of EVERY table of the store's schema (information_schema, not a hand list) is
judged by whether it carries information about the fault:

- a table with a `ts_s`: per entity (GPU, NIC and lane, rack, job and op and scope, ...), each column's values
  inside the fault window against outside it (for a flap also the seconds the fault held the link down, read
  from the world as it ran): numbers and booleans by their level and by their change from the previous sample
  (how well one threshold separates inside from outside, and inside from the time before the fault: the
  Kolmogorov-Smirnov distance; so a level shift, a flag, a counter that only grows during the fault, a value
  raised at its start and never lowered), nulls by their rate, strings by their value set (the share
  of samples whose value never occurs on the other side), and the table's rows by their rate per second;
- a table without `ts_s`: its content, which must be the fault-free run's;
- every string anywhere: it must not name a fault kind, nor say `fault` or `inject`.

What a real source reports while such a fault lasts (temperatures, clocks, throttle reasons, the counters the
NIC and HCA keep) is listed in OBSERVED with that source, for the fault kinds it reacts to (docs/SIMULATOR.md,
"What is observable, and by whom"); everything else that carries fault information fails. Only the twin's own
tables (TWIN_TABLES: the scenario it ran and its log) may name faults; the agent's SQL tool refuses them and
the analyst never reads them (tests/twin/test_twin_blind_analyst.py).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

from aiops.agent.sqltool import PROTECTED_TABLES
from aiops.labels import FAULT_KINDS
from aiops.runtime import analysis
from aiops.sim import SIM_EPOCH_TS_S, World
from aiops.store import Store
from tests.simkit import scenario
from tests.twin.twin_observed import LOST_GPU, OBSERVED, TWIN_TABLES

START_S, FAULT_S, DURATION_S = 90.0, 150.0, 360.0  # the fault ends well before the run does
ENTITY_KEYS = (
    "gpu",
    "node",
    "nic",
    "rack",
    "job",
    "op",
    "scope",
    "lane",
    "traffic_class",
    "component",
    "dev",
)
MIN_ON, MIN_OFF = (
    10,
    10,
)  # samples of an entity inside and outside the fault for a comparison to mean anything
SEPARATION = 0.5  # a threshold that tells inside from outside for half the samples more than chance does
DISCRETE_MAX = 8  # distinct values outside the fault up to which a column counts as a few values (a code)
SEPARATION_FROM_BEFORE = 0.9  # inside against the time before the fault only (slow drifts reach ~0.8 there)
WALL_CLOCK = {("schema_migrations", "applied_ts_s"): "when the migration ran (the store's, not the twin's)"}
NAMES_A_FAULT = re.compile(
    "|".join(
        [r"\bfaults?\b", r"\binject", *(re.escape(k).replace("_", "[ _-]?") for k in sorted(FAULT_KINDS))]
    ),
    re.IGNORECASE,
)

TARGETS: dict[str, str] = {
    "thermal_throttle": "node3/gpu2",
    "rack_cooling_failure": "rack1",
    "power_cap_misconfig": "node1",
    "facility_power_cap": "rack1",
    "power_brake": "node1",
    "gpu_ecc_error": "node2/gpu1",
    "gpu_fell_off_bus": "node0/gpu3",
    "nvlink_degraded": "node2/gpu0",
    "pcie_degraded": "node3/gpu1",
    "bulk_traffic_contention": "node0/nic1",
    "lane_misclassification": "node1/nic0",
    "nic_link_flap": "node1/nic0",
    "ecn_misconfig": "node3/nic0",
    "input_pipeline_bottleneck": "node2",
    "application_error": "node1/gpu2",
    "ambient_drift": "fleet",
}


@dataclass(frozen=True)
class Leak:
    table: str
    column: str  # a column, or `<rows>` (the table's row rate) or `<content>` (a table without ts_s)
    how: str
    entity: tuple[Any, ...] = ()
    state: str = ""
    score: float = 1.0

    def __str__(self) -> str:
        where = f" of {self.entity}" if self.entity else ""
        score = f" {self.state} (separation {self.score:.2f})" if self.state else ""
        return f"{self.table}.{self.column}{where}: {self.how}{score}"


class _World(World):
    """The world `simulate_into` builds, remembering the seconds a flap held its link down."""

    held_down: set[float]
    watched: int | None = None

    def step(self, dt_s: float = 1.0) -> None:
        super().step(dt_s)
        if self.watched is not None and not self.link_up[self.watched]:
            self.held_down.add(self.now_ts_s)


def run(kind: str | None, monkeypatch: pytest.MonkeyPatch) -> tuple[Store, dict[str, Callable[[Any], Any]]]:
    """Simulate one fault (or none) into a store as `aiops simulate` does; return it with the fault's states as
    functions of an array of ts_s (never read from telemetry)."""
    faults = []
    if kind is not None:
        faults = [
            {
                "kind": kind,
                "target": TARGETS[kind],
                "start_s": START_S,
                "duration_s": FAULT_S,
                "severity": 0.8,
            }
        ]
    held: set[float] = set()

    def world(spec: Any, policy: Any = None) -> _World:
        w = _World(spec, policy)
        w.held_down = held
        w.watched = w.layout.nic_index.get(TARGETS[kind]) if kind == "nic_link_flap" else None
        return w

    monkeypatch.setattr(analysis, "World", world)
    store = Store(":memory:")
    analysis.simulate_into(store, scenario(faults, duration_s=DURATION_S))
    lo, hi = SIM_EPOCH_TS_S + START_S, SIM_EPOCH_TS_S + START_S + FAULT_S
    states: dict[str, Callable[[Any], Any]] = {"fault window": lambda ts: (ts >= lo) & (ts < hi)}
    if kind == "nic_link_flap":
        assert len(held) >= MIN_ON, "the flap scenario must hold the link down long enough to compare"
        down = np.array(sorted(held))
        states["link held down"] = lambda ts: np.isin(ts, down)
    return store, states


def tables(store: Store) -> dict[str, list[tuple[str, str]]]:
    """Every table of the store's schema with its columns and their types."""
    out: dict[str, list[tuple[str, str]]] = {}
    for r in store.query(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position"
    ):
        out.setdefault(str(r["table_name"]), []).append((str(r["column_name"]), str(r["data_type"])))
    return out


def _numeric(data_type: str) -> bool:
    return data_type in {"BOOLEAN", "TINYINT", "SMALLINT", "INTEGER", "BIGINT", "HUGEINT", "UTINYINT"} or (
        data_type.startswith(("DOUBLE", "FLOAT", "REAL", "DECIMAL", "UINTEGER", "UBIGINT", "USMALLINT"))
    )


def ks(inside: Any, outside: Any) -> float:
    """How much better than chance one threshold tells the two samples apart (Kolmogorov-Smirnov D)."""
    if not len(inside) or not len(outside):
        return 0.0
    grid = np.concatenate([inside, outside])  # every value of either (a repeated one changes no maximum)
    f_in = np.searchsorted(np.sort(inside), grid, side="right") / len(inside)
    f_out = np.searchsorted(np.sort(outside), grid, side="right") / len(outside)
    return float(np.max(np.abs(f_in - f_out)))


def value_set_change(inside: Any, outside: Any) -> float:
    """The share of samples (on the side where it is larger) whose value never occurs on the other side."""
    only_in = ~np.isin(inside, outside)
    only_out = ~np.isin(outside, inside)
    return max(float(only_in.mean()), float(only_out.mean()))


def _features(null: Any, values: Any, numeric: bool) -> Iterator[tuple[str, Any, Any]]:
    """(how, values, mask of the samples they belong to) for one entity's column in time order: `null` marks its
    missing samples, `values` holds its numbers (NaN where missing) or its values as text."""
    yield "is null more or less often", null.astype(float), np.ones(len(null), dtype=bool)
    if numeric:
        known_values = values[~null]
        if len(known_values) < 2 or np.any(np.diff(known_values) < 0):  # a counter's level is its history
            yield "shifts its level", known_values, ~null
        change = np.diff(values, prepend=np.nan)
        known = ~np.isnan(change)
        yield "changes differently", change[known], known
    else:
        yield "changes its value set", values[~null], ~null


def series_leaks(
    store: Store,
    table: str,
    cols: list[tuple[str, str]],
    states: dict[str, Any],
    healthy: Store | None = None,
) -> list[Leak]:
    """Each column's leaks, per entity; with the fault-free run (`healthy`), also the values of a few-valued
    column and the entities that appear only inside the fault and nowhere in that run."""
    names = [c for c, _ in cols]
    keys = [k for k in ENTITY_KEYS if k in names]
    order = ", ".join(f'"{k}"' for k in [*keys, "ts_s"])
    result = store.conn.execute(f'SELECT * FROM "{table}" ORDER BY {order}')  # names from the catalogue
    rows = result.fetchall()
    if not rows:
        return []
    by_column = list(zip(*rows, strict=True))  # one pass over the rows, not one per column
    data = {name: np.array(by_column[i], dtype=object) for i, name in enumerate(names)}
    ts = data["ts_s"].astype(float)
    found = _row_rate(table, ts, states)
    entity_of = (
        list(zip(*(by_column[names.index(k)] for k in keys), strict=True)) if keys else [()] * len(rows)
    )
    bounds = [0, *[i for i in range(1, len(rows)) if entity_of[i] != entity_of[i - 1]], len(rows)]
    for name, data_type in cols:
        if name == "ts_s" or name in keys:
            continue
        best: dict[tuple[str, str], Leak] = {}
        numeric = _numeric(data_type)
        null, as_arrays = _as_arrays(data[name], numeric)  # the whole column once, each entity a slice of it
        for a, b in itertools.pairwise(bounds):
            before = ts[a:b] < SIM_EPOCH_TS_S + START_S
            # once for every state and ref; a feature of one value everywhere separates no split (KS distance
            # and value-set change 0, below every threshold): not compared
            features = [f for f in _features(null[a:b], as_arrays[a:b], numeric) if not _constant(f[1])]
            for state_name, state in states.items():
                on = state(ts[a:b])
                refs = (
                    ("the rest of the run", ~on, SEPARATION),
                    ("the time before it", ~on & before, SEPARATION_FROM_BEFORE),
                )
                for ref, off, threshold in refs:
                    for how, values, mask in features:
                        inside, outside = values[on[mask]], values[off[mask]]
                        if len(inside) < MIN_ON or len(outside) < MIN_OFF:
                            continue
                        score = (
                            ks(inside, outside)
                            if how != "changes its value set"
                            else value_set_change(inside, outside)
                        )
                        key = (how, f"with the {state_name} (against {ref})")
                        if score >= threshold and score > (best[key].score if key in best else 0.0):
                            best[key] = Leak(table, name, how, entity_of[a], key[1], score)
        found += best.values()
        measured = data_type.startswith(("DOUBLE", "FLOAT", "REAL", "DECIMAL"))  # varies by nature
        if healthy is not None and not measured:
            ever = _values_in(healthy, table, name)
            column = _Column(data[name], null, as_arrays if numeric else None)
            found += _rare_values(table, name, column, ts, bounds, entity_of, states, ever)
    if healthy is None or not keys:
        return found
    listed = ", ".join(f'"{k}"' for k in keys)  # names from the catalogue
    known = {tuple(r) for r in healthy.conn.execute(f'SELECT DISTINCT {listed} FROM "{table}"').fetchall()}
    return found + _entities_only_within(table, ts, bounds, entity_of, states, known)


def _constant(values: Any) -> bool:
    """Whether a feature's values (no NaN: `_features` drops them) are all one value."""
    return not len(values) or bool(np.all(values == values[0]))


def _as_arrays(column: Any, numeric: bool) -> tuple[Any, Any]:
    """A column's null mask and its values: numbers as floats (NaN where null), anything else as text."""
    # elementwise in numpy's loop (not a Python generator over the rows); a boolean array
    null = np.equal(column, np.array(None, dtype=object))
    if numeric:
        numbers = column.copy()
        numbers[null] = np.nan
        return null, numbers.astype(float)  # float() of each value, as a comprehension would call it
    return null, column.astype(str)


@dataclass(frozen=True)
class _Column:
    """One column of a table in entity and time order: its values, null mask and (numbers) floats."""

    values: Any
    null: Any
    numbers: Any  # floats with NaN where null, or None for a column that is not numeric


_VALUES_IN: dict[tuple[int, str, str], set[str]] = {}


def _values_in(store: Store, table: str, column: str) -> set[str]:
    """Every value `column` of `table` takes in `store` (as repr), for the few-valued columns: read once per
    store (the fault-free run's, which every case compares with)."""
    key = (id(store), table, column)
    if key not in _VALUES_IN:
        rows = store.conn.execute(f'SELECT DISTINCT "{column}" FROM "{table}" LIMIT 1000').fetchall()
        _VALUES_IN[key] = {repr(r[0]) for r in rows}
    return _VALUES_IN[key]


def _rare_values(
    table: str,
    name: str,
    column: _Column,
    ts: Any,
    bounds: list[int],
    entity_of: list[tuple[Any, ...]],
    states: dict[str, Any],
    ever: set[str],
) -> list[Leak]:
    """A column of a few values (a flag, a code, a width, a name: integers, booleans, strings) that takes, inside
    the fault, a value it never takes outside nor anywhere in the fault-free run (`ever`): caught however few
    samples carry it (the distances above need a share of them)."""
    found = []
    for a, b in itertools.pairwise(bounds):
        values, known = column.values[a:b], ~column.null[a:b]
        if column.numbers is not None and _counter(column.numbers[a:b][known]):
            continue  # its level is its history: its changes are judged above
        texts = np.array([repr(v) for v in values], dtype=object)  # only for the entities judged here
        for state_name, state in states.items():
            on = state(ts[a:b])
            off = ~on & known
            outside = set(texts[off])
            if int(off.sum()) < MIN_OFF or len(outside) > DISCRETE_MAX:
                continue
            inside = on & known
            new = [
                v
                for v, r in zip(values[inside], texts[inside], strict=True)
                if r not in outside and r not in ever
            ]
            if new:
                found.append(
                    Leak(
                        table,
                        name,
                        f"takes a value only inside ({new[0]!r} in {len(new)} samples)",
                        entity_of[a],
                        f"with the {state_name}",
                    )
                )
                break
    return found


def _counter(numbers: Any) -> bool:
    """Numbers that never decrease and change at least once (a counter's level grows with time alone)."""
    return bool(len(numbers) > 1 and np.all(np.diff(numbers) >= 0) and numbers[-1] > numbers[0])


def _entities_only_within(
    table: str,
    ts: Any,
    bounds: list[int],
    entity_of: list[tuple[Any, ...]],
    states: dict[str, Any],
    known: set[tuple[Any, ...]],
) -> list[Leak]:
    """An entity key (a GPU, NIC, lane, job ...) whose rows all lie inside the fault and that the fault-free run
    never has: the key itself carries the fault (a name that changes while it lasts)."""
    found = []
    for a, b in itertools.pairwise(bounds):
        if entity_of[a] in known:
            continue
        for state_name, state in states.items():
            if bool(np.all(state(ts[a:b]))) and not bool(np.all(state(ts))):
                found.append(
                    Leak(table, "<entities>", "has an entity only inside", entity_of[a], f"the {state_name}")
                )
    return found


def _row_rate(table: str, ts: Any, states: dict[str, Any]) -> list[Leak]:
    """Rows per second inside the fault against outside: events that only the fault writes."""
    seconds = np.arange(SIM_EPOCH_TS_S, SIM_EPOCH_TS_S + DURATION_S + 1.0)
    counts = np.bincount(
        np.clip(np.floor(ts - SIM_EPOCH_TS_S).astype(int), 0, len(seconds) - 1), minlength=len(seconds)
    )
    found = []
    for state_name, state in states.items():
        on = state(seconds)
        inside, outside = counts[on], counts[~on]
        score = ks(inside, outside)
        only_inside = inside.sum() > 0 and outside.sum() == 0
        if score >= SEPARATION or only_inside:
            how = "has rows only" if only_inside else "has more or fewer rows"
            found.append(
                Leak(table, "<rows>", how, (), f"within the {state_name}", max(score, float(only_inside)))
            )
    return found


def content(store: Store, table: str, cols: list[tuple[str, str]]) -> list[tuple[Any, ...]]:
    kept = ", ".join(f'"{c}"' for c, _ in cols if (table, c) not in WALL_CLOCK)
    return sorted(store.conn.execute(f'SELECT {kept} FROM "{table}"').fetchall(), key=repr)


def naming(store: Store, table: str, cols: list[tuple[str, str]]) -> dict[str, str]:
    """Columns of `table` holding a string that names a fault kind or says fault/inject, with one such value."""
    return naming_in(store, {table: cols}).get(table, {})


def naming_in(store: Store, schema: dict[str, list[tuple[str, str]]]) -> dict[str, dict[str, str]]:
    """Per table of `schema`, `naming`'s columns and values: one scan of every table in one query (a query per
    table cost more than the scans). A number's or a boolean's text (digits, sign, point, exponent, inf, nan,
    true, false) can name nothing: those columns are not cast."""
    texts = [(t, c) for t, cols in schema.items() for c, data_type in cols if not _numeric(data_type)]
    if not texts:
        return {}
    pattern = "(?i)" + NAMES_A_FAULT.pattern
    each = " UNION ALL ".join(
        f'SELECT {i} AS i, CAST("{c}" AS VARCHAR) AS v FROM "{t}"' for i, (t, c) in enumerate(texts)
    )  # names from the catalogue
    hits = store.conn.execute(
        f"SELECT i, any_value(v) FROM ({each}) WHERE regexp_matches(v, $1) GROUP BY i", [pattern]
    ).fetchall()
    found: dict[str, dict[str, str]] = {}
    for i, hit in hits:
        table, column = texts[int(i)]
        found.setdefault(table, {})[column] = str(hit)
    return found


def leaks(store: Store, healthy: Store | None, states: dict[str, Any]) -> list[Leak]:
    """Everything in `store` outside the twin's tables that carries information about the fault; a table
    without ts_s is compared with the fault-free run's (`healthy`)."""
    found: list[Leak] = []
    schema = {table: cols for table, cols in tables(store).items() if table not in TWIN_TABLES}
    named = naming_in(store, schema)
    for table, cols in schema.items():
        found += [Leak(table, c, f"names a fault ({v[:60]!r})") for c, v in named.get(table, {}).items()]
        if any(c == "ts_s" for c, _ in cols):
            found += series_leaks(store, table, cols, states, healthy)
        elif healthy is not None and content(store, table, cols) != content(healthy, table, cols):
            found.append(Leak(table, "<content>", "differs from the fault-free run's"))
    return found


def explained(leak: Leak, kind: str) -> bool:
    if (leak.table, leak.how, kind in LOST_GPU[2]) == (*LOST_GPU[:2], True):
        return True
    # an entity seen only inside the fault is a row the fault writes: allowed where the table's row rate is
    columns = (leak.column, "<rows>") if leak.column == "<entities>" else (leak.column,)
    return any(kind in OBSERVED.get((leak.table, c), (frozenset[str](), ""))[0] for c in columns)


def unexplained(found: list[Leak], kind: str) -> list[Leak]:
    return [leak for leak in found if not explained(leak, kind)]


@pytest.fixture(scope="module")
def healthy() -> Iterator[tuple[Store, dict[str, Any]]]:
    with pytest.MonkeyPatch.context() as mp:
        store, states = run(None, mp)
    yield store, states
    _VALUES_IN.clear()
    store.close()


def test_a_fault_free_run_carries_nothing_about_a_window(healthy: tuple[Store, dict[str, Any]]) -> None:
    """The statistics do not flag a run without a fault: nothing separates the would-be window from the rest."""
    store, states = healthy
    assert [str(leak) for leak in leaks(store, None, states)] == []


@pytest.fixture(scope="module")
def thermal() -> Iterator[tuple[Store, dict[str, Any]]]:
    """The thermal fault's run, simulated once for its case and for the planted leaks (which plant them in a
    transaction rolled back after)."""
    with pytest.MonkeyPatch.context() as mp:
        store, states = run("thermal_throttle", mp)
    yield store, states
    store.close()


@pytest.mark.parametrize("kind", sorted(TARGETS))
def test_no_stored_column_carries_the_injected_fault(
    kind: str,
    healthy: tuple[Store, dict[str, Any]],
    request: pytest.FixtureRequest,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    if kind == "thermal_throttle":
        store, states = request.getfixturevalue("thermal")
    else:
        store, states = run(kind, monkeypatch)
    schema = tables(store)
    assert set(schema) >= TWIN_TABLES and TWIN_TABLES == PROTECTED_TABLES
    # sim_runs holds the scenario, faults included: the name check sees it there (and allows it there only)
    assert kind in naming(store, "sim_runs", schema["sim_runs"]).get("scenario_yaml", ""), "sim_runs is empty"
    bad = unexplained(leaks(store, healthy[0], states), kind)
    assert not bad, f"{kind}: stored columns that carry the fault:\n" + "\n".join(
        sorted({str(b) for b in bad})
    )


def test_the_leak_test_catches_planted_leaks(
    healthy: tuple[Store, dict[str, Any]], thermal: tuple[Store, dict[str, Any]]
) -> None:
    """Shapes that passed the previous versions: a level (20 outside, 12.5 inside), a 0/1 flag, a string naming
    the fault's kind, a string that changes value, a value raised at the fault's start and never lowered, a value
    of a few-valued column that appears in only three samples of the window, an entity key that changes while the
    fault lasts; and a table without ts_s that differs from the fault-free run's. Each is caught, and nothing
    else."""
    store, states = thermal
    window = f"ts_s >= {SIM_EPOCH_TS_S + START_S} AND ts_s < {SIM_EPOCH_TS_S + START_S + FAULT_S}"
    few = ", ".join(str(SIM_EPOCH_TS_S + START_S + offset_s) for offset_s in (20.0, 70.0, 121.0))
    store.conn.execute("BEGIN TRANSACTION")
    for planted in (
        f"UPDATE host_samples SET mem_used_pct = CASE WHEN {window} THEN 12.5 ELSE 20 END",
        f"UPDATE collective_samples SET timeouts = CASE WHEN {window} THEN 1 ELSE 0 END",
        f"UPDATE gpu_samples SET uuid = 'thermal_throttle' WHERE {window} AND gpu = 'node0/gpu0'",
        f"UPDATE flow_class_samples SET rule_id = 'hot' WHERE {window}",
        f"UPDATE host_samples SET iowait_pct = 7 WHERE ts_s >= {SIM_EPOCH_TS_S + START_S}",  # raised, never lowered
        "UPDATE jobs SET checkpoint_gb = checkpoint_gb + 1",
        # a width that differs in three samples of the window only; a NIC renamed while the fault lasts
        f"UPDATE gpu_samples SET pcie_link_max_width = 8 WHERE gpu = 'node0/gpu1' AND ts_s IN ({few})",
        f"UPDATE nic_samples SET nic = 'node0/nic7' WHERE {window} AND nic = 'node0/nic1'",
    ):
        store.conn.execute(planted)
    try:
        caught = {
            (b.table, b.column) for b in unexplained(leaks(store, healthy[0], states), "thermal_throttle")
        }
    finally:
        store.conn.execute("ROLLBACK")  # the thermal case's run as simulated again
    assert store.scalar("SELECT count(*) FROM gpu_samples WHERE uuid = 'thermal_throttle'") == 0
    assert caught == {
        ("host_samples", "mem_used_pct"),
        ("collective_samples", "timeouts"),
        ("gpu_samples", "uuid"),
        ("flow_class_samples", "rule_id"),
        ("host_samples", "iowait_pct"),
        ("jobs", "<content>"),
        ("gpu_samples", "pcie_link_max_width"),
        ("nic_samples", "<entities>"),
    }
