"""Issue 34 item 7: a signature pasted from a real browser verifies. A `<textarea>` submits CRLF line endings, a
copy adds indentation or trailing blanks, a paste drops the final newline; `ssh-keygen` refuses all of them
("sshsig_armor: invalid format"), and the verifier used to blame the allowed-signers file. Each variant of a
real `ssh-keygen -Y sign` signature verifies here; each malformed text is refused with what is wrong with the
text, never a word about the allowed-signers file."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from aiops.errors import SignatureRefused
from guardrails.armour import BEGIN, END, read_armoured
from guardrails.signing import decision_message
from tests.signing_helpers import Keys, make_keys, ssh_sign

MESSAGE = decision_message("approve", ts_s=1.0, expires_ts_s=2.0, proposal_id="P-1", action_hash="a" * 64)


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    return make_keys(tmp_path_factory.mktemp("paste-keys"), ("alice",))


def _rewrap(signature: str, width: int) -> str:
    body = "".join(signature.strip().splitlines()[1:-1])
    return "\n".join([BEGIN, *(body[i : i + width] for i in range(0, len(body), width)), END])


@pytest.mark.parametrize(
    "variant",
    [
        pytest.param(lambda s: s.replace("\n", "\r\n"), id="crlf-as-a-textarea-submits"),
        pytest.param(lambda s: s.rstrip("\n"), id="no-final-newline"),
        pytest.param(lambda s: "\n\n   " + s + "   \n\n", id="white-space-around"),
        pytest.param(lambda s: "\n".join("    " + line + " \t" for line in s.splitlines()), id="indented"),
        pytest.param(lambda s: s.replace("\n", "\r"), id="cr-only"),
        pytest.param(lambda s: _rewrap(s, 64), id="wrapped-at-64"),
        pytest.param(lambda s: "Signing data on standard input.\r\n" + s, id="ssh-keygen-stderr-above"),
        pytest.param(lambda s: s.replace("\n", "\r\n").rstrip() + "\r\n\r\n", id="crlf-and-blank-tail"),
    ],
)
def test_a_signature_changed_as_pasting_changes_it_still_verifies(keys: Keys, variant: object) -> None:
    signature = ssh_sign(keys.keys["alice"], MESSAGE)
    pasted = variant(signature)  # type: ignore[operator]
    assert pasted != signature
    assert read_armoured(pasted).text == signature  # back to the bytes ssh-keygen wrote
    assert keys.verifier().verify(MESSAGE, pasted).principal == "alice"


def test_the_fingerprint_read_from_the_armour_is_the_keys(keys: Keys) -> None:
    signature = ssh_sign(keys.keys["alice"], MESSAGE)
    shown = subprocess.run(
        ["ssh-keygen", "-l", "-f", f"{keys.keys['alice']}.pub"], capture_output=True, check=True, text=True
    ).stdout.split()[1]
    assert read_armoured(signature).fingerprint == shown and shown.startswith("SHA256:")


def _refusal(keys: Keys, text: str) -> str:
    with pytest.raises(SignatureRefused) as caught:
        keys.verifier().verify(MESSAGE, text)
    return caught.value.detail


def test_a_malformed_paste_is_refused_with_what_is_wrong_with_the_text(keys: Keys) -> None:
    signature = ssh_sign(keys.keys["alice"], MESSAGE)
    lines = signature.splitlines()
    cases = {
        "no '-----BEGIN SSH SIGNATURE-----' line": "\n".join(lines[1:]),
        "cut short: no '-----END SSH SIGNATURE-----' line": "\n".join(lines[:-1]),
        "line 2 of the signature is not base64": "\n".join([*lines[:2], lines[2][:30] + "*", *lines[3:]]),
        "does not decode": "\n".join([*lines[:2], lines[2][:-3], *lines[3:]]),
        "2 signatures pasted": signature + signature,
        "no signature was given": "  \r\n ",
        "not ASCII": signature.replace("U1NI", "U1NI\u00a0", 1),
    }
    for reason, text in cases.items():
        detail = _refusal(keys, text)
        assert reason in detail, (reason, detail)
        assert "allowed" not in detail and str(keys.allowed) not in detail, detail


def test_another_namespace_and_another_key_are_named(keys: Keys, tmp_path: Path) -> None:
    detail = _refusal(keys, ssh_sign(keys.keys["alice"], MESSAGE, namespace="file"))
    assert "namespace 'file'" in detail and "-n aiops-approval" in detail, detail
    stranger = make_keys(tmp_path / "other", ("eve",))
    signature = ssh_sign(stranger.keys["eve"], MESSAGE)
    detail = _refusal(keys, signature.replace("\n", "\r\n"))  # CRLF too: the key, not the text, is named
    assert "signing key is not" in detail and read_armoured(signature).fingerprint in detail, detail


def test_a_signature_over_other_bytes_says_so(keys: Keys) -> None:
    other = ssh_sign(keys.keys["alice"], MESSAGE + b"\n")
    detail = _refusal(keys, other.replace("\n", "\r\n"))
    assert "does not verify for alice" in detail and "newline" in detail, detail
