"""Decisions taken with a Slack button: the third implementation of the `Verifier` seam (`guardrails.signing`),
beside SSH keys and console sessions.

The service verifies a button press (Slack's request signature under the app's signing secret, a fresh
timestamp, a mapped user: aiops/service/slack_actions.py), then signs the same canonical `decision_message` with
an HMAC-SHA256 under the workspace's Slack key (`<db>.slack-key`, 32 random bytes, mode 0600, made when the
service starts with `[chatops.slack]`). The signature text carries the verified request as the approval's
evidence, readable in the audit row, and the MAC covers it:

    aiops-slack-v1:principal=alice;user=U0123;team=T0456;channel=C0789;request_ts=1767225600;
        classes=digital,physical;body_sha256=<hex>;slack_signature=v0=<hex>:<hex HMAC-SHA256>

(one line). `classes` are what the chat may approve for this principal: `[chatops.slack] approval_classes`
at the press, intersected, for physical, with the principal's `[guardrails.approvers]` classes when verified.
`SlackVerifier` recomputes the MAC (constant-time compare); the fingerprint is `slack:` + sha256(key)[:16] +
`:` + principal, so a person counts once however they approve (the executor counts principals). A decision
signed this way re-verifies in `aiops audit verify` while the key file is there. Trust: whoever can read the
key file can sign as any mapped principal, as with the console key (docs/SECURITY.md).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiops.config_chatops import CHAT_CLASSES
from aiops.errors import GuardrailError, SignatureRefused
from guardrails import keyfile
from guardrails.approvals import person_name
from guardrails.signed import SignedBy

PREFIX = "aiops-slack-v1"
SUFFIX = ".slack-key"
_ID = re.compile(r"^[A-Z0-9]{2,32}$")
_HEX = re.compile(r"^[0-9a-f]{64}$")
_SLACK_SIGNATURE = re.compile(r"^v0=[0-9a-f]{64}$")
_FIELDS = ("principal", "user", "team", "channel", "request_ts", "classes", "body_sha256", "slack_signature")


def key_path(db_path: str) -> Path | None:
    """`<db>.slack-key`; None for an in-memory store."""
    return None if db_path in ("", ":memory:") else Path(db_path + SUFFIX)


def read_key(path: Path) -> bytes:
    return keyfile.read_key(path, "slack")


def ensure_key(path: Path) -> bytes:
    """The key at `path`, made (0600, exclusive create) when absent; raises `GuardrailError` naming the file."""
    return keyfile.ensure_key(path, "slack")


def is_slack_signature(signature: str) -> bool:
    return signature.startswith(PREFIX + ":")


def fingerprint(key: bytes, principal: str) -> str:
    return f"slack:{hashlib.sha256(key).hexdigest()[:16]}:{principal}"


@dataclass(frozen=True)
class SlackEvidence:
    """A button press the service verified: who pressed it where, when Slack signed it, and what it signed."""

    user_id: str
    team_id: str
    channel_id: str
    request_ts: int  # X-Slack-Request-Timestamp
    body_sha256: str  # of the raw request body
    slack_signature: str  # X-Slack-Signature, `v0=<hex>`

    def __post_init__(self) -> None:
        ids = (self.user_id, self.team_id, self.channel_id)
        if not all(_ID.match(i) for i in ids) or not _HEX.match(self.body_sha256):
            raise ValueError("Slack ids are upper-case letters and digits; body_sha256 64 hex digits")
        if not _SLACK_SIGNATURE.match(self.slack_signature) or self.request_ts < 0:
            raise ValueError("a Slack signature is v0=<64 hex digits>, its timestamp a non-negative integer")


def _text(principal: str, classes: Sequence[str], evidence: SlackEvidence) -> str:
    values = (
        principal,
        evidence.user_id,
        evidence.team_id,
        evidence.channel_id,
        str(evidence.request_ts),
        ",".join(classes),
        evidence.body_sha256,
        evidence.slack_signature,
    )
    return ";".join(f"{name}={value}" for name, value in zip(_FIELDS, values, strict=True))


def _mac(key: bytes, text: str, message: bytes) -> str:
    return hmac.new(key, f"{PREFIX}\n{text}\n".encode("ascii") + message, hashlib.sha256).hexdigest()


@dataclass(frozen=True)
class SlackSigner:
    """What the service signs with for `principal` after verifying `evidence`; `classes` as the module says."""

    principal: str
    classes: tuple[str, ...]
    evidence: SlackEvidence
    key: bytes

    @property
    def label(self) -> str:
        return f"Slack user {self.evidence.user_id} ({self.principal})"

    def sign(self, message: bytes) -> str:
        unknown = sorted(set(self.classes) - set(CHAT_CLASSES))
        if unknown:
            raise GuardrailError("slack", f"unknown chat class {unknown[0]!r} (allowed: digital, physical)")
        text = _text(person_name(self.principal), sorted(set(self.classes)), self.evidence)
        return f"{PREFIX}:{text}:{_mac(self.key, text, message)}"


def parse_fields(signature: str) -> dict[str, str]:
    """The named fields of a Slack signature's text (no MAC check); raises `SignatureRefused` when malformed."""
    prefix, _, rest = signature.partition(":")
    text, _, mac = rest.rpartition(":")
    pairs = [part.partition("=") for part in text.split(";")]
    fields = {name: value for name, _, value in pairs}
    if prefix != PREFIX or not mac or [name for name, _, _ in pairs] != list(_FIELDS):
        raise SignatureRefused("not a Slack signature")
    return fields


class SlackVerifier:
    """Checks Slack signatures against the workspace's Slack key; `approvers` as in `SshVerifier`."""

    def __init__(self, key: bytes, approvers: Mapping[str, Sequence[str]]) -> None:
        self.key = key
        self.classes = {name: frozenset(classes) for name, classes in approvers.items()}

    def verify(self, message: bytes, signature: str) -> SignedBy:
        fields = parse_fields(signature)
        text, _, mac = signature.partition(":")[2].rpartition(":")
        principal = fields["principal"]
        try:
            name = person_name(principal)
        except GuardrailError:
            raise SignatureRefused(f"'{principal[:40]}' is not a person's name") from None
        if name != principal or not hmac.compare_digest(mac, _mac(self.key, text, message)):
            raise SignatureRefused(
                f"the Slack signature does not verify for {principal[:40]} over this decision"
            )
        granted = frozenset(fields["classes"].split(",")) - {""}
        # physical only when the chat granted it AND the principal may approve physical decisions at all
        allowed = (granted & {"digital"}) | (granted & self.classes.get(name, frozenset()))
        return SignedBy(name, fingerprint(self.key, name), allowed)
