"""The audit chain's witness: every append also writes the new head (seq, hash) to an append-only file outside
the database (`<db>.witness` by default, `[guardrails] witness` in the config), opened O_APPEND and fsynced.
The chain alone shows edits inside the log; the witness shows what the chain cannot: its newest rows deleted,
the table dropped, or the whole log re-chained from an edited row onwards.

`check(rows, witness_lines)` is pure: every witnessed (seq, hash) must be in the chain as witnessed, the chain
must not end before the witness does, and every chain row must be witnessed. Someone who can write the
database but not the witness file cannot hide a change; root on the node can rewrite both (docs/SECURITY.md).
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from aiops.errors import GuardrailError, InputError
from aiops.store import Store

_LINE = re.compile(r"^(\d{1,18}) ([0-9a-f]{64})$")


def default_path(db_path: str, configured: str = "") -> Path | None:
    """`configured` (the `[guardrails] witness` of the command's config), else `<db>.witness`; None for an
    in-memory store."""
    if db_path == ":memory:":
        return None
    return Path(configured).expanduser() if configured else Path(db_path + ".witness")


def store_path(store: Store) -> Path | None:
    """The witness of this store under the policy it was opened with (`store.guardrails.witness`)."""
    return default_path(store.path, store.guardrails.witness)


def publish(path: Path, seq: int, digest: str) -> None:
    """Append `seq hash` and fsync; raises `GuardrailError` naming the file when it cannot."""
    line = f"{seq} {digest}\n".encode("ascii")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
            os.fsync(fd)
        finally:
            os.close(fd)
    except OSError as exc:
        raise GuardrailError("witness", f"{path}: cannot append the audit head: {exc.strerror}") from None


MAX_WITNESS_BYTES = 64 * 1024 * 1024  # ~800,000 heads (83 bytes each); a larger witness is refused


def _read_bounded(path: Path, limit_bytes: int) -> bytes:
    """The bytes of the regular file at `path` (a symlink is followed, but must end at a regular file), at most
    `limit_bytes`: a FIFO, a device or a socket is refused before any read, so nothing blocks or runs on.
    Those, and an oversized file, raise `InputError` (exit 2): the witness is not one to compare."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY)
    except FileNotFoundError:
        raise GuardrailError("witness", f"{path}: no witness file") from None
    except OSError as exc:
        raise GuardrailError("witness", f"{path}: cannot read: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise InputError(
                str(path), "witness", "not a regular file (a FIFO, device or socket is never read)"
            )
        chunks: list[bytes] = []
        size = 0
        while size <= limit_bytes:
            chunk = os.read(fd, min(1 << 20, limit_bytes + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit_bytes:
            raise InputError(
                str(path), "witness", f"larger than {limit_bytes} bytes: not a witness, not read"
            )
        return b"".join(chunks)
    except OSError as exc:
        raise GuardrailError("witness", f"{path}: cannot read: {exc.strerror}") from None
    finally:
        os.close(fd)


def read(path: Path, limit_bytes: int = MAX_WITNESS_BYTES) -> list[tuple[int, str]]:
    """The witnessed heads in file order; raises `GuardrailError` naming the file and line. Only a regular
    file of at most `limit_bytes` is read (docs/SECURITY.md)."""
    try:
        text = _read_bounded(path, limit_bytes).decode("ascii")
    except UnicodeDecodeError:
        raise GuardrailError("witness", f"{path}: not ASCII text (not a witness)") from None
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        match = _LINE.match(line)
        if match is None:
            raise GuardrailError("witness", f"{path}:{number}: not 'SEQ HASH' (a line was edited?)")
        out.append((int(match.group(1)), match.group(2)))
    return out


@dataclass(frozen=True)
class WitnessResult:
    ok: bool
    problems: tuple[str, ...]
    witnessed: int  # heads in the witness

    @property
    def message(self) -> str:
        if self.ok:
            return f"witness agrees: {self.witnessed} heads"
        return "witness disagrees: " + "; ".join(self.problems)


def check(chain: Sequence[tuple[int, str]] | None, witnessed: Sequence[tuple[int, str]]) -> WitnessResult:
    """Compare the chain's (seq, hash) rows (None: no audit table) with the witnessed heads."""
    problems: list[str] = []
    if chain is None:
        return WitnessResult(False, ("the audit_log table is missing (dropped?)",), len(witnessed))
    hashes = dict(chain)
    last_seq = max(hashes, default=0)
    seen: dict[int, str] = {}
    rechained = []
    for seq, digest in witnessed:
        if seq in seen and seen[seq] != digest:
            problems.append(f"the witness names two hashes for seq {seq}")
        seen[seq] = digest
        if seq in hashes and hashes[seq] != digest:
            rechained.append(seq)
    top = max(seen, default=0)
    if top > last_seq:
        problems.append(
            f"missing tail rows: the witness has seq {top}, the log ends at seq {last_seq} "
            f"({top - last_seq} row(s) deleted)"
        )
    missing = sorted(s for s in seen if s <= last_seq and s not in hashes)
    if missing:
        problems.append(f"witnessed rows missing from the log: seq {', '.join(map(str, missing[:10]))}")
    if rechained:
        problems.append(
            f"re-chained rows: seq {', '.join(map(str, rechained[:10]))} differ from their witnessed hash"
        )
    unwitnessed = sorted(s for s in hashes if s not in seen)
    if unwitnessed:
        problems.append(
            f"rows not in the witness: seq {', '.join(map(str, unwitnessed[:10]))} (written around the guardrails?)"
        )
    return WitnessResult(not problems, tuple(problems), len(seen))
