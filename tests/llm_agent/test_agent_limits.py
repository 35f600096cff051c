"""Issue 11, item 4: the SQL time limit cancels the query, results and stored turns are limited in bytes, and
claim re-verification counts against the answer's budget."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path
from typing import Any

import duckdb
import pytest

from aiops.agent.config import AgentConfig, Limits
from aiops.agent.grounding import Citation, Claim, verify_claims
from aiops.agent.session import open_session
from aiops.agent.sqltool import ReadOnlySQL
from aiops.errors import SQLRejected
from aiops.store import Workspace
from tests.agent_fakes import final, scripted_llm, tiny_demo_db, tool_call

SLOW = "SELECT list(range(30000000)) AS x"  # one huge value in one vector: DuckDB's interrupt never sees it
# 3x the 1 s limit: generous for a loaded 2-core CI machine (the kill itself comes at the limit, measured 1.1 s).
# The code before this issue let this query run 5 s against a 1 s limit (22.7 s against 5 s).
CANCEL_BOUND_S = 3.0


def _config(base_url: str, **limits: Any) -> AgentConfig:
    return AgentConfig(base_url=base_url, model="scripted", timeout_s=5.0, limits=Limits(**limits))


def test_sql_time_limit_cancels_a_query_duckdb_cannot_interrupt(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    sql = ReadOnlySQL(Workspace(db), timeout_s=1.0)
    try:
        assert sql.run("SELECT 1 AS one")["rows"] == [{"one": 1}]  # the worker is up: its start is not timed
        worker = getattr(sql, "_worker", None)
        start_s = time.monotonic()
        with pytest.raises(SQLRejected, match="exceeded 1 s and was cancelled"):
            sql.run(SLOW)
        elapsed_s = time.monotonic() - start_s
        assert elapsed_s < CANCEL_BOUND_S, f"cancelled after {elapsed_s:.1f} s"
        # cancelled, not abandoned: the process that ran it is gone, and the next query runs at once
        assert worker is not None and worker.process.poll() is not None
        with pytest.raises(ProcessLookupError):
            os.kill(worker.process.pid, 0)
        assert sql.run("SELECT 2 AS two")["rows"] == [{"two": 2}]
    finally:
        sql.close()


def test_sql_results_are_limited_in_bytes_not_only_rows(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    sql = ReadOnlySQL(Workspace(db), max_rows=200, max_bytes=4096)
    try:
        wide = sql.run("SELECT repeat('x', 1000) AS s FROM range(100)")
        one = sql.run("SELECT range(100000) AS r")
    finally:
        sql.close()
    assert wide["truncated"] and wide["limit"] == "bytes" and 0 < len(wide["rows"]) < 5
    assert len(json.dumps(wide["rows"])) <= 4096
    assert one["truncated"] and one["limit"] == "bytes" and one["rows"] == []


def _table_bytes(db: Path, sql: str) -> int:
    with duckdb.connect(str(db), read_only=True) as conn:
        row = conn.execute(sql).fetchone()
    return int(row[0] or 0) if row else 0


def test_three_huge_tool_results_store_under_the_bound(tmp_path: Path) -> None:
    """Three SQL calls of 4 MB each (the SQL byte limit raised so that only the record bound holds): the
    journal, the audit log and the checkpoint each keep at most `record_max_bytes` per call (+ overhead).
    Before this issue the same calls stored 3 x 4 MB in each."""
    db, _ = tiny_demo_db(tmp_path)
    huge = "SELECT repeat('x', 4000000) AS s"
    script = [tool_call("sql", {"query": huge}, f"h{i}") for i in range(3)] + [final("done")]
    record_max_bytes = 65_536
    limits = {"sql_max_bytes": 8 * 1024 * 1024, "record_max_bytes": record_max_bytes}
    checkpoints = Path(str(db) + ".checkpoints.sqlite")
    with scripted_llm(script) as llm, open_session(db, config=_config(llm.base_url, **limits)) as session:
        reply = session.ask("what is wrong?")
        sent = [m for m in llm.requests[-1]["body"]["messages"] if m["role"] == "tool"]
    assert reply.answer == "done" and len(sent) == 3
    bound_bytes = (
        3 * 2 * record_max_bytes
    )  # three calls, twice the record bound for the turn records around them
    journal_bytes = _table_bytes(db, "SELECT sum(strlen(CAST(payload AS VARCHAR))) FROM agent_log")
    audit_bytes = _table_bytes(db, "SELECT sum(strlen(CAST(payload AS VARCHAR))) FROM audit_log")
    assert journal_bytes < bound_bytes, journal_bytes
    assert audit_bytes < bound_bytes + 200_000, audit_bytes  # + the demo's own audit rows
    with sqlite3.connect(str(checkpoints)) as conn:
        stored = conn.execute("SELECT sum(length(checkpoint)) FROM checkpoints").fetchone()[0]
        writes = conn.execute("SELECT sum(length(value)) FROM writes").fetchone()[0] or 0
    assert stored + writes < 4 * 1024 * 1024, (stored, writes)  # one 4 MB result would not fit
    assert checkpoints.stat().st_size < 8 * 1024 * 1024


class _CountingSQL:
    def __init__(self) -> None:
        self.runs = 0

    def run(self, sql: str, params: list[Any] | None = None) -> dict[str, Any]:
        self.runs += 1
        return {"columns": ["n"], "rows": [{"n": 1}], "truncated": False, "limit": ""}


def test_claim_reverification_is_capped_in_count_and_time() -> None:
    claims = [Claim(text="n is 1", citation=Citation(sql="SELECT 1 AS n", values=[{"n": 1}]))] * 30
    sql = _CountingSQL()
    checked = verify_claims(claims, sql, max_claims=12, budget_s=1000.0)  # type: ignore[arg-type]
    assert sql.runs == 12 and [c.status for c in checked[:12]] == ["verified"] * 12
    assert all(c.status == "unverifiable" and "at most 12 claims" in c.note for c in checked[12:])
    now = [0.0]

    def clock() -> float:
        now[0] += 4.0  # every look at the clock: 4 s later
        return now[0]

    timed = _CountingSQL()
    checked = verify_claims(claims, timed, max_claims=100, budget_s=15.0, clock=clock)  # type: ignore[arg-type]
    assert 0 < timed.runs < 5 and checked[timed.runs].status == "unverifiable"
    assert "15 s verification budget is spent" in checked[-1].note


def test_slow_cited_claims_stay_within_the_turns_budget(tmp_path: Path) -> None:
    """Twelve claims citing a slow query: before this issue each re-ran to its end (65 s for 12 claims)."""
    db, _ = tiny_demo_db(tmp_path)
    claims = [{"text": f"claim {i}", "sql": SLOW, "values": []} for i in range(12)]
    limits = {"sql_timeout_s": 1.0, "verify_budget_s": 2.0}
    with (
        scripted_llm([final("slow", claims=claims)]) as llm,
        open_session(db, config=_config(llm.base_url, **limits)) as session,
    ):
        session.sql.run("SELECT 1")  # start the worker outside the timed part
        start_s = time.monotonic()
        reply = session.ask("what is wrong?")
        elapsed_s = time.monotonic() - start_s
    assert elapsed_s < 15.0, f"{elapsed_s:.1f} s"
    # the model's twelve claims come first; the analyst's own evidence follows them (issue 23: a counted model
    # answer never hides it), verified from its stored rows, not re-run within the model's budget
    model = reply.claims[: len(claims)]
    assert [c.text for c in model] == [c["text"] for c in claims]
    assert sum("budget is spent" in c.note for c in model) >= 8
    assert all(c.status == "unverifiable" for c in model)
