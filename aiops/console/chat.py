"""Chat with the agent from the console: `POST /chat/ask` (CSRF header) answers as server-sent events, read by
the page's one script (static/chat.js) with `fetch` and written into the page as text (`textContent`), never
as HTML. The agent is the workspace's `AgentSession` (aiops/agent): the offline analyst, or the configured
LLM behind its guardrails; what it proposes is filed as any chat proposal is, and approved on the incident's
page like any other. The answer is computed whole, then streamed in chunks (lines), each a JSON event:
`{"status": ...}`, `{"text": ...}`, `{"proposals": [...]}`, `{"done": true}` or `{"error": ...}`."""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse

from aiops.errors import AiopsError

if TYPE_CHECKING:
    from aiops.agent.session import AgentSession
    from aiops.agent.session import Reply as AgentReply
    from aiops.console.app import Console

log = logging.getLogger("aiops.console")
MAX_QUESTION_CHARS = 2000


def _event(payload: dict[str, Any]) -> bytes:
    return f"data: {json.dumps(payload)}\n\n".encode()


def chunks(answer: str) -> list[str]:
    """The answer in the pieces the page shows one after another (each line, its newline kept)."""
    return [line for line in answer.splitlines(keepends=True) if line] or [""]


MAX_CLAIMS_SHOWN = 8


def beside_the_model(reply: AgentReply) -> str:
    """What the page shows after a model's counted answer, as the CLI's chat does: the analyst's top hypothesis
    and the evidence claims with their marks (re-verified), so a plausible model answer never hides them
    (issue 36: the console showed the model's text alone). Nothing for the analyst's own answer."""
    if reply.source != "llm":
        return ""
    lines = []
    top = reply.analyst_text.splitlines()[1:2]
    if top:
        lines.append(f"analyst: {top[0]}")
    for claim in reply.claims[:MAX_CLAIMS_SHOWN]:
        lines.append(
            f"  {claim.mark()} {claim.status}: {claim.text}" + (f" ({claim.note})" if claim.note else "")
        )
    return ("\n\n" + "\n".join(lines)) if lines else ""


class ChatDesk:
    def __init__(self, console: Console) -> None:
        self.console = console
        self._session: AgentSession | None = None
        self._asking = threading.Lock()  # one question at a time per console (the agent is one graph)

    def _agent(self) -> AgentSession:
        if self._session is None:
            from aiops.agent.session import AgentSession  # LangGraph: paid for on the first question only

            # the console's workspace: in the service, the service's own hold (a second connection to the file
            # in the same process is refused by DuckDB); the agent's SQL tool runs its queries in a worker
            # process, for which the service sets its hold down for the query (`OwnedWorkspace.lend`)
            self._session = AgentSession(self.console.workspace, config=self.console.options.agent)
        return self._session

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    async def page(self, request: Request) -> Response:
        session = self.console.pages.session(request)
        if session is None:
            return self.console.pages.to_login()
        from aiops.console.data import data_clock

        clock = await self.console.read(data_clock)
        return self.console.pages.page(request, session, "chat.html", clock=clock.label)

    def _ask(self, question: str, principal: str) -> dict[str, Any]:
        with self._asking, self.console.lock:
            reply = self._agent().ask(question, principal)
        proposals = [
            {
                "id": str(p.get("proposal_id", "")),
                "kind": str(p.get("kind", "")),
                "target": str(p.get("target", "")),
                "status": str(p.get("status", "")),
            }
            for p in reply.proposals
        ]
        return {
            "answer": reply.answer + beside_the_model(reply),
            "source": reply.source,
            "proposals": proposals,
            "incident_id": reply.incident_id or "",
        }

    async def ask(self, request: Request) -> Response:
        pages = self.console.pages
        session = pages.session(request)
        if session is None:
            return pages.refuse(401, "sign in first")
        if not session.csrf_ok(request.headers.get("x-csrf-token")):
            return pages.refuse(403, "missing or wrong CSRF token")
        form = await request.form()
        question = str(form.get("question", "")).strip()[:MAX_QUESTION_CHARS]
        if not question:
            return pages.refuse(400, "ask a question")
        principal = session.principal

        async def stream() -> AsyncIterator[bytes]:
            yield _event({"status": "thinking"})
            try:
                reply = await run_in_threadpool(self._ask, question, principal)
            except AiopsError as exc:
                yield _event({"error": str(exc)[:500]})
                return
            except Exception as exc:  # the page says it failed; the log has the rest
                log.exception("chat failed")
                yield _event({"error": f"the agent failed: {type(exc).__name__}"})
                return
            yield _event({"status": f"answer ({reply['source']})", "incident_id": reply["incident_id"]})
            for piece in chunks(reply["answer"]):
                yield _event({"text": piece})
            yield _event({"proposals": reply["proposals"]})
            yield _event({"done": True})

        return StreamingResponse(stream(), media_type="text/event-stream")
