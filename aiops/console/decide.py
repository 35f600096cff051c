"""Approve and reject from the console: the signed-in principal signs through the console-session signer, and
the decision goes through the same guardrails as `aiops actions approve|reject` (`aiops.runtime.actions`):
re-validated, recorded as a signed audit event, counted by the executor from that event alone.

Refusals before anything is recorded: no session (303 to sign in), a missing or wrong CSRF token (403), a
viewer (403). The guardrails' own refusals (not in `[guardrails.approvers]`, the proposer, expired, rejected,
two-person across racks) come back as a note on the incident's page, with nothing recorded either.

In a fleet's console (`ConsoleOptions.dispatch`) the node agents act, and a node verifies SSH signatures only
(the session's HMAC is the fleet's own key). The page then shows, for each open physical proposal, the approval
message dated when the page was drawn and the `ssh-keygen -Y sign -n aiops-approval` line that signs it; the
person pastes the signature (`approve_signed`), recorded through the same guardrails with that message's window
(guardrails/pasted.py). The key that signed names who approved, whoever is signed in. The plain "Approve"
(a console session's signature) cannot be dispatched: in a fleet's console it says so plainly and records
nothing (the fleet's dispatcher never sends a session approval, aiops/fleet/dispatch.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from aiops.console import data
from aiops.console.steps import CANNOT_DISPATCH
from aiops.errors import AiopsError, GuardrailError
from aiops.runtime.actions import Decision, approve, reject
from aiops.store import Store
from guardrails.pasted import MAX_SIGNATURE_CHARS, PastedSignature, approval_to_sign
from guardrails.proposal_desk import Guardrails
from guardrails.session_signing import SessionSigner

if TYPE_CHECKING:
    from aiops.console.app import Console

log = logging.getLogger("aiops.console")
MAX_REASON_CHARS = 500


def messages_to_sign(store: Store, proposals: list[dict[str, Any]]) -> None:
    """Add `to_sign` (message, window, the command that signs it) to each open physical proposal's dict."""
    guard = Guardrails(store)
    for p in proposals:
        if not (p["open"] and p["physical"]):
            continue
        try:
            signing = approval_to_sign(guard, p["id"])
        except GuardrailError:
            continue
        p["to_sign"] = {
            "message": signing.message.decode("ascii"),
            "ts_s": repr(signing.ts_s),
            "expires_ts_s": repr(signing.expires_ts_s),
            "command": signing.command(),
        }


def _note(decision: Decision, dispatch: bool = False) -> str:
    auth, outcome = decision.authorisation, decision.outcome
    parts = []
    if auth is not None:
        parts.append(("approved: " if auth.ok else "approval recorded: ") + auth.message)
    if outcome is not None:
        parts.append(f"{outcome.status}: {outcome.message}")
    elif auth is not None and auth.ok and dispatch:
        parts.append("the fleet sends it to its node agent at its next flush; the node checks the signature")
    elif auth is not None and auth.ok and "--no-execute" in decision.note:
        parts.append("the service runs it at its next flush")  # a node's console: its own loop executes it
    elif decision.note:
        parts.append(decision.note)
    return "; ".join(parts)


class Decisions:
    def __init__(self, console: Console) -> None:
        self.console = console

    async def _checked(self, request: Request) -> tuple[Response | None, str, str]:
        return await self.console.pages.may_decide(request, "proposal_id")

    async def _decided(
        self, request: Request, principal: str, proposal_id: str, run: Callable[[], str]
    ) -> Response:
        """Runs a decision off the event loop, logs what it said (or why it was refused), and goes back."""
        try:
            note = await run_in_threadpool(run)
        except (GuardrailError, AiopsError) as exc:
            note = f"refused: {exc}"
        log.info("decision", extra={"principal": principal, "proposal_id": proposal_id, "note": note[:200]})
        return await self._back(request, proposal_id, f"{proposal_id}: {note}")

    async def _back(self, request: Request, proposal_id: str, note: str) -> Response:
        session = self.console.pages.session(request)
        if session is None:
            return self.console.pages.to_login()
        incident_id = await self.console.read(lambda s: data.proposal_incident(s, proposal_id))
        where = f"/incidents/{quote(incident_id, safe='')}" if incident_id else "/"
        return self.console.pages.back_with_note(session, where, note)

    async def approve(self, request: Request) -> Response:
        refusal, principal, proposal_id = await self._checked(request)
        if refusal is not None:
            return refusal
        if self.console.options.dispatch:  # a node agent verifies SSH signatures: a session's is never sent
            return await self._back(request, proposal_id, f"{proposal_id}: {CANNOT_DISPATCH}")
        signer = SessionSigner(principal, self.console.key)

        def run() -> str:
            with self.console.lock:
                decision = approve(
                    self.console.workspace,
                    proposal_id,
                    signer,
                    execute=self.console.options.execute,
                    here=not self.console.options.dispatch,
                )
            return _note(decision)

        return await self._decided(request, principal, proposal_id, run)

    async def approve_signed(self, request: Request) -> Response:
        """A pasted SSH signature over the approval message the page showed (its window in the form)."""
        refusal, principal, proposal_id = await self._checked(request)
        if refusal is not None:
            return refusal
        form = await request.form()
        signature = str(form.get("signature", ""))[: MAX_SIGNATURE_CHARS + 1]
        try:
            window = (float(str(form.get("ts_s", ""))[:40]), float(str(form.get("expires_ts_s", ""))[:40]))
        except ValueError:
            return await self._back(request, proposal_id, f"{proposal_id}: refused: the form lost its times")

        def run() -> str:
            with self.console.lock:
                decision = approve(
                    self.console.workspace,
                    proposal_id,
                    PastedSignature(signature),
                    execute=self.console.options.execute,
                    signed_at=window,
                    here=not self.console.options.dispatch,
                )
            signer = decision.authorisation.signed_by if decision.authorisation else ""
            return f"signed by {signer}: {_note(decision, self.console.options.dispatch)}"

        return await self._decided(request, principal, proposal_id, run)

    async def reject(self, request: Request) -> Response:
        refusal, principal, proposal_id = await self._checked(request)
        if refusal is not None:
            return refusal
        form = await request.form()
        reason = str(form.get("reason", "")).strip()[:MAX_REASON_CHARS] or "rejected in the console"
        signer = SessionSigner(principal, self.console.key)

        def run() -> None:
            with self.console.lock:
                reject(self.console.workspace, proposal_id, signer, reason)

        try:
            await run_in_threadpool(run)
            note = "rejected"
        except (GuardrailError, AiopsError) as exc:
            note = f"refused: {exc}"
        return await self._back(request, proposal_id, f"{proposal_id}: {note}")
