"""A Slack button press, as pure functions over the raw request (no I/O; aiops/service/slack_actions.py serves it):

- `signature_problem(secret, timestamp, signature, body, now_s)`: Slack's request signing
  (https://api.slack.com/authentication/verifying-requests-from-slack): `X-Slack-Signature` must be `v0=` +
  hex HMAC-SHA256(signing secret, `v0:{X-Slack-Request-Timestamp}:{raw body}`), compared in constant time, and the
  timestamp within `MAX_AGE_S` of now (a replayed request is refused). "" when it holds, else why not.
- `parse_press(body)`: the form's `payload` JSON, hostile even once signed (Slack relays what users typed): a
  `block_actions` payload with one of our buttons, its ids checked against Slack's id alphabet, the button's value
  split into the proposal id and the action hash it was drawn for. Raises `SlackRequestError` naming the field.
- `button_value(proposal_id, action_hash)`: what a button carries, so a stale button (the proposal changed since
  the message) approves nothing.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from aiops.errors import SlackRequestError

MAX_AGE_S = 300.0  # Slack's advice: refuse requests more than five minutes from now
MAX_BODY_BYTES = 256 * 1024  # a block_actions payload carries the whole message it came from
APPROVE, REJECT = "aiops_approve", "aiops_reject"
ACTION_IDS = (APPROVE, REJECT)
_ID = re.compile(r"^[A-Z0-9]{2,32}$")
_PROPOSAL_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,80}$")  # guardrails.actions' proposal ids
_HASH = re.compile(r"^[0-9a-f]{64}$")
_MESSAGE_TS = re.compile(r"^[0-9]{1,12}\.[0-9]{1,8}$")


def signature_problem(secret: bytes, timestamp: str, signature: str, body: bytes, now_s: float) -> str:
    """Why the request is not Slack's (short, echoes nothing it was sent), or "" when it is."""
    if not (timestamp.isascii() and timestamp.isdigit() and len(timestamp) <= 12):
        return "X-Slack-Request-Timestamp is missing or not an integer"
    if abs(now_s - int(timestamp)) > MAX_AGE_S:
        return f"the request's timestamp is more than {MAX_AGE_S:g} s from now (a replay?)"
    expected = "v0=" + hmac.new(secret, b"v0:" + timestamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected.encode(), signature.encode("utf-8", "replace")):
        return "X-Slack-Signature does not verify with the signing secret"
    return ""


def button_value(proposal_id: str, action_hash: str) -> str:
    return f"{proposal_id} {action_hash}"


@dataclass(frozen=True)
class Press:
    """One verified press of one of our buttons."""

    action_id: str  # APPROVE | REJECT
    proposal_id: str
    action_hash: str  # of the action the message showed
    user_id: str
    team_id: str
    channel_id: str
    message_ts: str  # the message the button is in ("" when Slack did not say): replies go to its thread

    @property
    def approve(self) -> bool:
        return self.action_id == APPROVE


def _id(value: Any, field: str) -> str:
    if not isinstance(value, str) or not _ID.match(value):
        raise SlackRequestError(f"{field} is not a Slack id")
    return value


def _object(value: Any, field: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SlackRequestError(f"{field} is not an object")
    return value


def parse_press(body: bytes) -> Press:
    try:
        form = parse_qs(body.decode("utf-8"), max_num_fields=20, strict_parsing=True)
    except (UnicodeDecodeError, ValueError):
        raise SlackRequestError("the body is not a URL-encoded form") from None
    payloads = form.get("payload", [])
    if len(payloads) != 1:
        raise SlackRequestError("the form needs one payload field")
    try:
        payload = _object(json.loads(payloads[0]), "payload")
    except (ValueError, RecursionError):
        raise SlackRequestError("payload is not JSON") from None
    if payload.get("type") != "block_actions":
        raise SlackRequestError("payload.type is not block_actions")
    actions = payload.get("actions")
    if not isinstance(actions, list) or len(actions) != 1:
        raise SlackRequestError("payload.actions must hold one action")
    action = _object(actions[0], "payload.actions[0]")
    action_id = action.get("action_id")
    if action_id not in ACTION_IDS:
        raise SlackRequestError(f"payload.actions[0].action_id is not one of ours ({', '.join(ACTION_IDS)})")
    value = action.get("value")
    proposal_id, _, digest = value.rpartition(" ") if isinstance(value, str) else ("", "", "")
    if not _PROPOSAL_ID.match(proposal_id) or not _HASH.match(digest):
        raise SlackRequestError("payload.actions[0].value is not a proposal id and an action hash")
    user = _object(payload.get("user"), "payload.user")
    team = payload.get("team")
    team_id = _object(team, "payload.team").get("id") if team is not None else user.get("team_id")
    container = payload.get("container")
    message_ts = _object(container, "payload.container").get("message_ts", "") if container else ""
    if not isinstance(message_ts, str) or (message_ts and not _MESSAGE_TS.match(message_ts)):
        raise SlackRequestError("payload.container.message_ts is not a Slack timestamp")
    return Press(
        action_id=str(action_id),
        proposal_id=proposal_id,
        action_hash=digest,
        user_id=_id(user.get("id"), "payload.user.id"),
        team_id=_id(team_id, "payload.team.id"),
        channel_id=_id(_object(payload.get("channel"), "payload.channel").get("id"), "payload.channel.id"),
        message_ts=message_ts,
    )
