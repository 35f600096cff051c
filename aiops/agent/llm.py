"""The one seam to an OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp server).

`LLMClient.chat(messages, tools)` returns a typed `Turn` or raises `LLMFailure`, whose `kind` says what went
wrong (timeout, http, connection, malformed) so the graph can fall back to the analyst and show the failure.
Retries are off: a person is waiting, and the analyst's answer is already there. Every request sets
`max_tokens` to what the endpoint can generate within the timeout (`AgentConfig.request_max_tokens`:
`timeout_s` x `tokens_per_s`, at most `completion_max_tokens`), so a request the client abandons at its
timeout does not keep a local server generating long after the chat gave up.

A tool call whose arguments are not usable (not JSON, not an object, nested too deep, too long, a number
Python will not parse) is kept with its `error`: the graph sends that error back to the model as the tool's
result. Only a reply that is not a chat completion at all is `malformed`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from aiops.agent.config import AgentConfig
from aiops.errors import LLMFailure

FailureKind = Literal["timeout", "http", "connection", "malformed", "unknown_tool", "limit"]

MAX_CONTENT_CHARS = 200_000  # a final answer longer than this is not one
MAX_ARGUMENTS_CHARS = 16_000  # one tool call's arguments, as JSON text
MAX_ARGUMENTS_DEPTH = 16
MAX_TOOL_CALLS_PER_TURN = 32


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str
    error: str = ""  # why the arguments are not usable; the call is answered with it, not run


@dataclass(frozen=True)
class Turn:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    tokens: int = 0
    finish_reason: str = ""  # "length": cut at max_tokens (never a final answer)

    def as_message(self) -> dict[str, Any]:
        """The assistant message to append to the conversation (OpenAI wire format)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {
                    "id": c.call_id,
                    "type": "function",
                    "function": {"name": c.name, "arguments": c.raw_arguments},
                }
                for c in self.tool_calls
            ]
        return message


if TYPE_CHECKING:
    import openai


class LLMClient:
    def __init__(self, config: AgentConfig) -> None:
        import openai  # imported here: offline sessions never pay for the client

        if not config.online:
            raise LLMFailure("connection", "no LLM endpoint configured")
        self.config = config
        self.openai = openai
        self.client: openai.OpenAI = openai.OpenAI(
            base_url=config.base_url,
            api_key=config.api_key or "not-needed",  # local servers ignore it; the client insists on one
            timeout=config.timeout_s,
            max_retries=0,
        )

    def chat(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> Turn:
        openai = self.openai
        where = _short(f"{self.config.base_url} (model {self.config.model})", 200)
        try:
            response = self.client.chat.completions.create(
                model=str(self.config.model),
                messages=messages,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
                temperature=self.config.temperature,
                max_tokens=self.config.request_max_tokens,
            )
        except openai.APITimeoutError as exc:
            raise LLMFailure(
                "timeout", f"the model endpoint {where} timed out after {self.config.timeout_s:g} s"
            ) from exc
        except openai.APIStatusError as exc:
            raise LLMFailure("http", f"HTTP {exc.status_code} from {where}: {_short(str(exc))}") from exc
        except openai.APIConnectionError as exc:
            raise LLMFailure("connection", f"cannot reach {where}: {_short(str(exc))}") from exc
        except openai.APIResponseValidationError as exc:
            raise LLMFailure("malformed", f"{where}: {_short(str(exc))}") from exc
        except (ValueError, TypeError, KeyError, RecursionError) as exc:  # a body the client could not decode
            raise LLMFailure(
                "malformed", f"response from {where} not understood: {_short(str(exc))}"
            ) from exc
        return parse_response(response)


def bounded_int(text: str) -> int | float:
    """JSON integers past 18 digits become floats (a 400-digit one is `inf`): every number the model writes
    fits the checkpoint's 64-bit integers, and the validators refuse what is out of bounds."""
    return int(text) if len(text.lstrip("-")) <= 18 else float(text)


def too_deep(value: Any, limit: int) -> bool:
    """Whether `value` nests deeper than `limit` (iterative: a depth bomb cannot exhaust the stack)."""
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            if level >= limit:
                return True
            stack.extend((v, level + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def parse_arguments(name: str, raw: Any) -> tuple[dict[str, Any], str]:
    """(arguments, error): the call's arguments as an object, or {} and why they are not usable."""
    if raw is None:
        return {}, ""
    if not isinstance(raw, str):
        return {}, f"tool call {name}: arguments must be a JSON object in a string, got {type(raw).__name__}"
    if len(raw) > MAX_ARGUMENTS_CHARS:
        return {}, f"tool call {name}: arguments are {len(raw)} characters (at most {MAX_ARGUMENTS_CHARS})"
    if not raw.strip():
        return {}, ""
    try:
        parsed = json.loads(raw, parse_int=bounded_int)
    except json.JSONDecodeError:
        return {}, f"tool call {name}: arguments are not JSON: {_short(raw, 120)}"
    except (ValueError, RecursionError) as exc:  # nesting past the stack, or what json refuses otherwise
        return {}, f"tool call {name}: arguments not usable: {_short(str(exc), 120)}"
    if not isinstance(parsed, dict):
        return {}, f"tool call {name}: arguments must be a JSON object, got {type(parsed).__name__}"
    if too_deep(parsed, MAX_ARGUMENTS_DEPTH):
        return {}, f"tool call {name}: arguments nest deeper than {MAX_ARGUMENTS_DEPTH} levels"
    return parsed, ""


def parse_response(response: Any) -> Turn:
    """A `Turn` from a chat completion; anything not shaped like one is `malformed`."""
    choices = getattr(response, "choices", None)
    if not choices or not isinstance(choices, list):
        raise LLMFailure("malformed", "response has no choices")
    message = getattr(choices[0], "message", None)
    if message is None:
        raise LLMFailure("malformed", "first choice has no message")
    raw_calls = getattr(message, "tool_calls", None) or []
    if not isinstance(raw_calls, list):
        raise LLMFailure("malformed", "tool_calls is not a list")
    if len(raw_calls) > MAX_TOOL_CALLS_PER_TURN:
        raise LLMFailure(
            "malformed", f"{len(raw_calls)} tool calls in one turn (at most {MAX_TOOL_CALLS_PER_TURN})"
        )
    calls: list[ToolCall] = []
    for raw in raw_calls:
        function = getattr(raw, "function", None)
        name = getattr(function, "name", None)
        if not isinstance(name, str) or not name:
            name = f"<{type(name).__name__}>" if not isinstance(name, str) else "<empty>"
        name = name[:80]
        raw_arguments = getattr(function, "arguments", None)
        arguments, error = parse_arguments(name, raw_arguments)
        text_arguments = raw_arguments if isinstance(raw_arguments, str) else json.dumps(arguments)
        call_id = getattr(raw, "id", None)
        call_id = call_id[:80] if isinstance(call_id, str) and call_id else f"call_{len(calls)}"
        calls.append(ToolCall(call_id, name, arguments, text_arguments[:MAX_ARGUMENTS_CHARS], error))
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        raise LLMFailure("malformed", "message content is not text")
    if content is not None and len(content) > MAX_CONTENT_CHARS:
        raise LLMFailure(
            "malformed", f"message content is {len(content)} characters (at most {MAX_CONTENT_CHARS})"
        )
    usage = getattr(response, "usage", None)
    total = getattr(usage, "total_tokens", 0) if usage is not None else 0
    tokens = total if isinstance(total, int) and not isinstance(total, bool) and 0 <= total < 10**12 else 0
    finish = getattr(choices[0], "finish_reason", None)
    finish_reason = finish[:40] if isinstance(finish, str) else ""
    return Turn(content=content or "", tool_calls=calls, tokens=tokens, finish_reason=finish_reason)


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
