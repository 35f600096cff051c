"""The one seam to an OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp server).

`LLMClient.chat(messages, tools)` returns a typed `Turn` or raises `LLMFailure`, whose `kind` says what went
wrong (timeout, http, connection, malformed) so the graph can fall back to the analyst and show the failure.
Retries are off: a person is waiting, and the analyst's answer is already there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from aiops.agent.config import AgentConfig
from aiops.errors import LLMFailure

FailureKind = Literal["timeout", "http", "connection", "malformed", "unknown_tool", "limit"]


@dataclass(frozen=True)
class ToolCall:
    call_id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str


@dataclass(frozen=True)
class Turn:
    content: str
    tool_calls: list[ToolCall] = field(default_factory=list)
    tokens: int = 0

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
        try:
            response = self.client.chat.completions.create(
                model=str(self.config.model),
                messages=messages,  # type: ignore[arg-type]
                tools=tools,  # type: ignore[arg-type]
                temperature=self.config.temperature,
            )
        except openai.APITimeoutError as exc:
            raise LLMFailure("timeout", f"no answer within {self.config.timeout_s:g} s ({exc})") from exc
        except openai.APIStatusError as exc:
            raise LLMFailure("http", f"HTTP {exc.status_code}: {_short(str(exc))}") from exc
        except openai.APIConnectionError as exc:
            raise LLMFailure("connection", f"{self.config.base_url}: {_short(str(exc))}") from exc
        except openai.APIResponseValidationError as exc:
            raise LLMFailure("malformed", _short(str(exc))) from exc
        except (ValueError, TypeError, KeyError) as exc:  # a body the client could not decode
            raise LLMFailure("malformed", f"response not understood: {_short(str(exc))}") from exc
        return parse_response(response)


def parse_response(response: Any) -> Turn:
    """A `Turn` from a chat completion; anything not shaped like one is `malformed`."""
    choices = getattr(response, "choices", None)
    if not choices:
        raise LLMFailure("malformed", "response has no choices")
    message = getattr(choices[0], "message", None)
    if message is None:
        raise LLMFailure("malformed", "first choice has no message")
    calls: list[ToolCall] = []
    for raw in getattr(message, "tool_calls", None) or []:
        function = getattr(raw, "function", None)
        name = getattr(function, "name", None)
        arguments = getattr(function, "arguments", None) or "{}"
        if not isinstance(name, str) or not isinstance(arguments, str):
            raise LLMFailure("malformed", "a tool call has no function name or arguments")
        try:
            parsed = json.loads(arguments)
        except json.JSONDecodeError as exc:
            raise LLMFailure(
                "malformed", f"tool call {name}: arguments are not JSON: {_short(arguments)}"
            ) from exc
        if not isinstance(parsed, dict):
            raise LLMFailure("malformed", f"tool call {name}: arguments must be a JSON object")
        calls.append(ToolCall(str(getattr(raw, "id", "") or f"call_{len(calls)}"), name, parsed, arguments))
    content = getattr(message, "content", None)
    if content is not None and not isinstance(content, str):
        raise LLMFailure("malformed", "message content is not text")
    usage = getattr(response, "usage", None)
    tokens = int(getattr(usage, "total_tokens", 0) or 0) if usage is not None else 0
    return Turn(content=content or "", tool_calls=calls, tokens=tokens)


def _short(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
