"""The audit chain's witness: every append also writes the new head (seq, hash) to an append-only file outside
the database (`<db>.witness` by default, `[guardrails] witness` in the config), opened O_APPEND and fsynced.
The chain alone shows edits inside the log; the witness shows what the chain cannot: its newest rows deleted,
the table dropped, or the whole log re-chained from an edited row onwards.

`check(rows, witness_lines)` is pure: every witnessed (seq, hash) must be in the chain as witnessed, the chain
must not end before the witness does, and every chain row must be witnessed. Someone who can write the
database but not the witness file cannot hide a change; root on the node can rewrite both (docs/SECURITY.md).

**One witness per store.** The store records its witness at its first audit append (`service_state`
`audit_witness`: `<db>.witness` for the one beside the database, else the absolute path); every command whose
config names another witness is refused (`store_path`), before it appends or compares anything. A command run
without the service's `--config` (`aiops console adduser` as docs/CONSOLE.md showed it) once wrote its rows to
another witness, and `audit verify` then reported tampering for good (issue 36, medium 5).
"""

from __future__ import annotations

import os
import re
import stat
import time
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


RECORDED_KEY = "audit_witness"
BESIDE = "<db>.witness"  # recorded for the default witness: beside the database, wherever it is moved


def _marker(store: Store, path: Path) -> str:
    return BESIDE if path == Path(store.path + ".witness") else os.path.abspath(path)


def recorded(store: Store) -> str | None:
    """The witness this store recorded at its first audit append (None: none yet)."""
    try:
        value = store.scalar("SELECT value FROM service_state WHERE key = ?", [RECORDED_KEY])
    except Exception:  # a store without the table (an old or foreign file): nothing recorded
        return None
    return None if value is None else str(value)


def store_path(store: Store) -> Path | None:
    """The witness of this store under the policy it was opened with (`store.guardrails.witness`); a
    `GuardrailError` (rule `witness`) when the store recorded another one."""
    path = default_path(store.path, store.guardrails.witness)
    if path is not None:
        ensure(store, path)
    return path


def ensure(store: Store, path: Path) -> None:
    """A `GuardrailError` (rule `witness`) when the store recorded a witness other than `path`."""
    have, mine = recorded(store), _marker(store, path)
    if have is not None and have != mine:
        wanted = "the default (<db>.witness: no [guardrails] witness)" if have == BESIDE else repr(have[:200])
        raise GuardrailError(
            "witness",
            f"{store.path}: this store's audit witness is {wanted}, this command's config names "
            f"{'<db>.witness' if mine == BESIDE else repr(mine[:200])}: run it with the config the store is "
            "served with (--config FILE or $AIOPS_CONFIG); one store has one witness",
        )


def bind(store: Store, path: Path) -> None:
    """Record `path` as the store's witness when it has none yet (the first audit append)."""
    if recorded(store) is None:
        store.conn.execute(
            "INSERT OR REPLACE INTO service_state VALUES (?, ?, ?)",
            [RECORDED_KEY, _marker(store, path), time.time()],
        )


def publish(path: Path, seq: int, digest: str) -> None:
    """Append `seq hash` and fsync; raises `GuardrailError` naming the file when it cannot."""
    publish_many(path, [(seq, digest)])


def publish_many(path: Path, heads: Sequence[tuple[int, str]]) -> None:
    """Append one `seq hash` line a head, in one write and one fsync (an audit batch's heads:
    `guardrails.audit.AuditLog.batch`); raises `GuardrailError` naming the file when it cannot. The file holds
    the same lines as one `publish` a head would have written, so `read` and `check` see no difference."""
    data = "".join(f"{seq} {digest}\n" for seq, digest in heads).encode("ascii")
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(data)
            while view:  # a regular file takes it whole; a short write's rest follows it (O_APPEND)
                view = view[os.write(fd, view) :]
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
