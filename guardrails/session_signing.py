"""Decisions signed by a web-console session: the second implementation of the `Verifier` seam
(`guardrails.signing`), for people signed in to the console (aiops/console) rather than holding an SSH key.

The console, once a person signed in with their password, signs the same canonical `decision_message` with an
HMAC-SHA256 under the workspace's console key (`<db>.console-key`, 32 random bytes, mode 0600, made by the
console's first start or `aiops console adduser`). The signature text names the principal:

    aiops-session-v1:<principal>:<hex HMAC-SHA256(key, "aiops-session-v1\\n" + principal + "\\n" + message)>

`SessionVerifier` recomputes it (constant-time compare) and maps the principal through the same
`[guardrails.approvers]` table as SSH principals; the key's fingerprint is `console:` + sha256(key)[:16] +
`:` + principal, so two principals never share a fingerprint and the executor's two-person rule counts them as
two people. A decision row signed this way re-verifies in `aiops audit verify` as long as the key file is
there. Trust: whoever can read the key file can sign as any console principal, as whoever can write the
allowed-signers file can add a key (docs/SECURITY.md, "Web console").
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from aiops.errors import GuardrailError, SignatureRefused
from guardrails import keyfile
from guardrails.approvals import person_name
from guardrails.signed import SignedBy

PREFIX = "aiops-session-v1"


def key_path(db_path: str) -> Path | None:
    """`<db>.console-key`; None for an in-memory store."""
    return None if db_path in ("", ":memory:") else Path(db_path + ".console-key")


def read_key(path: Path) -> bytes:
    return keyfile.read_key(path, "console")


def ensure_key(path: Path) -> bytes:
    """The key at `path`, made (0600, exclusive create) when absent; raises `GuardrailError` naming the file."""
    return keyfile.ensure_key(path, "console")


def _mac(key: bytes, principal: str, message: bytes) -> str:
    body = f"{PREFIX}\n{principal}\n".encode("ascii") + message
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def fingerprint(key: bytes, principal: str) -> str:
    return f"console:{hashlib.sha256(key).hexdigest()[:16]}:{principal}"


def is_session_signature(signature: str) -> bool:
    return signature.startswith(PREFIX + ":")


@dataclass(frozen=True)
class SessionSigner:
    """What the console signs with for the signed-in `principal` (a person's canonical name)."""

    principal: str
    key: bytes

    @property
    def label(self) -> str:
        return f"console session of {self.principal}"

    def sign(self, message: bytes) -> str:
        name = person_name(self.principal)
        return f"{PREFIX}:{name}:{_mac(self.key, name, message)}"


class SessionVerifier:
    """Checks console-session signatures against the key; `approvers` as in `SshVerifier`."""

    def __init__(self, key: bytes, approvers: Mapping[str, Sequence[str]]) -> None:
        self.key = key
        self.classes = {name: frozenset(classes) for name, classes in approvers.items()}

    def verify(self, message: bytes, signature: str) -> SignedBy:
        prefix, _, rest = signature.partition(":")
        principal, _, mac = rest.partition(":")
        if prefix != PREFIX or not principal or not mac:
            raise SignatureRefused("not a console-session signature")
        try:
            name = person_name(principal)
        except GuardrailError:
            raise SignatureRefused(f"'{principal[:40]}' is not a person's name") from None
        if name != principal or not hmac.compare_digest(mac, _mac(self.key, name, message)):
            raise SignatureRefused(
                f"the console signature does not verify for {principal[:40]} over this decision"
            )
        return SignedBy(name, fingerprint(self.key, name), self.classes.get(name, frozenset()))
