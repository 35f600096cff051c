"""`SignedBy`: who signed a decision, as any `Verifier` (SSH, console session) names them."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SignedBy:
    principal: str  # a person's name, as the allowed-signers file or the console's accounts name them
    fingerprint: str  # the key's SHA256 fingerprint (SSH), or `console:<key digest>:<principal>`
    risk_classes: frozenset[str]  # what this principal may approve
