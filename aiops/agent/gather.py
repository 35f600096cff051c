"""The LLM's investigation loop: turns and tool calls within the per-question limits, every turn, call and
result journaled. Any failure (timeout, HTTP error, malformed output, an unknown tool, a spent budget) ends the
loop with an `LLMFailure`; the graph then lets the analyst's answer stand and shows the failure.

A bad tool call (arguments that are not JSON, not an object, of the wrong type or out of bounds, a repeated
call id) is answered with the tool error as the tool's result, and the model may try again within its
budget. A tool result is kept in the conversation up to `MAX_RESULT_CHARS`, and in the tool log (journal,
checkpoint) up to `record_max_bytes` of JSON."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from aiops.agent.config import Limits
from aiops.agent.journal import bounded
from aiops.agent.llm import ToolCall
from aiops.agent.ports import Chat, Journal
from aiops.agent.prompts import SYSTEM_PROMPT, first_message, parse_final
from aiops.agent.tools import TOOL_NAMES, TOOL_SPECS, ToolBox
from aiops.errors import AiopsError, LLMFailure, ToolError, UnknownTool

MAX_RESULT_CHARS = 12_000  # what one tool result may add to the conversation


@dataclass
class Investigation:
    draft: dict[str, Any] | None = None
    plain_text: str = ""  # a final reply that was not the JSON the prompt asks for
    plain_note: str = ""  # why, when it is not the usual reason
    tool_log: list[dict[str, Any]] = field(default_factory=list)
    turns: int = 0
    tool_calls: int = 0
    tokens: int = 0
    failure: str = ""

    def usage(self) -> dict[str, int]:
        return {"turns": self.turns, "tool_calls": self.tool_calls, "tokens": self.tokens}


def investigate(
    llm: Chat,
    tools: ToolBox,
    journal: Journal,
    limits: Limits,
    question: str,
    incidents: list[dict[str, Any]],
    thread_id: str,
) -> Investigation:
    out = Investigation()
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": first_message(question, incidents)},
    ]
    try:
        _loop(llm, tools, journal, limits, messages, out, thread_id)
    except LLMFailure as exc:
        out.failure = str(exc)
        journal.record(
            "llm_failure", {"kind": exc.kind, "detail": exc.detail, **out.usage()}, thread_id=thread_id
        )
    return out


def _loop(
    llm: Chat,
    tools: ToolBox,
    journal: Journal,
    limits: Limits,
    messages: list[dict[str, Any]],
    out: Investigation,
    thread_id: str,
) -> None:
    while True:
        if out.turns >= limits.max_steps:
            raise LLMFailure("limit", f"no final answer within {limits.max_steps} LLM turns")
        if out.tokens >= limits.max_tokens:
            raise LLMFailure("limit", f"token budget spent ({out.tokens} of {limits.max_tokens})")
        turn = llm.chat(messages, TOOL_SPECS)
        out.turns += 1
        out.tokens += turn.tokens
        journal.record(
            "llm_turn",
            {"request_tail": messages[-1], "reply": turn.as_message(), "tokens": turn.tokens},
            thread_id=thread_id,
        )
        if not turn.tool_calls:
            if turn.finish_reason == "length":  # cut at max_tokens: whatever it holds is not the answer
                out.plain_text = turn.content.strip() or "(nothing)"
                out.plain_note = "the model's reply was cut at max_tokens: not an answer, unverified"
                return
            out.draft = parse_final(turn.content)
            if out.draft is None:
                out.plain_text = turn.content.strip()
            return
        messages.append(turn.as_message())
        for call in turn.tool_calls:
            if out.tool_calls >= limits.max_tool_calls:
                raise LLMFailure("limit", f"tool-call budget spent ({limits.max_tool_calls} calls)")
            out.tool_calls += 1
            seen = {e["call_id"] for e in out.tool_log}
            result, ok = _run(tools, call, seen, journal, thread_id)
            entry = {
                "call_id": call.call_id,
                "name": call.name,
                "arguments": call.arguments if ok or not call.error else {"raw": call.raw_arguments[:500]},
                "ok": ok,
                "result": bounded(result, limits.record_max_bytes),
            }
            out.tool_log.append(entry)
            journal.record("tool_call", entry, thread_id=thread_id)
            text = json.dumps(result, default=str)
            if len(text) > MAX_RESULT_CHARS:
                text = text[:MAX_RESULT_CHARS] + "…(truncated)"
            messages.append({"role": "tool", "tool_call_id": call.call_id, "content": text})


def _run(
    tools: ToolBox, call: ToolCall, seen: set[str], journal: Journal, thread_id: str
) -> tuple[dict[str, Any], bool]:
    """(result, ok) of one call; a bad call's result is its error. An unknown tool ends the investigation."""
    if call.name not in TOOL_NAMES:
        exc = UnknownTool(call.name, TOOL_NAMES)
        journal.record(
            "tool_call",
            {
                "call_id": call.call_id,
                "name": call.name,
                "arguments": {"raw": call.raw_arguments[:500]},
                "error": str(exc),
            },
            thread_id=thread_id,
        )
        raise LLMFailure("unknown_tool", str(exc))
    if call.call_id in seen:
        return {
            "error": f"duplicate tool call id '{call.call_id}': not run; give each call its own id"
        }, False
    if call.error:
        return {"error": call.error}, False
    try:
        return tools.call(call.name, call.arguments), True
    except ToolError as exc:
        return {"error": str(exc)}, False
    except AiopsError as exc:  # a tool's own refusal (no telemetry, a workspace busy): the model is told
        return {"error": f"{call.name}: {exc}"}, False
