"""The bytes a person signs to approve one step of a remediation plan with all its targets (issue 34): one SSH
signature (`ssh-keygen -Y sign -n aiops-approval`) over a canonical message that names the step and, for every
target, the proposal id, the action's hash and the component. The signature says nothing about any proposal
the message does not name, nor about another version of a named action (its hash would differ). Sorted-key
JSON, ASCII escapes, no spaces:

    {"decision":"approve_step","expires_ts_s":...,"namespace":"aiops-approval","step_id":"PL-1a2b3c4d.2",
     "targets":[{"action_hash":"<sha256>","proposal_id":"P-...","target":"node6"}, ...],"ts_s":...,"v":1}

Targets are listed by proposal id, each once. Pure: `guardrails.steps` records such an approval,
`guardrails.decisions` re-verifies it from the audit log, `guardrails.dispatched` checks it on the node that acts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from guardrails.actions import canonical_json

NAMESPACE = "aiops-approval"
DECISION = "approve_step"
EVENT = "step_approval"  # the audit event: proposal_id = the step id, actor = the signer
MAX_TARGETS = 64
_STEP_ID = re.compile(r"^[A-Za-z0-9_.:-]{1,80}$", re.ASCII)
_HEX64 = re.compile(r"^[0-9a-f]{64}$", re.ASCII)


@dataclass(frozen=True, order=True)
class StepTarget:
    proposal_id: str
    action_hash: str
    target: str

    def json(self) -> dict[str, str]:
        return {"proposal_id": self.proposal_id, "action_hash": self.action_hash, "target": self.target}


def valid_step_id(step_id: str) -> bool:
    return bool(_STEP_ID.match(step_id))


def step_message(step_id: str, *, ts_s: float, expires_ts_s: float, targets: Sequence[StepTarget]) -> bytes:
    """The canonical bytes signed to approve step `step_id` with exactly these targets. ValueError for an empty
    or repeated target list, or a malformed id or hash."""
    if not valid_step_id(step_id):
        raise ValueError("a step id is 1-80 ASCII letters, digits or _.:-")
    ordered = sorted(targets)
    if not ordered or len(ordered) > MAX_TARGETS:
        raise ValueError(f"a step names 1 to {MAX_TARGETS} targets")
    if len({t.proposal_id for t in ordered}) != len(ordered):
        raise ValueError("a step names each proposal once")
    if not all(_HEX64.match(t.action_hash) for t in ordered):
        raise ValueError("an action hash is a sha256 in lowercase hex")
    body = {
        "namespace": NAMESPACE,
        "v": 1,
        "decision": DECISION,
        "step_id": step_id,
        "ts_s": float(ts_s),
        "expires_ts_s": float(expires_ts_s),
        "targets": [t.json() for t in ordered],
    }
    return canonical_json(body).encode("ascii")


def targets_of(raw: Any) -> tuple[StepTarget, ...]:
    """The targets a recorded or received step approval names (hostile data: ValueError when malformed)."""
    if not isinstance(raw, list) or not 0 < len(raw) <= MAX_TARGETS:
        raise ValueError(f"targets must be a list of 1 to {MAX_TARGETS}")
    out = []
    for item in raw:
        if not isinstance(item, dict):
            raise ValueError("each target must be an object")
        fields = [item.get(k) for k in ("proposal_id", "action_hash", "target")]
        if not all(isinstance(f, str) and 0 < len(f) <= 200 and f.isascii() for f in fields):
            raise ValueError("each target needs proposal_id, action_hash and target as ASCII text")
        out.append(StepTarget(str(fields[0]), str(fields[1]), str(fields[2])))
    return tuple(sorted(out))
