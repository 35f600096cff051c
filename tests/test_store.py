from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

import aiops.store.store as store_module
from aiops.errors import DatabaseDamaged, IngestError, SchemaError
from aiops.store import MIGRATIONS, Store, latest_version, template
from aiops.store.migrations import Migration, apply_migrations


def test_migrations_apply_once_and_record_version(tmp_path: Path) -> None:
    path = tmp_path / "t.duckdb"
    with Store(path) as s:
        assert s.schema_version() == latest_version()
        s.ingest("rack_samples", {"ts_s": [1.0], "rack": ["rack0"], "inlet_temp_c": [24.5]})
    with Store(path) as s:  # reopening applies nothing and keeps the data; each migration recorded once
        versions = [r["version"] for r in s.query("SELECT version FROM schema_migrations ORDER BY 1")]
        assert versions == [m.version for m in MIGRATIONS]  # numbers may have gaps while branches merge
        assert s.scalar("SELECT inlet_temp_c FROM rack_samples") == 24.5


def test_a_migration_missing_below_the_newest_still_runs(tmp_path: Path) -> None:
    """Migrations are a set: a file that recorded a later one but lacks an earlier one gets it."""
    path = tmp_path / "gap.duckdb"
    Store(path).close()
    conn = duckdb.connect(str(path))
    conn.execute("DELETE FROM schema_migrations WHERE version = 4")
    conn.execute("DROP TABLE agent_log")
    conn.close()
    with Store(path) as s:
        assert s.scalar("SELECT count(*) FROM agent_log") == 0
        assert s.scalar("SELECT count(*) FROM schema_migrations") == len(MIGRATIONS)


def test_newer_schema_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "newer.duckdb"
    Store(path).close()
    conn = duckdb.connect(str(path))
    conn.execute("INSERT INTO schema_migrations VALUES (999, 'future', 0)")
    conn.close()
    with pytest.raises(SchemaError, match="newer than this aiops understands"):
        Store(path)


def test_ingest_arrow_batch_fills_missing_columns_with_null(store: Store) -> None:
    batch = pa.table(
        {
            "ts_s": [1.0, 2.0],
            "gpu": ["node0/gpu0", "node0/gpu1"],
            "node": ["node0", "node0"],
            "temp_c": [60.0, 61.0],
        }
    )
    assert store.ingest("gpu_samples", batch) == 2
    rows = store.query("SELECT gpu, temp_c, power_w FROM gpu_samples ORDER BY gpu")
    assert rows == [
        {"gpu": "node0/gpu0", "temp_c": 60.0, "power_w": None},
        {"gpu": "node0/gpu1", "temp_c": 61.0, "power_w": None},
    ]


def test_ingest_rejects_unknown_table_and_column_without_losing_rows(store: Store) -> None:
    store.ingest("rack_samples", {"ts_s": [1.0], "rack": ["rack0"]})
    with pytest.raises(IngestError, match="unknown table 'nope'"):
        store.ingest("nope", {"ts_s": [1.0]})
    with pytest.raises(IngestError, match="no column"):
        store.ingest_many(
            {
                "rack_samples": {"ts_s": [2.0], "rack": ["rack1"]},
                "host_samples": {"ts_s": [2.0], "node": ["node0"], "bogus": [1]},
            }
        )
    # the failed multi-table batch rolled back entirely; the earlier row is intact
    assert store.scalar("SELECT count(*) FROM rack_samples") == 1


def test_retention_deletes_only_old_rows(store: Store) -> None:
    store.ingest("host_samples", {"ts_s": [100.0, 200.0, 300.0], "node": ["node0"] * 3})
    deleted = store.apply_retention(max_age_s=150.0, now_ts_s=300.0)
    assert deleted["host_samples"] == 1
    assert [r["ts_s"] for r in store.query("SELECT ts_s FROM host_samples ORDER BY ts_s")] == [200.0, 300.0]


def test_not_a_duckdb_file_is_a_schema_error(tmp_path: Path) -> None:
    path = tmp_path / "junk.duckdb"
    path.write_text("this is not a database")
    with pytest.raises(SchemaError, match="cannot open"):
        Store(path)


def test_ingest_after_scalar_on_the_same_table(store: Store) -> None:
    # A scalar() that left its result unfinished made the next ingest fail with DuckDB's ResourceInUse.
    batch = pa.table({"ts_s": [1.0], "gpu": ["node0/gpu0"], "node": ["node0"], "temp_c": [60.0]})
    store.ingest("gpu_samples", batch)
    assert store.scalar("SELECT count(*) FROM gpu_samples") == 1
    store.ingest("gpu_samples", batch.set_column(0, "ts_s", pa.array([2.0])))
    assert store.scalar("SELECT count(*) FROM gpu_samples") == 2


# The catalog a store's schema is: every table (its CREATE statement), column (type, default, nullability, order),
# constraint, index, view, sequence and macro, and the schema history's rows, without the object ids and the
# database's name (a file's is its stem).
CATALOG = {
    "tables": "SELECT schema_name, table_name, temporary, has_primary_key, estimated_size, column_count, index_count, "
    "check_constraint_count, sql FROM duckdb_tables() ORDER BY ALL",
    "columns": "SELECT * EXCLUDE (database_name, database_oid, schema_oid, table_oid) FROM duckdb_columns() "
    "ORDER BY ALL",
    "constraints": "SELECT * EXCLUDE (database_name, database_oid, schema_oid, table_oid) FROM duckdb_constraints() "
    "ORDER BY ALL",
    "indexes": "SELECT * EXCLUDE (database_name, database_oid, schema_oid, table_oid, index_oid) FROM duckdb_indexes() "
    "ORDER BY ALL",
    "views": "SELECT * EXCLUDE (database_name, database_oid, schema_oid, view_oid) FROM duckdb_views() "
    "WHERE NOT internal ORDER BY ALL",
    "sequences": "SELECT * EXCLUDE (database_name, database_oid, schema_oid, sequence_oid) FROM duckdb_sequences() "
    "ORDER BY ALL",
    "macros": "SELECT schema_name, function_name, function_type, parameters, macro_definition FROM duckdb_functions() "
    "WHERE NOT internal ORDER BY ALL",
    "history": "SELECT version, name FROM schema_migrations ORDER BY ALL",
}


def _catalog(conn: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[Any, ...]]]:
    return {name: conn.execute(sql).fetchall() for name, sql in CATALOG.items()}


def _migrated(path: str) -> duckdb.DuckDBPyConnection:
    """A new database migrated in place, as every new store was before the template."""
    conn = duckdb.connect(path)
    apply_migrations(conn, MIGRATIONS, new=True)
    return conn


def _template_built() -> None:
    """The template of MIGRATIONS built in this process: the first ask of a process is answered None (its first new
    store is migrated in place), so a test run alone asks twice."""
    assert template.template(MIGRATIONS) is not None or template.template(MIGRATIONS) is not None


def test_a_store_made_from_the_template_has_a_migrated_stores_schema(tmp_path: Path) -> None:
    """A new store is copied from the process's template (aiops/store/template.py): a file with the template's bytes,
    `:memory:` with COPY FROM DATABASE. Either's catalog is a migrated store's, object for object; a template that
    missed a migration, or COPY dropping a key or a default, fails here."""
    copy = tmp_path / "copy.duckdb"
    _template_built()
    assert template.placed(str(copy), MIGRATIONS)
    memory = duckdb.connect(":memory:")
    assert template.copied_into(memory, MIGRATIONS)
    for copied, migrated in (
        (duckdb.connect(str(copy)), _migrated(str(tmp_path / "migrated.duckdb"))),
        (memory, _migrated(":memory:")),
    ):
        expected = _catalog(migrated)
        assert len(expected["tables"]) > 40 and len(expected["constraints"]) > 200  # not an empty comparison
        assert _catalog(copied) == expected
        copied.close()
        migrated.close()


def test_a_new_store_is_the_template_stamped_when_it_was_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Store() copies the template for a new file and for `:memory:` (nothing left to migrate), and its schema history
    says when this store was made, not when the process built the template."""
    placed: list[bool] = []

    def spy(path: str, migrations: Sequence[Migration]) -> bool:
        placed.append(template_placed(path, migrations))
        return placed[-1]

    template_placed = template.placed
    monkeypatch.setattr(template, "placed", spy)
    _template_built()  # built before: the stamp is the store's own
    time.sleep(0.01)
    made_ts_s = time.time()
    with Store(tmp_path / "new.duckdb") as file_store, Store(":memory:") as memory_store:
        for store in (file_store, memory_store):
            stamps = {r["applied_ts_s"] for r in store.query("SELECT applied_ts_s FROM schema_migrations")}
            assert len(stamps) == 1 and made_ts_s <= stamps.pop() <= time.time()
            assert store.schema_version() == latest_version()
    assert placed == [True]


def test_a_process_that_makes_one_new_store_builds_no_template(tmp_path: Path) -> None:
    """The first new store of a process is migrated in place: a node agent or a command that makes one never pays for
    a template it would not copy; the second is copied from one (a fresh interpreter, so no earlier store counts)."""
    code = (
        "import sys; from aiops.store import Store, template\n"
        "Store(sys.argv[1]).close(); first = dict(template._templates)\n"
        "Store(sys.argv[2]).close(); second = dict(template._templates)\n"
        "print(len(first), sum(p is not None for p in second.values()))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "a.duckdb"), str(tmp_path / "b.duckdb")],
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["0", "1"]


def test_a_killed_process_template_folder_is_removed_by_the_next(tmp_path: Path) -> None:
    """A process killed by a signal never runs its exit, so its template folder stays; the next process of this user
    that builds a template removes it, and keeps a live process's folder and another user's."""
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    two_stores = "from aiops.store import Store\nStore(':memory:').close(); Store(':memory:').close()\n"
    env = {**os.environ, "TMPDIR": str(temporary)}
    killed = subprocess.run(
        [
            sys.executable,
            "-c",
            two_stores + "import os, signal; print(os.getpid(), flush=True); os.kill(os.getpid(), 9)",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL
    (stale,) = [path.name for path in temporary.iterdir()]
    assert stale.startswith(f"aiops-store-template-{int(killed.stdout)}-")
    live = temporary / f"aiops-store-template-{os.getpid()}-livefold"
    live.mkdir()
    kept = [live.name]
    if os.geteuid() == 0:  # only root can give a folder to another user
        dead = subprocess.run(
            [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, check=True
        )
        foreign = temporary / f"aiops-store-template-{int(dead.stdout)}-foreign1"
        foreign.mkdir()
        os.chown(foreign, 65534, 65534)  # another user's: not this user's to remove
        kept.append(foreign.name)
    subprocess.run([sys.executable, "-c", two_stores], env=env, check=True)
    assert sorted(path.name for path in temporary.iterdir()) == sorted(kept)


def test_a_new_file_has_the_mode_duckdb_gives_one(tmp_path: Path) -> None:
    """0666 less the umask, as `duckdb.connect` creates a new file."""
    before = os.umask(0o027)
    try:
        Store(tmp_path / "copied.duckdb").close()
        duckdb.connect(str(tmp_path / "duckdb.duckdb")).close()
    finally:
        os.umask(before)
    modes = {stat.S_IMODE((tmp_path / name).stat().st_mode) for name in ("copied.duckdb", "duckdb.duckdb")}
    assert modes == {0o640}


def test_the_template_never_replaces_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Placed only where nothing is: an existing (even empty) file, a link, a WAL left behind keep the open of before;
    a file made by another process between the look and the link is kept (the link fails, the copy is removed)."""
    empty = tmp_path / "empty.duckdb"
    empty.touch()
    with pytest.raises(SchemaError, match="cannot open"):
        Store(empty)
    assert empty.read_bytes() == b""
    (tmp_path / "link.duckdb").symlink_to(tmp_path / "elsewhere.duckdb")
    (tmp_path / "orphan.duckdb.wal").write_bytes(b"wal")
    for name in ("empty.duckdb", "link.duckdb", "orphan.duckdb"):
        assert not template.placed(str(tmp_path / name), MIGRATIONS)
    raced = tmp_path / "raced.duckdb"
    raced.write_bytes(b"theirs")
    monkeypatch.setattr(template.os.path, "lexists", lambda path: False)  # as if it appeared after the look
    assert not template.placed(str(raced), MIGRATIONS)
    assert raced.read_bytes() == b"theirs"
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "empty.duckdb",
        "link.duckdb",
        "orphan.duckdb.wal",
        "raced.duckdb",
    ]


def test_the_template_follows_the_migration_list(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One template per migration list: a store made while a test narrows MIGRATIONS has those only, and the next one,
    with the list back, has all of them."""
    monkeypatch.setattr(store_module, "MIGRATIONS", MIGRATIONS[:-1])
    with Store(tmp_path / "older.duckdb") as older:
        assert older.schema_version() == MIGRATIONS[-2].version
    monkeypatch.undo()
    with Store(tmp_path / "newer.duckdb") as newer, Store(tmp_path / "older.duckdb") as upgraded:
        assert newer.schema_version() == upgraded.schema_version() == latest_version()


def test_a_file_cut_short_is_damaged_at_open(tmp_path: Path) -> None:
    """A truncated file is refused at open, wherever the cut: DuckDB itself fails only when a query reads a block
    past the end, which an open may never do (a file cut near its end opened, and commands read on)."""
    path = tmp_path / "cut.duckdb"
    with Store(path) as store:
        store.ingest("host_samples", {"ts_s": [float(t) for t in range(10_000)], "node": ["node0"] * 10_000})
    data = path.read_bytes()
    path.write_bytes(data[:-4096])
    with pytest.raises(DatabaseDamaged, match="damaged"):
        Store(path, read_only=True)
    path.write_bytes(data)
    with Store(path, read_only=True) as whole:
        assert whole.scalar("SELECT count(*) FROM host_samples") == 10_000
