"""The agent against a scripted OpenAI-protocol server (the real `openai` client over 127.0.0.1): a grounded
investigation with tool calls, and every way the endpoint can fail leaving the analyst's answer standing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pytest

from aiops.agent.config import AgentConfig, Limits
from aiops.agent.session import open_session
from tests.agent_fakes import (
    final,
    http_error,
    raw_body,
    scripted_llm,
    stall,
    text,
    tiny_demo_db,
    tool_call,
)

MAX_TEMP_SQL = "SELECT gpu, max(temp_c) AS max_temp_c FROM gpu_samples WHERE gpu = 'node1/gpu1' GROUP BY gpu"


def _config(base_url: str, **limits: Any) -> AgentConfig:
    return AgentConfig(
        base_url=base_url, model="scripted", api_key="test-key", timeout_s=1.0, limits=Limits(**limits)
    )


def _max_temp(db: Path) -> float:
    with duckdb.connect(str(db), read_only=True) as conn:
        row = conn.execute(MAX_TEMP_SQL).fetchone()
    assert row is not None
    return float(row[1])


def test_investigation_with_tool_calls_ends_in_a_grounded_answer(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    hottest = _max_temp(db)
    script = [
        tool_call("sql", {"query": MAX_TEMP_SQL}, "call_1"),
        tool_call("hypotheses", {"incident_id": "INC-0001"}, "call_2"),
        final(
            f"node1/gpu1 overheats ({hottest:.0f} °C) and throttles; cap its power while the fan is fixed.",
            claims=[
                {"text": f"node1/gpu1 reached {hottest:.1f} °C", "tool_call_id": "call_1"},
                {
                    "text": "the cluster has 2 nodes",
                    "sql": "SELECT count(*) AS n FROM topology WHERE kind = 'node'",
                    "values": [{"n": 2}],
                },
                {"text": "node1/gpu1 reached 99 °C", "sql": MAX_TEMP_SQL, "values": [{"max_temp_c": 99.0}]},
                {"text": "the fan of node1 failed"},
            ],
            proposals=[
                {
                    "kind": "set_power_limit",
                    "target": "node1/gpu1",
                    "parameters": {"fraction_of_tdp": 0.8},
                    "reason": "cut heat",
                }
            ],
        ),
    ]
    with scripted_llm(script) as llm, open_session(db, config=_config(llm.base_url)) as session:
        reply = session.ask("Why is the llm job slow?", "alice")
        log = session.journal.entries()
    assert reply.source == "llm" and not reply.failures
    assert [c.status for c in reply.claims[:4]] == ["verified", "verified", "mismatch", "unverifiable"]
    analyst = reply.claims[4:]  # the analyst's evidence stays beside the model's answer (issue 23)
    assert analyst and all(not c.check_numbers and c.status == "verified" for c in analyst)
    assert reply.citation_rate == pytest.approx(0.5)
    assert "99" in reply.claims[2].note
    # the real client spoke the protocol: three POSTs, the tools offered, the tool results sent back
    assert [r["path"] for r in llm.requests] == ["/v1/chat/completions"] * 3
    offered = {t["function"]["name"] for t in llm.requests[0]["body"]["tools"]}
    assert offered == {
        "sql",
        "incidents",
        "hypotheses",
        "playbook",
        "topology",
        "thermal_advice",
        "power_allocation",
        "whatif",
    }
    tool_messages = [m for m in llm.requests[2]["body"]["messages"] if m["role"] == "tool"]
    assert [m["tool_call_id"] for m in tool_messages] == ["call_1", "call_2"]
    assert "thermal_throttle" in tool_messages[1]["content"]
    assert str(round(hottest, 1)) in tool_messages[0]["content"]
    # every turn and tool call journaled; the proposal waits for a person
    kinds = [e["kind"] for e in log]
    assert kinds.count("llm_turn") == 3 and kinds.count("tool_call") == 2
    assert [p["status"] for p in reply.proposals if p["source"] == "llm"] == ["pending"] and reply.waiting
    # and the analyst's playbook actions, never hidden by the model's answer (issue 23)
    assert [p for p in reply.proposals if p["source"] == "analyst"]


def test_a_rejected_sql_goes_back_to_the_model_as_the_tool_result(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    script = [
        tool_call("sql", {"query": "DELETE FROM gpu_samples"}, "c1"),
        tool_call("sql", {"query": "SELECT * FROM read_csv('/etc/passwd')"}, "c2"),
        final("nothing to add"),
    ]
    with scripted_llm(script) as llm, open_session(db, config=_config(llm.base_url)) as session:
        reply = session.ask("what is wrong?")
        rows = session.sql.run("SELECT count(*) AS n FROM gpu_samples")["rows"]
    tool_messages = [m["content"] for m in llm.requests[-1]["body"]["messages"] if m["role"] == "tool"]
    assert "only SELECT" in tool_messages[0]
    assert "disabled by configuration" in tool_messages[1]
    assert rows[0]["n"] > 0 and reply.source == "llm"


FAILURES = [
    ("timeout", [stall(3.0)], "timeout"),
    ("http_500", [http_error(500)], "HTTP 500"),
    ("malformed_json", [raw_body(b'{"choices": [ this is not json')], "malformed"),
    ("unknown_tool", [tool_call("approve_all_actions", {})], "unknown tool 'approve_all_actions'"),
    ("no_choices", [raw_body(b'{"id": "x", "object": "chat.completion", "choices": []}')], "no choices"),
]


@pytest.mark.parametrize(("name", "script", "shown"), FAILURES, ids=[f[0] for f in FAILURES])
def test_endpoint_failures_leave_the_analysts_answer_standing(
    tmp_path: Path, name: str, script: list[dict[str, Any]], shown: str
) -> None:
    db, _ = tiny_demo_db(tmp_path)
    with scripted_llm(script) as llm, open_session(db, config=_config(llm.base_url)) as session:
        reply = session.ask("What is wrong with the cluster?")
        failures = session.journal.entries("llm_failure")
        executions = session.journal.entries("execution")
    assert reply.source == "analyst"
    assert "Top hypothesis: thermal_throttle on node1/gpu1" in reply.answer
    assert len(reply.failures) == 1 and shown in reply.failures[0]
    assert len(failures) == 1 and failures[0]["payload"]["detail"]
    assert all(c.status == "verified" for c in reply.claims) and reply.claims
    # the analyst's playbook actions are proposed, and none ran
    assert {p["kind"] for p in reply.proposals} >= {"set_power_limit"}
    assert executions == [] and all(p["status"] == "pending" for p in reply.proposals)


def test_tool_call_budget_is_enforced(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    script = [tool_call("incidents", {}, "a"), tool_call("incidents", {}, "b"), final("done")]
    with (
        scripted_llm(script) as llm,
        open_session(db, config=_config(llm.base_url, max_tool_calls=1)) as session,
    ):
        reply = session.ask("what is wrong?")
    assert reply.source == "analyst" and "tool-call budget" in reply.failures[0]
    assert len(llm.requests) == 2


def test_plain_text_reply_is_shown_but_marked_unverifiable(tmp_path: Path) -> None:
    """An unverifiable answer never replaces the analyst's: its answer and proposals stay, the model's text is
    shown after the analyst's claims, marked unverifiable."""
    db, _ = tiny_demo_db(tmp_path)
    with (
        scripted_llm([text("The GPU is hot.")]) as llm,
        open_session(db, config=_config(llm.base_url)) as session,
    ):
        reply = session.ask("what is wrong?")
    assert reply.source == "analyst" and "Top hypothesis: thermal_throttle on node1/gpu1" in reply.answer
    model = reply.claims[-1]
    assert model.text == "The GPU is hot." and model.status == "unverifiable" and "model" in model.note
    assert all(c.status == "verified" for c in reply.claims[:-1]) and reply.claims[:-1]
    assert {p["kind"] for p in reply.proposals} >= {"set_power_limit"}
    assert all(p["source"] == "analyst" and p["status"] == "pending" for p in reply.proposals)
