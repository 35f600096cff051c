"""A plan step decided in the console: approve it with ONE signature over all its targets, or ask for a waiting
step now. The step's message (guardrails/step_message.py) names every target; the page shows it with the
`ssh-keygen -Y sign -n aiops-approval` line that signs it.

- `approve_signed`: a signature pasted into the textarea or uploaded as the `.sig` file ssh-keygen wrote. A
  browser submits the textarea with CRLF line endings, a copy adds white space, a paste drops the final newline:
  the signature is read as ssh-keygen would have written it (guardrails/armour.py) and verified over the message
  the page showed (its window is in the form). A refusal names what is wrong: the text (cut short, not base64,
  another namespace), the key (its fingerprint is not in the allowed-signers file), or the bytes it signed.
  The key that signed names who approved, whoever is signed in. In a fleet's console the step's targets then go
  to their node agents at the fleet's next flush, each with this signature, which each node checks again.
- `approve` (the plain button): on a node's console, signed by the signed-in principal (console session) and
  run at once. A fleet's console says plainly that it cannot: a node agent verifies SSH signatures only, so an
  approval by console session is never dispatched; nothing is recorded.
- `propose`: a waiting step's targets filed now (a person need not wait for the step before it to fail).
Viewers cannot decide; a missing or wrong CSRF token is refused before anything is read.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import UploadFile
from starlette.requests import Request
from starlette.responses import Response

from aiops.errors import AiopsError, GuardrailError
from aiops.plans import plan, step
from aiops.runtime.actions import StepDecision, approve_step, propose_step
from aiops.store import Store
from guardrails.pasted import MAX_SIGNATURE_CHARS, PastedSignature
from guardrails.session_signing import SessionSigner
from guardrails.signing import Signer

if TYPE_CHECKING:
    from aiops.console.app import Console

log = logging.getLogger("aiops.console")
CANNOT_DISPATCH = (
    "not approved: this fleet console cannot dispatch an approval made by signing in, because the node agent "
    "that acts verifies SSH signatures only; sign the step's message shown below with ssh-keygen -Y sign -n "
    "aiops-approval and paste or upload the signature"
)


def _note(decision: StepDecision, dispatch: bool) -> str:
    auth = decision.authorisation
    parts = [f"signed by {auth.signed_by}: {auth.message}"]
    ran = decision.executed
    if ran:
        parts.append(f"executed {', '.join(ran)}")
    failed = [f"{pid} {o.status}: {o.message}" for pid, o in decision.outcomes.items() if not o.ran]
    parts += failed
    if auth.ok and dispatch:
        parts.append(
            "the fleet sends each target to its node agent at its next flush; the node checks the signature"
        )
    elif decision.note:
        parts.append(decision.note)
    return "; ".join(parts)


class StepDecisions:
    def __init__(self, console: Console) -> None:
        self.console = console

    async def _checked(self, request: Request) -> tuple[Response | None, str, str]:
        return await self.console.pages.may_decide(request, "step_id")

    async def _back(self, request: Request, step_id: str, note: str) -> Response:
        session = self.console.pages.session(request)
        if session is None:
            return self.console.pages.to_login()

        def incident_of(store: Store) -> str:
            found = step(store, step_id)
            owner = plan(store, found.plan_id) if found is not None else None
            return owner.incident_id if owner is not None else ""

        incident_id = await self.console.read(incident_of)
        where = f"/incidents/{quote(incident_id, safe='')}" if incident_id else "/"
        return self.console.pages.back_with_note(session, where, f"{step_id}: {note}")

    def _run(self, step_id: str, signer: Signer, window: tuple[float, float] | None) -> str:
        options = self.console.options
        with self.console.lock:
            decision = approve_step(
                self.console.workspace,
                step_id,
                signer,
                execute=options.execute,
                signed_at=window,
                here=not options.dispatch,
            )
        return _note(decision, options.dispatch)

    async def approve(self, request: Request) -> Response:
        refusal, principal, step_id = await self._checked(request)
        if refusal is not None:
            return refusal
        if self.console.options.dispatch:
            return await self._back(request, step_id, CANNOT_DISPATCH)
        signer = SessionSigner(principal, self.console.key)
        try:
            note = await run_in_threadpool(self._run, step_id, signer, None)
        except (GuardrailError, AiopsError) as exc:
            note = f"refused: {exc}"
        log.info("step decision", extra={"principal": principal, "step_id": step_id, "note": note[:200]})
        return await self._back(request, step_id, note)

    async def approve_signed(self, request: Request) -> Response:
        refusal, principal, step_id = await self._checked(request)
        if refusal is not None:
            return refusal
        form = await request.form(max_files=1, max_fields=16)
        pasted = str(form.get("signature", "") or "")[: MAX_SIGNATURE_CHARS + 1]
        upload = form.get("signature_file")
        uploaded = ""
        if isinstance(upload, UploadFile) and upload.filename:
            raw = await upload.read(MAX_SIGNATURE_CHARS + 1)
            uploaded = raw.decode("ascii", "replace")
        if pasted.strip() and uploaded.strip() and pasted.split() != uploaded.split():
            return await self._back(
                request, step_id, "refused: two different signatures given (pasted and uploaded): give one"
            )
        signature = pasted if pasted.strip() else uploaded
        try:
            window = (float(str(form.get("ts_s", ""))[:40]), float(str(form.get("expires_ts_s", ""))[:40]))
        except ValueError:
            return await self._back(request, step_id, "refused: the form lost its times: reload the page")
        try:
            note = await run_in_threadpool(self._run, step_id, PastedSignature(signature), window)
        except (GuardrailError, AiopsError) as exc:
            note = f"refused: {exc}"
        log.info("step decision", extra={"principal": principal, "step_id": step_id, "note": note[:200]})
        return await self._back(request, step_id, note)

    async def propose(self, request: Request) -> Response:
        refusal, principal, step_id = await self._checked(request)
        if refusal is not None:
            return refusal

        def run() -> list[str]:
            with self.console.lock:
                return propose_step(self.console.workspace, step_id, principal)

        try:
            pids = await run_in_threadpool(run)
            note = f"proposed at {principal}'s request: {', '.join(pids)}; approve it with one signature"
        except (GuardrailError, AiopsError) as exc:
            note = f"refused: {exc}"
        return await self._back(request, step_id, note)
