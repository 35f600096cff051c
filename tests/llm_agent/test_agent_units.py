"""Pure parts of the agent: the SELECT-only SQL guard with limits, grounding checks, config, answer parsing."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.agent.asof import tables_of, versions
from aiops.agent.config import agent_config_of
from aiops.agent.grounding import Citation, Claim, numbers_in, verified_citation_rate, verify_claim
from aiops.agent.prompts import parse_final
from aiops.agent.sqltool import ReadOnlySQL
from aiops.config import load_config
from aiops.errors import ConfigError, SQLRejected
from aiops.store import Workspace


@pytest.fixture
def sql(tmp_path: Path) -> ReadOnlySQL:
    workspace = Workspace(tmp_path / "t.duckdb")
    with workspace.write() as store:
        store.conn.execute(
            "CREATE TABLE samples AS SELECT range AS i, 60.0 + range / 10 AS temp_c FROM range(500)"
        )
        store.conn.execute(
            "INSERT INTO sim_runs (ts_s, scenario_name, scenario_yaml, simulated_s, format_version) "
            "VALUES (0, 'secret', 'faults: [the answer]', 600, 1)"
        )
    return ReadOnlySQL(workspace, max_rows=5, timeout_s=3.0)  # a busy machine starts the worker slowly


@pytest.mark.parametrize(
    ("query", "why"),
    [
        ("DELETE FROM samples", "only SELECT"),
        ("SELECT 1; DROP TABLE samples", "exactly one statement"),
        ("COPY samples TO '/tmp/x.csv'", "only SELECT"),
        ("SELECT scenario_yaml FROM sim_runs", "not telemetry"),
        ('SELECT * FROM main."SIM_RUNS"', "not telemetry"),
        ("SELECT (SELECT count(*) FROM twin_log) AS n", "not telemetry"),
        ("SELECT * FROM query_table('sim' || '_runs')", "query_table"),
        ("SELECT * FROM QUERY ('SELECT * FROM sim_runs')", "query"),
        ("ATTACH '/tmp/other.duckdb' AS o", "only SELECT"),
        ("SELECT * FROM read_csv('/etc/passwd')", "disabled by configuration"),
        ("SELEC 1", "not valid SQL"),
    ],
)
def test_sql_guard_rejects_everything_but_one_select(sql: ReadOnlySQL, query: str, why: str) -> None:
    with pytest.raises(SQLRejected, match=why):
        sql.run(query)
    assert sql.run("SELECT count(*) AS n FROM samples")["rows"] == [{"n": 500}]


def test_sql_limits_rows_and_time(sql: ReadOnlySQL) -> None:
    result = sql.run("SELECT i FROM samples ORDER BY i")
    assert [r["i"] for r in result["rows"]] == [0, 1, 2, 3, 4] and result["truncated"]
    with pytest.raises(SQLRejected, match=r"exceeded 3 s"):
        sql.run("SELECT count(*) FROM range(100000000000) a WHERE a.range % 7 = 3")


def test_numbers_in_text_skip_identifiers_and_keep_units() -> None:
    found = numbers_in("node3/gpu5 (INC-0001) hit 88.4 °C at 12:04 over 1,234 samples, 610W, rack1")
    assert found == [(88.4, 1), (1234.0, 0), (610.0, 0)]


def test_claims_are_verified_against_a_rerun(sql: ReadOnlySQL) -> None:
    query = "SELECT max(temp_c) AS max_temp_c FROM samples"
    good = verify_claim(
        Claim(
            text="the hottest sample was 109.9 °C",
            citation=Citation(sql=query, values=[{"max_temp_c": 109.9}]),
        ),
        sql,
    )
    rounded = verify_claim(Claim(text="about 110 °C", citation=Citation(sql=query, values=[110])), sql)
    wrong_value = verify_claim(
        Claim(text="hot", citation=Citation(sql=query, values=[{"max_temp_c": 95.0}])), sql
    )
    wrong_text = verify_claim(
        Claim(text="it hit 120 °C", citation=Citation(sql=query, values=[{"max_temp_c": 109.9}])), sql
    )
    broken = verify_claim(Claim(text="x", citation=Citation(sql="DROP TABLE samples")), sql)
    bare = verify_claim(Claim(text="the fan failed"), sql)
    assert [c.status for c in (good, rounded, wrong_value, wrong_text, broken, bare)] == [
        "verified",
        "verified",
        "mismatch",
        "mismatch",
        "unverifiable",
        "unverifiable",
    ]
    assert "120" in wrong_text.note and "no citation" in bare.note
    assert verified_citation_rate([good, rounded, wrong_value, bare]) == 0.5
    assert verified_citation_rate([]) == 0.0


def test_a_mismatch_is_one_only_while_the_data_is_as_it_was(sql: ReadOnlySQL) -> None:
    """Issue 38: a claim's data that moved on since the answer (its table's version, taken with its rows) is no
    mismatch; the same wrong rows over unchanged data are; a window following the wall clock says so."""
    query = "SELECT max(temp_c) AS max_temp_c FROM samples"
    wrong = Claim(text="hot", citation=Citation(sql=query, values=[{"max_temp_c": 95.0}]))
    with sql.workspace.read() as store:
        now = versions(lambda q: store.query(q), tables_of(query))
    assert now == {"samples": now["samples"]} and now["samples"].startswith("500:")
    same = verify_claim(wrong.model_copy(update={"as_of": now}), sql)
    assert same.status == "mismatch", same.note
    changed = verify_claim(wrong.model_copy(update={"as_of": {"samples": "499:123"}}), sql)
    assert (
        changed.status == "unverifiable"
        and "the data changed since the answer (samples: 499 -> 500 rows)" in (changed.note)
    )
    clock = Claim(
        text="x", citation=Citation(sql=f"{query} WHERE i < epoch(now())", values=[{"max_temp_c": 1.0}])
    )
    assert "follows the wall clock" in verify_claim(clock, sql).note


def test_config_environment_overrides_the_file(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[llm]\nbase_url = "http://file/v1"\nmodel = "file-model"\nmax_tool_calls = 3\n')
    from_file = agent_config_of(load_config(None, {"AIOPS_CONFIG": str(path)}), {})
    assert (from_file.base_url, from_file.model, from_file.limits.max_tool_calls) == (
        "http://file/v1",
        "file-model",
        3,
    )
    env = {"AIOPS_CONFIG": str(path), "AIOPS_LLM_MODEL": "env-model", "OPENAI_API_KEY": "k"}
    both = agent_config_of(load_config(None, env), env)
    assert (both.base_url, both.model, both.api_key) == ("http://file/v1", "env-model", "k") and both.online
    with pytest.raises(ConfigError, match=r"none.toml: field '\(file\)': no such file"):
        load_config(
            None, {"AIOPS_CONFIG": str(tmp_path / "none.toml")}
        )  # a named file that is missing is an error
    path.write_text('[llm]\nmodle = "typo"\n')
    with pytest.raises(ConfigError, match=r"field 'llm.modle': unknown key \(allowed: api_key, base_url"):
        load_config(None, {"AIOPS_CONFIG": str(path)})


def test_final_answer_parsing() -> None:
    assert parse_final('```json\n{"answer": "ok", "claims": []}\n```') == {
        "answer": "ok",
        "claims": [],
        "hypotheses": [],
        "proposals": [],
    }
    assert (
        parse_final('Here: {"answer": "x", "proposals": []}') is not None
    )  # prose before the object is fine
    assert parse_final('Here: {"answer": "x", "proposals": "all"}') is None  # the schema is strict
    assert parse_final("just text") is None
    assert parse_final('{"answer": 3}') is None


def test_the_sql_tool_names_tables_that_exist_and_claims_may_cite_the_workload_tables(tmp_path: Path) -> None:
    """The model is told which tables to read: each one named in the tool's description exists in a new
    workspace, and the per-process and per-rank tables are telemetry a claim may cite."""
    import re

    from aiops.agent.tools import TOOL_SPECS
    from aiops.agent.verify import TELEMETRY_TABLES

    spec = next(s for s in TOOL_SPECS if s["function"]["name"] == "sql")
    listed = re.search(r"\(tables: (.*?)\)\. ", spec["function"]["description"])
    assert listed is not None
    named = {re.sub(r" \(.*", "", part).strip() for part in re.split(r", (?![^(]*\))", listed.group(1))}
    with Workspace(tmp_path / "w.duckdb").write() as store:
        present = {r["table_name"] for r in store.query("SELECT table_name FROM information_schema.tables")}
    assert named <= present, named - present
    assert {"gpu_processes", "rank_timing_samples"} <= TELEMETRY_TABLES <= present
