"""`[chatops.slack]` in the service (docs/CHATOPS.md): incident messages with Approve/Reject buttons, and
`POST /api/slack/actions`, where Slack sends the presses.

Posting: when an incident is diagnosed (`on_event`, inside the flush's write, after its proposals were filed),
its message (aiops/service/slack_blocks.py) is queued for `SlackPoster`, which calls chat.postMessage off the
loop (aiops/integrations/slack_api.py).

A press, in order; every refusal before the guardrails records nothing:
1. a Content-Length of at most `slack_request.MAX_BODY_BYTES` (411, 413), the raw body read up to that cap;
2. Slack's request signature over that raw body with the signing secret, and a timestamp within 5 minutes
   (401: a forged or replayed request);
3. the form's `payload`, parsed as hostile (400 with a short reason naming the field);
4. the Slack user mapped to a principal (`[chatops.slack] users`; an unmapped user is told so);
5. the button's action hash against the proposal's now (a stale button is told to use the new message);
6. the decision, through the same path as the console's (aiops.runtime.actions):
   - reject: a signed rejection (any mapped principal may reject: a rejection only ever blocks);
   - approve a physical proposal: a signed approval (`guardrails.slack_signing`) whose classes are
     `approval_classes`; without "physical" there (the default), or without "physical" in the principal's
     `[guardrails.approvers]`, the guardrails refuse it and audit the refusal (`approval_refused`), and the
     reply says where to approve instead. An approved proposal runs in the loop's next flush, as the console's;
   - approve a digital proposal (needs nobody's approval, "digital" in `approval_classes`): a `chat_request`
     audit event carrying the same signed evidence, and the proposal runs in the loop's next flush.
The outcome goes back as a reply in the message's thread (chat.postMessage) and in the HTTP answer's body.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from aiops.config import Config
from aiops.config_chatops import SlackConfig, check_users
from aiops.errors import AiopsError, ConfigError, GuardrailError, SignatureRefused, SlackRequestError
from aiops.integrations.event import EventKind, console_page, incident_event
from aiops.integrations.slack_api import SlackApi, SlackPoster
from aiops.models import Hypothesis, Incident
from aiops.runtime.actions import Decision, approve, reject
from aiops.runtime.world import attach, desk
from aiops.service.slack_blocks import ProposalLine, incident_message, outcome_message
from aiops.service.slack_request import MAX_BODY_BYTES, Press, parse_press, signature_problem
from aiops.service.web import _bounded_body, _guarded_async, _json
from aiops.store import Store, Workspace
from guardrails.actions import action_hash
from guardrails.executor import ExecutionOutcome
from guardrails.proposal_desk import Guardrails
from guardrails.records import GuardrailRecords
from guardrails.signing import decision_message
from guardrails.slack_signing import SlackEvidence, SlackSigner, ensure_key, key_path

REFUSAL_LOG_EVERY_S = 60.0  # refused presses: at most one log line a minute
log = logging.getLogger("aiops.service.slack")
SLACK_ROUTE = "/api/slack/actions"
ELSEWHERE = (
    "approve it in the web console, or sign it with your SSH key: aiops actions approve {pid} --key KEY"
)


def _secret(config: Config, key: str, path: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or type(exc).__name__
        raise ConfigError(config.source, key, f"cannot read: {why}") from None
    if not text:
        raise ConfigError(config.source, key, "the file is empty")
    return text


class SlackChat:
    """The Slack app of one service: its secrets (never logged), the workspace's Slack key, the poster, and the
    digital proposals people asked to run, waiting for the loop."""

    def __init__(self, config: Config, workspace: Workspace, clock: Callable[[], float] = time.time) -> None:
        slack: SlackConfig = config.chatops.slack
        self.config = slack
        check_users(slack, config.guardrails.approvers, config.source)
        self.secret = _secret(config, "chatops.slack.signing_secret_file", slack.signing_secret_file).encode()
        token = _secret(config, "chatops.slack.bot_token_file", slack.bot_token_file)
        if not config.http.listen:
            raise ConfigError(
                config.source, "http.listen", "is empty: Slack's button presses come to this listener"
            )
        if not slack.channel:
            raise ConfigError(config.source, "chatops.slack.channel", "is needed to post incident messages")
        where = key_path(config.store.path)
        if where is None:
            raise ConfigError(config.source, "chatops.slack", "needs a workspace on disk ([store] path)")
        try:
            self.key = ensure_key(where)
        except GuardrailError as exc:
            raise ConfigError(config.source, "store.path", exc.detail) from None
        self.workspace = workspace
        self.node = config.node.name
        self.clock = clock
        self.poster = SlackPoster(SlackApi(slack.api_url, token, slack.timeout_s))
        self.link_base = ""
        self.console_url = config.console_url  # the console's incident page is the message's link
        self._deciding = threading.Lock()  # one decision at a time (never held by the loop)
        self._queue_lock = threading.Lock()  # guards `_to_run` alone: the loop takes it inside its flush
        self._to_run: list[str] = []  # digital proposals people asked to run: the loop runs them
        self.refused = 0
        self._refusals_logged_s = -REFUSAL_LOG_EVERY_S  # monotonic time of the last refusal line
        self._refusals_unlogged = 0

    def __repr__(self) -> str:  # never the secrets
        return f"SlackChat(channel={self.config.channel!r})"

    def routes(self) -> list[BaseRoute]:
        return [Route(SLACK_ROUTE, _guarded_async(self.actions), methods=["POST"])]

    def start(self) -> None:
        self.poster.start()

    def stop(self) -> None:
        self.poster.stop()

    # -- posting ---------------------------------------------------------------------------------------------
    def on_event(self, store: Store, kind: str, incident: Incident, top: Hypothesis | None) -> None:
        """Queue the incident's message once it is diagnosed (its proposals are filed by then)."""
        if kind != "diagnosed" or top is None:
            return
        link = f"{self.link_base}/api/incidents/{incident.incident_id}" if self.link_base else ""
        event = incident_event(cast(EventKind, kind), incident, [top], node=self.node, link=link)
        event = dataclasses.replace(event, console_link=console_page(self.console_url, incident.incident_id))
        records = GuardrailRecords(store)
        lines = [
            ProposalLine(
                r.proposal_id,
                action_hash(r.action),
                r.action.kind,
                r.action.target,
                dict(r.action.parameters),
                r.physical,
            )
            for r in records.proposals("pending")
            if r.incident_id == incident.incident_id
        ]
        self.poster.put(incident_message(self.config.channel, event, lines))

    # -- the loop's part ---------------------------------------------------------------------------------------
    def run_requested(
        self,
        store: Store,
        attached: Any,
        run: Callable[[Guardrails, str], ExecutionOutcome | None] | None = None,
    ) -> list[str]:
        """Run the digital proposals people asked for from Slack (in the flush, where the world is); `run`:
        how the flush runs one (flush_steps.execute_or_claim: one whose backend calls another system, a
        ticket sink, runs after the flush; None its outcome then), else `Guardrails.execute`."""
        with self._queue_lock:
            taken, self._to_run = self._to_run, []
        if not taken:
            return []
        if attached.actuator is None:
            log.warning("not run: nothing acts here", extra={"proposal_ids": ",".join(taken)[:500]})
            return []
        guard = desk(store, attached)
        done = []
        for proposal_id in taken:
            outcome = guard.execute(proposal_id) if run is None else run(guard, proposal_id)
            status = outcome.status if outcome is not None else "claimed: runs after the flush"
            log.info("executed", extra={"proposal_id": proposal_id, "status": status})
            done.append(f"{proposal_id}: {status}")
        return done

    def _log_refusal(self, problem: str) -> None:
        """One line per `REFUSAL_LOG_EVERY_S` at most, with how many were refused since the last: a flood of
        forged presses (19,678 lines in 31 s before issue 36) cannot fill the log or the disk."""
        self._refusals_unlogged += 1
        now = time.monotonic()
        if now - self._refusals_logged_s < REFUSAL_LOG_EVERY_S:
            return
        log.warning(
            "slack request refused",
            extra={"why": problem, "refused": self._refusals_unlogged, "total": self.refused},
        )
        self._refusals_logged_s, self._refusals_unlogged = now, 0

    # -- presses -----------------------------------------------------------------------------------------------
    async def actions(self, request: Request) -> Response:
        body = await _bounded_body(request, MAX_BODY_BYTES)
        if isinstance(body, Response):
            return body
        headers = request.headers
        timestamp = headers.get("X-Slack-Request-Timestamp", "")
        signature = headers.get("X-Slack-Signature", "")
        problem = signature_problem(self.secret, timestamp, signature, body, self.clock())
        if problem:
            self.refused += 1
            self._log_refusal(problem)
            return _json(401, {"error": problem}, close=True)
        try:
            press = parse_press(body)
        except SlackRequestError as exc:
            return _json(400, {"error": exc.reason})
        evidence = SlackEvidence(
            press.user_id,
            press.team_id,
            press.channel_id,
            int(timestamp),
            hashlib.sha256(body).hexdigest(),
            signature,
        )
        ok, text = await run_in_threadpool(self._decide, press, evidence)
        log.info("slack decision", extra={"user": press.user_id, "proposal_id": press.proposal_id, "ok": ok})
        self.poster.put(outcome_message(press.channel_id, press.message_ts, text))
        return _json(200, {"ok": ok, "text": text})

    def _decide(self, press: Press, evidence: SlackEvidence) -> tuple[bool, str]:
        principal = self.config.users.get(press.user_id)
        if principal is None:
            return False, (
                f"refused: Slack user {press.user_id} is not mapped to an approver ([chatops.slack] users); "
                "nothing was recorded"
            )
        signer = SlackSigner(principal, tuple(self.config.approval_classes), evidence, self.key)
        try:
            with self._deciding:
                return self._decide_as(press, signer)
        except (GuardrailError, AiopsError) as exc:
            return False, f"refused: {exc}"

    def _decide_as(self, press: Press, signer: SlackSigner) -> tuple[bool, str]:
        pid, who = press.proposal_id, signer.principal
        with self.workspace.read() as store:
            record = GuardrailRecords(store).proposal(pid)
        if record is None:
            return False, f"refused: no proposal {pid}"
        if action_hash(record.action) != press.action_hash:
            return False, f"refused: {pid} changed since this message was posted; use the newest message"
        if not press.approve:
            reject(self.workspace, pid, signer, f"rejected in Slack by {who} ({press.user_id})")
            return True, f"{pid} rejected by {who}"
        if not record.physical:
            return self._run_digital(pid, signer)
        try:
            decision = approve(self.workspace, pid, signer, execute=False, here=True)
        except SignatureRefused as exc:  # audited by the guardrails (`approval_refused`)
            return False, f"refused: {exc}; instead, {ELSEWHERE.format(pid=pid)}"
        return _outcome(pid, who, decision)

    def _run_digital(self, pid: str, signer: SlackSigner) -> tuple[bool, str]:
        if "digital" not in self.config.approval_classes:
            return False, (
                f"refused: Slack approvals may not run digital actions ([chatops.slack] approval_classes); "
                f"run it with: aiops actions execute {pid}"
            )
        with self.workspace.write() as store:
            guard = desk(store, attach(store, actuator="none"), clock=self.clock)
            record = guard.records.proposal(pid)
            if record is None or record.status != "pending" or self.clock() >= guard.expiry_ts_s(record):
                status = record.status if record is not None else "gone"
                return False, f"refused: {pid} is {status}; nothing to run"
            now = self.clock()
            digest = action_hash(record.action)
            message = decision_message(
                "approve", ts_s=now, expires_ts_s=now, proposal_id=pid, action_hash=digest
            )
            guard.audit.append(
                "chat_request",
                {
                    "decision": "execute",
                    "proposal_id": pid,
                    "action_hash": digest,
                    "principal": signer.principal,
                    "slack_user": signer.evidence.user_id,
                    "slack_team": signer.evidence.team_id,
                    "slack_channel": signer.evidence.channel_id,
                    "request_ts": signer.evidence.request_ts,
                    "message": message.decode("ascii"),
                    "signature": signer.sign(message),
                },
                proposal_id=pid,
                actor=signer.principal,
                ts_s=now,
            )
        with self._queue_lock:
            if pid not in self._to_run:
                self._to_run.append(pid)
        return True, f"{signer.principal} asked to run {pid} (digital): the service runs it at its next flush"


def _outcome(pid: str, who: str, decision: Decision) -> tuple[bool, str]:
    if decision.ticket:
        return False, f"refused: {decision.note}"
    auth = decision.authorisation
    if auth is None:
        return False, f"{pid}: {decision.note}"
    if auth.ok:
        return True, f"{pid} approved by {who}: {auth.message}; the service runs it at its next flush"
    return True, f"{pid}: approval by {who} recorded; {auth.message}"
