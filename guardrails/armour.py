"""An SSH signature as people paste it, read before `ssh-keygen` sees it: the armour that `ssh-keygen -Y sign`
writes (OpenSSH PROTOCOL.sshsig, section "Armored format": `-----BEGIN SSH SIGNATURE-----`, base64 of the
`SSHSIG` blob wrapped at 70 columns, `-----END SSH SIGNATURE-----`) survives a browser's textarea, a terminal
and a chat client with its bytes changed: a `<textarea>` submits CRLF line endings (HTML's form submission
normalises newlines to CRLF), a copy adds indentation or trailing blanks, a paste drops the final newline.
`ssh-keygen` refuses all of these ("sshsig_armor: invalid format"), so without this module a well-signed
approval pasted from a browser was refused, and the refusal blamed the allowed-signers file.

`read_armoured(text)` takes the pasted text, tolerates exactly those changes (any line endings, white space
around and inside lines, blank lines, no final newline, lines of another width, text before BEGIN or after
END such as ssh-keygen's "Signing data on standard input."), decodes the blob and checks its frame: the
`SSHSIG` magic, version 1, the namespace `aiops-approval`. It returns the canonical armour (what
`ssh-keygen` itself writes) with the signing key's SHA256 fingerprint, or raises `SignatureRefused` naming
what is wrong with the text: no BEGIN line, cut short, a line that is not base64, another namespace. Whether
the signature holds over the message, and whose key it is, stay `ssh-keygen`'s and the allowed-signers
file's to say (guardrails.signing).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
from dataclasses import dataclass

from aiops.errors import SignatureRefused

BEGIN = "-----BEGIN SSH SIGNATURE-----"
END = "-----END SSH SIGNATURE-----"
MAGIC = b"SSHSIG"
NAMESPACE = "aiops-approval"
WRAP = 70  # sshsig_armor's line width (OpenSSH sshsig.c: sshbuf_dtob64(..., 70))
MAX_ARMOUR_CHARS = 8192
_BASE64_LINE = re.compile(r"^[A-Za-z0-9+/]*={0,2}$", re.ASCII)
_WHITE = re.compile(r"\s+")
HOW = "paste the whole output of ssh-keygen -Y sign -n aiops-approval, BEGIN to END"


@dataclass(frozen=True)
class Armoured:
    text: str  # the canonical armour, LF line endings, a final newline: what ssh-keygen verifies
    fingerprint: str  # SHA256:<base64, unpadded> of the signing public key, as ssh-keygen -l prints it
    key_type: str  # ssh-ed25519, ecdsa-sha2-nistp256, ssh-rsa, sk-ssh-ed25519@openssh.com, ...
    namespace: str


def _string(blob: bytes, at: int, what: str) -> tuple[bytes, int]:
    """An SSH wire `string` (uint32 length, bytes) at `at`; the value and the offset after it."""
    if at + 4 > len(blob):
        raise SignatureRefused(f"the signature ends before its {what}: it was cut short ({HOW})")
    (length,) = struct.unpack(">I", blob[at : at + 4])
    end = at + 4 + length
    if end > len(blob):
        raise SignatureRefused(f"the signature ends inside its {what}: it was cut short ({HOW})")
    return blob[at + 4 : end], end


def _body_lines(text: str) -> list[str]:
    """The lines between BEGIN and END, each without white space; SignatureRefused when the frame is wrong."""
    lines = [_WHITE.sub("", line) for line in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    begins = [i for i, line in enumerate(lines) if line == BEGIN.replace(" ", "")]
    ends = [i for i, line in enumerate(lines) if line == END.replace(" ", "")]
    if not begins:
        raise SignatureRefused(f"not an SSH signature: no '{BEGIN}' line ({HOW})")
    if len(begins) > 1:
        raise SignatureRefused(f"{len(begins)} signatures pasted into one field: paste one")
    after = [i for i in ends if i > begins[0]]
    if not after:
        raise SignatureRefused(f"the signature is cut short: no '{END}' line after BEGIN ({HOW})")
    return [line for line in lines[begins[0] + 1 : after[0]] if line]


def read_armoured(text: str, *, namespace: str = NAMESPACE) -> Armoured:
    """The signature in pasted `text`, canonical; raises `SignatureRefused` saying what is wrong with it."""
    if not text.strip():
        raise SignatureRefused(f"no signature was given ({HOW})")
    if len(text) > MAX_ARMOUR_CHARS:
        raise SignatureRefused(f"{len(text)} characters: an SSH signature is far shorter ({HOW})")
    if not text.isascii():
        raise SignatureRefused(
            f"the signature holds characters that are not ASCII (changed while copying?; {HOW})"
        )
    body = _body_lines(text)
    if not body:
        raise SignatureRefused(f"the signature is empty between BEGIN and END ({HOW})")
    for number, line in enumerate(body, start=1):
        if not _BASE64_LINE.match(line):
            raise SignatureRefused(
                f"line {number} of the signature is not base64 (changed while copying?; {HOW})"
            )
    joined = "".join(body)
    try:
        blob = base64.b64decode(joined, validate=True)
    except (binascii.Error, ValueError):
        raise SignatureRefused(
            f"the signature's base64 does not decode: a line is missing or cut ({HOW})"
        ) from None
    if not blob.startswith(MAGIC):
        raise SignatureRefused(f"not an SSH signature: the blob is not SSHSIG ({HOW})")
    at = len(MAGIC)
    if at + 4 > len(blob):
        raise SignatureRefused(f"the signature is cut short ({HOW})")
    (version,) = struct.unpack(">I", blob[at : at + 4])
    if version != 1:
        raise SignatureRefused(f"SSHSIG version {version}: this verifier reads version 1")
    public_key, at = _string(blob, at + 4, "public key")
    signed_namespace, at = _string(blob, at, "namespace")
    _reserved, at = _string(blob, at, "reserved field")
    _hash, at = _string(blob, at, "hash algorithm")
    _signature, at = _string(blob, at, "signature")
    if at != len(blob):
        raise SignatureRefused(f"the signature has {len(blob) - at} bytes after its end ({HOW})")
    key_type, _ = _string(public_key, 0, "key type")
    found = signed_namespace.decode("ascii", "replace")
    if found != namespace:
        raise SignatureRefused(
            f"signed for the namespace '{found[:40]}', not '{namespace}': sign with ssh-keygen -Y sign "
            f"-n {namespace}"
        )
    digest = base64.b64encode(hashlib.sha256(public_key).digest()).decode("ascii").rstrip("=")
    wrapped = [joined[i : i + WRAP] for i in range(0, len(joined), WRAP)]
    canonical = "\n".join([BEGIN, *wrapped, END]) + "\n"
    return Armoured(canonical, f"SHA256:{digest}", key_type.decode("ascii", "replace"), found)
