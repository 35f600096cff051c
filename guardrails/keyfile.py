"""The workspace's signing keys (`<db>.console-key`, `<db>.slack-key`): 32 random bytes in a 0600 file made by
exclusive create, so two processes racing to make one both end up with the same key. Errors name the file."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from aiops.errors import GuardrailError

KEY_BYTES = 32


def read_key(path: Path, what: str) -> bytes:
    """The key at `path`; `what` ("console", "slack") names it in errors (`<what>_key`)."""
    try:
        key = path.read_bytes()
    except OSError as exc:
        raise GuardrailError(f"{what}_key", f"{path}: cannot read: {exc.strerror}") from None
    if len(key) != KEY_BYTES:
        raise GuardrailError(f"{what}_key", f"{path}: not a {what} key ({KEY_BYTES} bytes expected)")
    return key


def ensure_key(path: Path, what: str) -> bytes:
    """The key at `path`, made (0600, exclusive create) when absent; raises `GuardrailError` naming the file."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return read_key(path, what)
    except OSError as exc:
        raise GuardrailError(f"{what}_key", f"{path}: cannot create: {exc.strerror}") from None
    try:
        os.write(fd, secrets.token_bytes(KEY_BYTES))
    finally:
        os.close(fd)
    return read_key(path, what)
