"""A piece skips each pivot none of whose families it staged (aiops/fleet/pivot.py `families_read`,
aiops/fleet/ingest.py): that holds only if every read of `fleet_d` in a statement filters by the families named
in it. Each statement is run over a `fleet_d` of every family (one sample of each, two scrapes, every label set)
and over the same without its own families: it writes rows with them, none without. A statement that read some
of `fleet_d` without a family filter (a GPU's rows of any family) writes rows from the other families' samples
and fails here."""

from __future__ import annotations

import pyarrow as pa
import pytest

from aiops.fleet import families
from aiops.fleet.pivot import families_read, statements
from aiops.store import Store

LABEL_VALUES = {
    "node": "n0",
    "rack": "r0",
    "gpu": "n0/gpu0",
    "index": "0",
    "uuid": "GPU-0",
    "reason": "SwPowerCap",
    "error": "NVML_ERROR_UNKNOWN",
    "type": "t",
    "xid": "79",
    "nic": "n0/nic0",
    "lane": "bulk",
    "device": "mlx5_0",
    "dev": "eth0",
    "port": "1",
    "traffic_class": "tc1",
    "rule_id": "r1",
    "match_kind": "dscp",
    "match_value": "26",
    "scope": "node",
    "job": "j",
    "rank": "0",
    "op": "collective",
    "incident_id": "INC-n0-0001",
    "severity": "0.5",
    "root_cause": "thermal_throttle",
    "component": "n0/gpu0",
    "property": "power_limit_w",
    "proposal_id": "p1",
    "kind": "collective",
    "action_hash": "h",
    "instance": "n0:9484",
}
TS_S = (100.0, 102.0)


def fleet_d(names: list[str]) -> pa.Table:
    """One sample of each family at each scrape, every label set, the value a time the scrape can hold."""
    rows = [(name, ts_s) for name in names for ts_s in TS_S]
    return pa.table(
        {
            "name": [n for n, _ in rows],
            "ts_s": [t for _, t in rows],
            "value": [t - 10.0 for _, t in rows],
            **{label: [LABEL_VALUES[label]] * len(rows) for label in families.LABELS},
            "d": [2.0] * len(rows),
        }
    )


def written(names: list[str], table: str, sql: str) -> int:
    store = Store(":memory:")
    try:
        if table != "topology":  # the inventory the samples join (an intended state names its component)
            store.conn.execute(
                "INSERT INTO topology (component, kind, parent, rack, node, idx) VALUES "
                "('fleet', 'fleet', NULL, NULL, NULL, 0), ('r0', 'rack', 'fleet', 'r0', NULL, 0), "
                "('n0', 'node', 'r0', 'r0', 'n0', 0), ('n0/gpu0', 'gpu', 'n0', 'r0', 'n0', 0), "
                "('n0/nic0', 'nic', 'n0', 'r0', 'n0', 0)"
            )
        staged = fleet_d(names)
        store.conn.register("staged", staged)
        store.conn.execute("CREATE TEMP TABLE fleet_d AS SELECT * FROM staged")
        before = int(store.scalar(f"SELECT count(*) FROM {table}") or 0)
        store.conn.execute(sql, {"step": 2.0} if "$step" in sql else None)
        return int(store.scalar(f"SELECT count(*) FROM {table}") or 0) - before
    finally:
        store.close()


PIVOTS = [(table, sql) for table, sql in statements() if families_read(sql) is not None]


@pytest.mark.parametrize(("table", "sql"), PIVOTS, ids=[f"{i}-{t}" for i, (t, _) in enumerate(PIVOTS)])
def test_a_pivot_writes_nothing_without_its_own_families(table: str, sql: str) -> None:
    own = families_read(sql)
    assert own, f"a statement reading fleet_d names no family: {sql[:200]}"
    assert own <= set(families.ALL), sorted(own - set(families.ALL))
    others = [n for n in families.ALL if n not in own]
    if table == "job_ranks" and sql.lstrip().startswith("DELETE"):
        return  # deletes only a stored rank its families moved (none stored here): the other families never
    assert written(list(families.ALL), table, sql) > 0, "writes nothing even with every family: no check"
    assert written(others, table, sql) == 0


def test_the_statements_that_read_no_samples_always_run() -> None:
    always = [sql for _, sql in statements() if families_read(sql) is None]
    assert len(always) == 2 and all("fleet_d" not in sql for sql in always)
