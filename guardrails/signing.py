"""Signed decisions: an approval (or rejection, or a response policy's approval or revocation) is an SSH
signature by a person's key over a canonical message, verified against an OpenSSH allowed-signers file.

The model is git's and OpenSSH's (`ssh-keygen -Y sign|verify|find-principals`, namespace `aiops-approval`,
PROTOCOL.sshsig); this module only runs the real `ssh-keygen` (an argument list, never a shell).

- `decision_message(...)`: the canonical bytes a person signs: decision, proposal id and action hash (or the
  policy's sha256), when, until when. A signature over one message says nothing about any other.
- `Verifier` (protocol): `verify(message, signature) -> SignedBy` or `SignatureRefused`. `SshVerifier` is the
  one built; a web console can add an authenticated-session verifier behind the same seam.
- `Signer` (protocol): `sign(message) -> armored signature`. `SshSigner`: a private key file, or a public key
  whose private half the ssh-agent at $SSH_AUTH_SOCK holds.
- Principals are people: each name in the allowed-signers file must pass `person_name` unchanged (no
  `alice.` beside `alice`, no reserved names), and a key listed under two principals verifies for neither.
- What a principal may approve is `[guardrails.approvers]` in the config: `alice = ["physical", "policy"]`.
"""

from __future__ import annotations

import os
import re
import subprocess
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from aiops.config import GuardrailsConfig
from aiops.errors import GuardrailError, SignatureRefused
from aiops.safeload import permission_problem
from guardrails.actions import canonical_json
from guardrails.approvals import person_name
from guardrails.armour import read_armoured
from guardrails.session_signing import SessionVerifier, is_session_signature, key_path, read_key
from guardrails.signed import SignedBy as SignedBy  # re-exported: callers import it from here
from guardrails.slack_signing import SlackVerifier, is_slack_signature
from guardrails.slack_signing import key_path as slack_key_path
from guardrails.slack_signing import read_key as read_slack_key

NAMESPACE = "aiops-approval"
RISK_CLASSES: tuple[str, ...] = (
    "physical",
    "policy",
    "breaker",
)  # approve physical proposals; approve response policies; override the circuit breaker (guardrails.breaker)
DECISIONS: tuple[str, ...] = ("approve", "reject", "policy_approve", "policy_revoke", "breaker_override")
_TIMEOUT_S = 10.0
_GOOD = re.compile(r'Good "[^"]*" signature for (\S+) with (\S+) key (SHA256:[A-Za-z0-9+/=]+)')


class Verifier(Protocol):
    def verify(self, message: bytes, signature: str) -> SignedBy: ...


class Signer(Protocol):
    @property
    def label(self) -> str: ...

    def sign(self, message: bytes) -> str: ...


def decision_message(
    decision: str,
    *,
    ts_s: float,
    expires_ts_s: float,
    proposal_id: str = "",
    action_hash: str = "",
    policy_sha256: str = "",
) -> bytes:
    """The canonical bytes signed for one decision (sorted-key JSON, ASCII escapes)."""
    if decision not in DECISIONS:
        raise ValueError(f"unknown decision '{decision}' (decisions: {', '.join(DECISIONS)})")
    body = {
        "namespace": NAMESPACE,
        "v": 1,
        "decision": decision,
        "ts_s": float(ts_s),
        "expires_ts_s": float(expires_ts_s),
        "proposal_id": proposal_id,
        "action_hash": action_hash,
        "policy_sha256": policy_sha256,
    }
    return canonical_json(body).encode("ascii")


def _ssh_keygen(args: list[str], stdin: bytes = b"", env: Mapping[str, str] | None = None) -> tuple[int, str]:
    try:
        done = subprocess.run(
            ["ssh-keygen", *args], input=stdin, capture_output=True, timeout=_TIMEOUT_S, env=env, check=False
        )
    except FileNotFoundError:
        raise GuardrailError("signature", "ssh-keygen not found: install openssh-client") from None
    except subprocess.TimeoutExpired:
        raise GuardrailError("signature", f"ssh-keygen did not answer within {_TIMEOUT_S:g} s") from None
    out = (done.stdout + done.stderr).decode("utf-8", "replace")
    return done.returncode, out


def load_principals(path: Path) -> dict[str, int]:
    """Every principal of an allowed-signers file and the line naming it. Each must be a person's canonical
    name, and a key may name one principal only (one key, one person: `ssh-keygen -Y find-principals`
    answers the first line that lists a key, so a second name on the same key is refused here). Raises
    `GuardrailError` naming the file and line."""
    problem = permission_problem(path)  # who may approve what: nobody else may be able to write it
    if problem is not None:
        raise GuardrailError("allowed_signers", f"{path}: refused, as sshd's StrictModes would: {problem}")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GuardrailError("allowed_signers", f"{path}: cannot read: {exc}") from None
    found: dict[str, int] = {}
    owners: dict[str, str] = {}  # key blob -> principal
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if 'namespaces="' + NAMESPACE + '"' not in line:
            raise GuardrailError(
                "allowed_signers", f'{path}:{number}: every key needs namespaces="{NAMESPACE}"'
            )
        blobs = [w for w in line.split() if w.startswith("AAAA")]
        names = line.split()[0].split(",")
        for name in names:
            try:
                canonical = person_name(name)
            except GuardrailError as exc:
                raise GuardrailError("allowed_signers", f"{path}:{number}: {exc.detail}") from None
            if canonical != name:
                raise GuardrailError(
                    "allowed_signers",
                    f"{path}:{number}: principal '{name[:40]}' must be written as '{canonical}'",
                )
            for blob in blobs[:1]:
                owner = owners.setdefault(blob, name)
                if owner != name:
                    raise GuardrailError(
                        "allowed_signers",
                        f"{path}:{number}: the key of {owner} is listed again under {name}: one key, one person",
                    )
            found.setdefault(name, number)
    return found


class SshVerifier:
    """`ssh-keygen -Y find-principals` then `-Y verify` against `allowed_signers`; `approvers` maps each
    principal to the risk classes it may approve. Results are cached per (message, signature)."""

    def __init__(self, allowed_signers: str | Path, approvers: Mapping[str, Sequence[str]]) -> None:
        self.path = Path(allowed_signers)
        self.principals = load_principals(self.path)
        self.classes: dict[str, frozenset[str]] = {}
        for name, classes in approvers.items():
            unknown = sorted(set(classes) - set(RISK_CLASSES))
            if unknown:
                raise GuardrailError(
                    "approvers",
                    f"{name}: unknown risk class {unknown[0]!r} (allowed: {', '.join(RISK_CLASSES)})",
                )
            self.classes[name] = frozenset(classes)
        self._cache: dict[tuple[bytes, str], SignedBy] = {}

    def verify(self, message: bytes, signature: str) -> SignedBy:
        key = (message, signature)
        if key not in self._cache:
            self._cache[key] = self._verify(message, signature)
        return self._cache[key]

    def _verify(self, message: bytes, signature: str) -> SignedBy:
        armoured = read_armoured(signature)  # the text as pasted (CRLF, blanks): canonical, or the reason
        with tempfile.TemporaryDirectory(prefix="aiops-sig-") as folder:
            sig_path = Path(folder) / "decision.sig"
            sig_path.write_text(armoured.text, encoding="ascii")
            rc, out = _ssh_keygen(
                ["-Y", "find-principals", "-f", str(self.path), "-n", NAMESPACE, "-s", str(sig_path)]
            )
            names = [n for n in out.split() if n in self.principals] if rc == 0 else []
            if len(set(names)) != 1:  # several: the loader refuses such a file, so this is defence in depth
                raise SignatureRefused(
                    f"the signing key is not (or not once) in {self.path}: {armoured.key_type} key "
                    f"{armoured.fingerprint} (ssh-keygen -lf KEY.pub shows a key's fingerprint)"
                )
            rc, out = _ssh_keygen(
                ["-Y", "verify", "-f", str(self.path), "-I", names[0], "-n", NAMESPACE, "-s", str(sig_path)],
                stdin=message,
            )
        good = _GOOD.search(out)
        if rc != 0 or good is None or good.group(1) != names[0]:
            raise SignatureRefused(
                f"the signature does not verify for {names[0]} over this decision: {names[0]}'s key signed "
                "other bytes (another message, or this one changed, e.g. a newline added: sign the file "
                "as written)"
            )
        return SignedBy(names[0], good.group(3), self.classes.get(names[0], frozenset()))


@dataclass(frozen=True)
class SshSigner:
    """Signs with `key`: a private key file, or a `.pub` whose private key the ssh-agent holds."""

    key: Path

    @property
    def label(self) -> str:
        return f"key {self.key}"

    def sign(self, message: bytes) -> str:
        if not self.key.exists():
            raise GuardrailError("signature", f"{self.key}: no such key file")
        env = dict(os.environ)
        if self.key.name.endswith(".pub") and not env.get("SSH_AUTH_SOCK"):
            raise GuardrailError(
                "signature", f"{self.key} is a public key and no ssh-agent runs (SSH_AUTH_SOCK)"
            )
        rc, out = _ssh_keygen(
            ["-Y", "sign", "-q", "-n", NAMESPACE, "-f", str(self.key)], stdin=message, env=env
        )
        start = out.find("-----BEGIN SSH SIGNATURE-----")
        if rc != 0 or start < 0:
            raise GuardrailError(
                "signature", f"ssh-keygen could not sign with {self.key}: {out.strip()[:200]}"
            )
        return out[start:]


def require_class(signed: SignedBy, risk_class: str) -> None:
    if risk_class not in signed.risk_classes:
        have = ", ".join(sorted(signed.risk_classes)) or "nothing"
        raise SignatureRefused(
            f"{signed.principal} may not approve {risk_class} decisions (may approve: {have}; "
            f"see [guardrails.approvers])"
        )


class ConfiguredVerifier:
    """An `SshVerifier` over `guardrails.allowed_signers` and `guardrails.approvers` (the config of the command
    that was started, passed down: never read here from the environment or the home directory), loaded when
    first asked; with no allowed-signers file every SSH signature is refused (nobody approves). Given the
    workspace's `db_path`, console-session signatures (`guardrails.session_signing`) verify against the
    workspace's console key and the same approvers, and Slack signatures (`guardrails.slack_signing`) against
    the workspace's Slack key; without the key file they are refused."""

    def __init__(self, guardrails: GuardrailsConfig, db_path: str = "") -> None:
        self._inner: SshVerifier | None = None
        self._session: SessionVerifier | None = None
        self._slack: SlackVerifier | None = None
        self.guardrails = guardrails
        self.db_path = db_path

    def verify(self, message: bytes, signature: str) -> SignedBy:
        if is_session_signature(signature):
            return self._session_verifier().verify(message, signature)
        if is_slack_signature(signature):
            return self._slack_verifier().verify(message, signature)
        if self._inner is None:
            if not self.guardrails.allowed_signers:
                raise SignatureRefused(
                    "no allowed-signers file is configured ([guardrails] allowed_signers; docs/SECURITY.md)"
                )
            self._inner = SshVerifier(self.guardrails.allowed_signers, self.guardrails.approvers)
        return self._inner.verify(message, signature)

    def _session_verifier(self) -> SessionVerifier:
        if self._session is None:
            key = self._workspace_key(
                key_path(self.db_path), read_key, "a console-session signature", "console"
            )
            self._session = SessionVerifier(key, self.guardrails.approvers)
        return self._session

    def _slack_verifier(self) -> SlackVerifier:
        if self._slack is None:
            key = self._workspace_key(
                slack_key_path(self.db_path), read_slack_key, "a Slack signature", "Slack"
            )
            self._slack = SlackVerifier(key, self.guardrails.approvers)
        return self._slack

    @staticmethod
    def _workspace_key(path: Path | None, read: Callable[[Path], bytes], what: str, whose: str) -> bytes:
        """The workspace's key for `what`; refused (never a crash) when the workspace has none or it is bad."""
        if path is None or not path.exists():
            raise SignatureRefused(f"{what}, and this workspace has no {whose} key")
        try:
            return read(path)
        except GuardrailError as exc:
            raise SignatureRefused(exc.detail) from None


def configured_signer(key: str | None, guardrails: GuardrailsConfig) -> SshSigner:
    """`key`, else `guardrails.signing_key`; raises `GuardrailError` when neither is set."""
    key = key or guardrails.signing_key
    if not key:
        raise GuardrailError(
            "signature", "no signing key: pass --key FILE or set [guardrails] signing_key (docs/SECURITY.md)"
        )
    return SshSigner(Path(key).expanduser())
