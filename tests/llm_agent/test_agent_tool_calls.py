"""Issue 11, item 4: a prompt-injected model sends malformed tool calls through the real `openai` client (the
scripted OpenAI-protocol server on loopback). Every bad call is answered with a tool error naming what was
wrong; the chat answers, and the same session answers the next question. None of these may raise."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from aiops.agent.config import AgentConfig, Limits
from aiops.agent.session import open_session
from guardrails.actions import Action
from tests.agent_fakes import final, scripted_llm, tiny_demo_db

BIG = "9" * 400  # a 400-digit number
HUGE = "9" * 5000  # past Python's int digit limit (int() raises ValueError)
DEPTH_BOMB = "[" * 5000 + "]" * 5000  # json.loads raises RecursionError
FAN = {"kind": "set_fan_speed", "target": "node1"}
CAP_400 = (
    '{"action": {"kind": "set_power_limit", "target": "node1/gpu1", "parameters": {"power_limit_w": '
    + BIG
    + "}}}"
)


def _call(call_id: str, name: Any, arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _turn(*calls: dict[str, Any]) -> dict[str, Any]:
    return {"message": {"role": "assistant", "content": None, "tool_calls": list(calls)}}


# (call id, tool name, raw arguments as the wire carries them, what the tool error must say)
SHAPES: list[tuple[str, str, Any, str]] = [
    ("list_for_string", "sql", json.dumps({"query": ["SELECT 1"]}), "query: Input should be a valid string"),
    ("scope_number", "power_allocation", json.dumps({"budget_kw": 10, "scope": 5}), "scope"),
    ("horizon_text", "thermal_advice", json.dumps({"horizon_s": "abc"}), "horizon_s"),
    ("missing_argument", "sql", "{}", "query: Field required"),
    ("not_json", "sql", '{"query": ', "arguments are not JSON"),
    ("json_not_object", "sql", '["SELECT 1"]', "must be a JSON object, got list"),
    ("digits_400", "power_allocation", '{"budget_kw": ' + BIG + "}", "budget_kw"),
    ("digits_5000", "power_allocation", '{"budget_kw": ' + HUGE + "}", "budget_kw"),
    ("nan", "thermal_advice", '{"horizon_s": NaN}', "horizon_s"),
    ("infinity", "power_allocation", '{"budget_kw": Infinity}', "budget_kw"),
    ("negative_horizon", "whatif", json.dumps({"action": FAN, "horizon_s": -5}), "horizon_s"),
    ("huge_horizon", "thermal_advice", json.dumps({"horizon_s": 1e12}), "horizon_s"),
    ("depth_bomb", "sql", '{"query": ' + DEPTH_BOMB + "}", "arguments not usable"),
    (
        "nested_parameters",
        "whatif",
        json.dumps({"action": {**FAN, "parameters": {"a": {"b": 1}}}}),
        "parameters.a",
    ),
    ("parameter_400_digits", "whatif", CAP_400, "action.parameters.power_limit_w"),
    (
        "very_long_arguments",
        "sql",
        json.dumps({"query": "SELECT '" + "x" * 20_000 + "'"}),
        "characters (at most",
    ),
    ("long_string_field", "playbook", json.dumps({"label": "a" * 5000}), "label: String should have at most"),
    ("extra_key", "sql", json.dumps({"query": "SELECT 1", "approved": True}), "approved: Extra inputs"),
    ("bool_for_number", "power_allocation", json.dumps({"budget_kw": True}), "budget_kw"),
    (
        "number_for_string",
        "topology",
        json.dumps({"component": 5}),
        "component: Input should be a valid string",
    ),
    ("null_arguments", "hypotheses", None, "incident_id: Field required"),
    ("object_not_string", "sql", {"query": "SELECT 1"}, "arguments must be a JSON object in a string"),
]


def _config(base_url: str, **limits: Any) -> AgentConfig:
    merged = {"max_tool_calls": 64, "max_steps": 64, "max_tokens": 1_000_000, **limits}
    return AgentConfig(base_url=base_url, model="scripted", timeout_s=5.0, limits=Limits(**merged))


def test_malformed_tool_calls_come_back_as_tool_errors_and_the_chat_answers(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    script = [_turn(_call(cid, name, raw)) for cid, name, raw, _ in SHAPES]
    # duplicate call ids in one turn: the first runs, the second is refused
    script.append(_turn(_call("dup", "incidents", "{}"), _call("dup", "incidents", "{}")))
    script.append(final("the model gave up", claims=[], proposals=[]))
    script.append(final("second question answered"))
    with scripted_llm(script) as llm, open_session(db, config=_config(llm.base_url)) as session:
        reply = session.ask("what is wrong?", "alice")
        tool_messages = [m for m in llm.requests[len(SHAPES) + 1]["body"]["messages"] if m["role"] == "tool"]
        log = [e["payload"] for e in session.journal.entries("tool_call")]
        again = session.ask("and now?", "alice")
    assert len(SHAPES) >= 16
    assert reply.source == "llm" and reply.answer == "the model gave up" and not reply.failures
    assert len(tool_messages) == len(SHAPES) + 2
    for (cid, _, _, expected), message in zip(SHAPES, tool_messages, strict=False):
        content = json.loads(message["content"])
        assert message["tool_call_id"] == cid
        assert set(content) == {"error"} and expected in content["error"], (cid, content)
    first, second = (json.loads(m["content"]) for m in tool_messages[-2:])
    assert "incidents" in first and "duplicate tool call id 'dup'" in second["error"]
    assert [e["ok"] for e in log] == [False] * len(SHAPES) + [True, False]
    assert again.answer == "second question answered" and not again.failures


def test_unknown_or_empty_tool_names_end_the_investigation_with_the_analysts_answer(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    script = [
        _turn(_call("c1", "approve_everything", "{}")),
        _turn(_call("c2", "", "{}")),
        _turn(_call("c3", None, "{}")),
        final("fine"),
    ]
    with scripted_llm(script) as llm, open_session(db, config=_config(llm.base_url)) as session:
        replies = [session.ask("what is wrong?") for _ in range(3)]
        last = session.ask("what is wrong?")
    for reply, name in zip(replies, ("approve_everything", "<empty>", "<NoneType>"), strict=True):
        assert reply.source == "analyst" and f"unknown tool '{name}'" in reply.failures[0]
        assert "Top hypothesis" in reply.answer
    assert last.source == "llm" and last.answer == "fine"


def test_a_400_digit_power_limit_is_refused_before_arithmetic(tmp_path: Path) -> None:
    """Proposed in the final answer: read as `inf` (JSON integers past 18 digits are floats), the proposal is
    denied by the envelope rule, with the reason; no OverflowError in the guardrail node. Given as a Python int,
    the action itself refuses it."""
    with pytest.raises(ValidationError, match="power_limit_w is beyond"):
        Action(
            proposal_id="P-1",
            kind="set_power_limit",
            target="node1/gpu1",
            parameters={"power_limit_w": int(BIG)},
            proposed_by="llm",
            created_ts_s=0.0,
        )
    db, _ = tiny_demo_db(tmp_path)
    body = (
        '{"answer": "cap it", "claims": [], "proposals": [{"kind": "set_power_limit", "target": "node1/gpu1", '
        '"parameters": {"power_limit_w": ' + BIG + '}, "reason": "x"}]}'
    )
    script = [{"message": {"role": "assistant", "content": body}}]
    with scripted_llm(script) as llm, open_session(db, config=_config(llm.base_url)) as session:
        reply = session.ask("node1/gpu1 is hot, what should we do?")
    assert reply.source == "llm" and not reply.failures
    [proposal] = reply.proposals
    assert proposal["status"] == "denied" and "power_limit_w must be finite" in proposal["reasons"][0]


def test_hostile_final_answers_never_crash_the_chat(tmp_path: Path) -> None:
    """A final answer nested past the stack is not the structured answer: the analyst's answer and proposals
    stay, the model's text is marked unverifiable. One with a 5000-digit number parses (the number is `inf`)."""
    db, _ = tiny_demo_db(tmp_path)
    bodies = [
        '{"answer": "x", "claims": ' + DEPTH_BOMB + "}",
        '{"answer": "y", "claims": [], "n": ' + HUGE + "}",
    ]
    script = [{"message": {"role": "assistant", "content": b}} for b in bodies]
    with scripted_llm(script) as llm, open_session(db, config=_config(llm.base_url)) as session:
        bomb, digits = (session.ask("what is wrong?") for _ in bodies)
    assert bomb.source == "analyst" and not bomb.failures and "Top hypothesis" in bomb.answer
    assert bomb.claims[-1].status == "unverifiable" and bomb.claims[-1].text.startswith('{"answer"')
    assert {p["kind"] for p in bomb.proposals} >= {"set_power_limit"}
    assert digits.source == "llm" and digits.answer == "y" and not digits.failures
