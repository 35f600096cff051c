"""A fleet's dispatch as it arrives at a node (`POST /api/dispatch`): `parse_dispatch` reads hostile bytes into
a `Dispatch` (the proposal as the fleet filed it, the hash it claims, each signed approval with its window and,
for a plan step's signature, the step and every target it names; the fleet's name and its recent runs here),
or raises `DispatchError` with a short reason naming the field, never a value echoed. Nothing here trusts what
it read: guardrails/dispatched.py judges it with this node's own configuration.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from aiops.errors import DispatchError
from guardrails.actions import Action
from guardrails.peer import PeerRun, parse_history
from guardrails.step_message import StepTarget, targets_of, valid_step_id

MAX_APPROVALS = 8
MAX_SIGNATURE_CHARS = 8192
MAX_FLEET_CHARS = 80
_HEX = frozenset("0123456789abcdef")
_FLEET_NAME = re.compile(rf"^[A-Za-z0-9_.:-]{{0,{MAX_FLEET_CHARS}}}$", re.ASCII)


@dataclass(frozen=True)
class StepClaim:
    """The plan step an approval was signed for: its id and every target its message names."""

    step_id: str
    targets: tuple[StepTarget, ...]


@dataclass(frozen=True)
class SignedApproval:
    """One person's approval as signed: the window of the canonical message and the armored signature; `step`:
    signed over a plan step's message (all its targets) rather than this proposal's alone."""

    ts_s: float
    expires_ts_s: float
    signature: str
    step: StepClaim | None = None


@dataclass(frozen=True)
class Dispatch:
    action: Action
    sent_hash: str  # what the fleet said the hash is: compared, never used
    expires_ts_s: float | None
    approvals: tuple[SignedApproval, ...]
    fleet: str = ""  # the sender's name, for the audit
    history: tuple[PeerRun, ...] = ()  # what the fleet ran on this node in the last hour (guardrails.peer)


def _number(value: Any, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(float(value)):
        raise DispatchError(f"{name} must be a finite number")
    return float(value)


def _approval(raw: Any, index: int) -> SignedApproval:
    if not isinstance(raw, dict):
        raise DispatchError(f"approvals[{index}] must be an object")
    signature = raw.get("signature")
    if not isinstance(signature, str) or not signature.isascii() or len(signature) > MAX_SIGNATURE_CHARS:
        raise DispatchError(
            f"approvals[{index}].signature must be ASCII text of at most {MAX_SIGNATURE_CHARS}"
        )
    step = raw.get("step")
    claim = None
    if step is not None:
        step_id = step.get("step_id") if isinstance(step, dict) else None
        if not isinstance(step_id, str) or not valid_step_id(step_id):
            raise DispatchError(f"approvals[{index}].step.step_id must be 1-80 ASCII letters, digits or _.:-")
        try:
            claim = StepClaim(step_id, targets_of(step.get("targets")))
        except ValueError as exc:
            raise DispatchError(f"approvals[{index}].step.{exc}") from None
    return SignedApproval(
        _number(raw.get("ts_s"), f"approvals[{index}].ts_s"),
        _number(raw.get("expires_ts_s"), f"approvals[{index}].expires_ts_s"),
        signature,
        claim,
    )


def parse_dispatch(body: bytes) -> Dispatch:
    """The dispatch in a request body; raises `DispatchError` naming the field that does not hold."""
    try:
        data = json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise DispatchError("the body is not JSON") from None
    if not isinstance(data, dict):
        raise DispatchError("the body must be a JSON object")
    raw_action = data.get("action")
    if not isinstance(raw_action, dict):
        raise DispatchError("action must be an object (the proposal as the fleet filed it)")
    try:
        action = Action.model_validate(raw_action)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"])[:60]
        raise DispatchError(f"action.{where}: {str(first['msg'])[:120]}") from None
    sent = data.get("action_hash", "")
    if not isinstance(sent, str) or len(sent) > 64 or not set(sent) <= _HEX:
        raise DispatchError("action_hash must be a sha256 in lowercase hex")
    expires = data.get("expires_ts_s")
    approvals = data.get("approvals", [])
    if not isinstance(approvals, list) or len(approvals) > MAX_APPROVALS:
        raise DispatchError(f"approvals must be a list of at most {MAX_APPROVALS}")
    fleet = data.get("fleet", "")
    if not isinstance(fleet, str) or not _FLEET_NAME.match(fleet):
        raise DispatchError(f"fleet must be at most {MAX_FLEET_CHARS} ASCII letters, digits or _.:-")
    return Dispatch(
        action,
        sent,
        None if expires is None else _number(expires, "expires_ts_s"),
        tuple(_approval(a, i) for i, a in enumerate(approvals)),
        fleet,
        parse_history(data.get("history")),
    )
