"""The append-only audit log: every proposal, validation, approval, rejection, execution, verification,
policy approval, LLM turn and tool call, hash-chained in DuckDB so an edit, a deletion or a reordering shows.

Row `seq` (1, 2, ...) stores `prev_hash` (the previous row's hash; 64 zeros for the first) and
`hash = sha256(prev_hash + "\\n" + canonical_json([seq, ts_s, event, proposal_id, actor]) + "\\n" + payload)`,
`payload` being the canonical JSON text exactly as stored. `verify` recomputes the chain in `seq` order.
The table comes from migration 003 (aiops/store/migrations.py): one chain per workspace, holding the CLI's,
the chat's, the DCIM rounds' and the service's events alike.

The chain shows changes inside the log; removing its newest rows leaves a valid shorter chain, so every
append also publishes the new head to the witness (`guardrails.witness`, `<db>.witness`): `verify_witness`
finds deleted tail rows, a dropped table and re-chained rows. A missing `audit_log` table fails `verify`.

An append commits its row, then publishes its head (one fsync'd write): a crash between the two leaves a row the
witness never saw, which `verify_witness` reports ("rows not in the witness") as it would a row written around
the guardrails; docs/SECURITY.md says how a person tells an honest crash and recovers. `AuditLog.batch()` (a plan step's
proposals: aiops/plans/lifecycle.py) keeps that order for many appends at once: one transaction, then every
head in one write and one fsync (see its docstring for what a crash or an exception inside one leaves);
`AuditLog.append_many` appends many entries in one batch as one statement, chained here from the head.
"""

from __future__ import annotations

import contextlib
import json
import time
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb

from aiops.store import Store
from guardrails import witness
from guardrails.actions import canonical_json, sha256_hex

EVENTS: tuple[str, ...] = (
    "proposal",
    "validation",
    "approval",
    "rejection",
    "execution",
    "verification",
    "rollback",
    "policy_approval",
    "expiry",
    "llm_turn",
    "tool_call",
    # what the agent's journal records besides (aiops.agent.journal)
    "question",
    "answer",
    "llm_failure",
    "approval_refused",
    "report",
    # console account management (aiops.console.manage): who added, changed or deleted which account
    "account",
    # actions run where they act: a node's refusal of a fleet's dispatch (guardrails.dispatched); the fleet's
    # record of sending one and of the node's answer (aiops.fleet.dispatch)
    "dispatch_refused",
    "dispatch",
    "dispatch_result",
    # a digital proposal someone asked to run from chat, with the verified request (aiops/service/slack_actions.py)
    "chat_request",
    # incidents and paging (aiops/service/live.py, aiops/store/maintenance.py): legacy incident ids qualified
    # with the tier's prefix (the old -> new mapping); a maintenance window or silence added or ended
    "incident_ids",
    "maintenance",
    # a person's signed lift of the circuit breaker's limit (guardrails.overrides)
    "breaker_override",
    # the rollback proposals filed for an executed action, on the original's trail (aiops/runtime/rollback.py)
    "rollback_filed",
    # the closed loop (guardrails/supersede.py, aiops/runtime/outcomes.py): a proposal closed because the same
    # action ran elsewhere (the other tier), and whether an executed action worked once its window passed
    "supersede",
    "outcome",
    # one signature approving every target of a plan step (guardrails/steps.py; proposal_id: the step's id),
    # and a plan's changes (aiops/plans: filed, a step proposed by escalation or by a person, superseded)
    "step_approval",
    "plan",
)
GENESIS_HASH = "0" * 64


def row_hash(
    prev_hash: str, seq: int, ts_s: float, event: str, proposal_id: str, actor: str, payload: str
) -> str:
    head = canonical_json([seq, ts_s, event, proposal_id, actor])
    return sha256_hex(f"{prev_hash}\n{head}\n{payload}")


@dataclass(frozen=True)
class AuditRow:
    seq: int
    ts_s: float
    event: str
    proposal_id: str
    actor: str
    payload: str
    prev_hash: str
    hash: str

    def values(self) -> tuple[int, float, str, str, str, str, str, str]:
        """The row's columns in the table's order."""
        return (
            self.seq,
            self.ts_s,
            self.event,
            self.proposal_id,
            self.actor,
            self.payload,
            self.prev_hash,
            self.hash,
        )

    def data(self) -> dict[str, Any]:
        loaded: dict[str, Any] = json.loads(self.payload)
        return loaded


@dataclass(frozen=True)
class VerifyResult:
    ok: bool
    rows: int
    first_broken_seq: int | None = None
    problem: str = ""
    head_hash: str = GENESIS_HASH

    @property
    def message(self) -> str:
        if self.ok:
            return f"audit log ok: {self.rows} rows, head {self.head_hash[:16]}"
        return f"audit log broken at seq {self.first_broken_seq}: {self.problem}"


@dataclass(frozen=True)
class Entry:
    """One entry for `AuditLog.append_many`: what `append` takes (`ts_s` None: the log's clock)."""

    event: str
    payload: dict[str, Any]
    proposal_id: str = ""
    actor: str = ""
    ts_s: float | None = None


def chained(head: tuple[int, str], entries: Sequence[tuple[float, str, str, str, str]]) -> list[AuditRow]:
    """The rows of `entries` (ts_s, event, proposal_id, actor, payload text) chained in order onto `head` (the
    newest row's seq and hash): what appending them one by one stores."""
    seq, prev = head
    out = []
    for when, event, proposal_id, actor, text in entries:
        seq += 1
        digest = row_hash(prev, seq, when, event, proposal_id, actor, text)
        out.append(AuditRow(seq, when, event, proposal_id, actor, text, prev, digest))
        prev = digest
    return out


@dataclass
class _Batch:
    """An open `AuditLog.batch()` on one store: the heads its appends made, in order (published at its end)."""

    witness_path: Path | None
    heads: list[tuple[int, str]] = field(default_factory=list)
    # the chain's newest (seq, hash) once the first append read it: every later one in the batch goes on it
    head: tuple[int, str] | None = None


# the open batch of each store (keyed on the Store: every AuditLog over it appends inside it, not beside it)
_open_batches: weakref.WeakKeyDictionary[Store, _Batch] = weakref.WeakKeyDictionary()


class AuditLog:
    """Appends to `audit_log` in the store's DuckDB file. There is no update or delete method."""

    def __init__(self, store: Store, clock: Any = time.time, witness_path: Path | None = None) -> None:
        self.store = store
        self.clock = clock
        self.witness_path = witness_path if witness_path is not None else witness.store_path(store)

    @contextlib.contextmanager
    def batch(self) -> Iterator[None]:
        """Many appends as one: every statement run on the store's connection inside (the appends, and what the
        caller writes beside them) is one DuckDB transaction, and once it commits, every head of its appends is
        published in one write and one fsync (`witness.publish_many`), not one each. Rows are chained, stored
        and visible on this connection as `append` makes them; each is witnessed under its own seq, as before,
        so `verify_witness` checks a batch's rows as it checks any others. A batch opened inside another joins it.

        An exception inside rolls the whole transaction back (the batch's rows and whatever else was written on
        the connection) and publishes nothing: the chain and the witness stand as before the batch. So does a
        crash before the commit (DuckDB keeps no uncommitted transaction). A crash between the commit and the
        witness's fsync leaves the batch's rows committed and not witnessed, as a crash between one `append`'s
        commit and its publish always has: `verify_witness` reports them as rows not in the witness (they are
        the chain's newest, following its last witnessed head); docs/SECURITY.md ("A crash before the witness")
        says how an operator confirms a crash and appends their heads. Code inside must not open a transaction
        of its own on this connection (DuckDB refuses one inside another)."""
        if _open_batches.get(self.store) is not None:
            yield  # inside an open batch: its transaction and its one publish hold these appends too
            return
        if self.witness_path is not None:
            witness.ensure(self.store, self.witness_path)  # refused before anything is written: one witness
        conn = self.store.conn
        batch = _Batch(self.witness_path)
        conn.execute("BEGIN TRANSACTION")
        _open_batches[self.store] = batch
        try:
            yield
            conn.execute("COMMIT")
        except BaseException:
            with contextlib.suppress(duckdb.TransactionException):  # a failed COMMIT ended it already
                conn.execute("ROLLBACK")
            raise
        finally:
            del _open_batches[self.store]
        if batch.witness_path is not None and batch.heads:
            witness.publish_many(batch.witness_path, batch.heads)

    def append(
        self,
        event: str,
        payload: dict[str, Any],
        *,
        proposal_id: str = "",
        actor: str = "",
        ts_s: float | None = None,
    ) -> AuditRow:
        if event not in EVENTS:
            raise ValueError(f"unknown audit event '{event}' (events: {', '.join(EVENTS)})")
        text = canonical_json(payload)
        when = float(self.clock() if ts_s is None else ts_s)
        batch = _open_batches.get(self.store)
        if batch is not None:  # in the batch's transaction; its head is published when the batch ends
            # the first append binds the store's witness (when it has none yet); the rest need not ask
            bind = batch.witness_path if batch.head is None else None
            row = self._insert(bind, batch.head, when, event, proposal_id, actor, text)
            batch.head = (row.seq, row.hash)
            batch.heads.append(batch.head)
            return row
        conn = self.store.conn
        if self.witness_path is not None:
            witness.ensure(self.store, self.witness_path)  # refused before anything is written: one witness
        conn.execute("BEGIN TRANSACTION")
        try:
            row = self._insert(self.witness_path, None, when, event, proposal_id, actor, text)
            conn.execute("COMMIT")
        except Exception:
            conn.execute("ROLLBACK")
            raise
        if self.witness_path is not None:
            witness.publish(self.witness_path, row.seq, row.hash)
        return row

    def append_many(self, entries: Sequence[Entry]) -> list[AuditRow]:
        """`append` of each entry in order, as one: the chain computed here from the head, the rows inserted in one
        statement, inside the open batch (else in one of its own: one transaction, one witness write)."""
        unknown = sorted({e.event for e in entries} - set(EVENTS))
        if unknown:
            raise ValueError(f"unknown audit event '{unknown[0]}' (events: {', '.join(EVENTS)})")
        if not entries:
            return []
        batch = _open_batches.get(self.store)
        if batch is None:
            with self.batch():
                return self.append_many(entries)
        if batch.head is None:  # the batch's first append: bind the store's witness, read the newest row
            if batch.witness_path is not None:
                witness.bind(self.store, batch.witness_path)
            batch.head = self._head()
        rows = chained(
            batch.head,
            [
                (
                    float(self.clock() if e.ts_s is None else e.ts_s),
                    e.event,
                    e.proposal_id,
                    e.actor,
                    canonical_json(e.payload),
                )
                for e in entries
            ],
        )
        columns = [list(column) for column in zip(*(r.values() for r in rows), strict=True)]
        self.store.conn.execute(
            "INSERT INTO audit_log SELECT unnest(?::BIGINT[]), unnest(?::DOUBLE[]), unnest(?::VARCHAR[]), "
            "unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), unnest(?::VARCHAR[]), "
            "unnest(?::VARCHAR[])",
            columns,
        )
        batch.head = (rows[-1].seq, rows[-1].hash)
        batch.heads.extend((r.seq, r.hash) for r in rows)
        return rows

    def _head(self) -> tuple[int, str]:
        """The chain's newest (seq, hash); (0, genesis) when it is empty."""
        last = self.store.conn.execute("SELECT seq, hash FROM audit_log ORDER BY seq DESC LIMIT 1").fetchone()
        return (int(last[0]), str(last[1])) if last else (0, GENESIS_HASH)

    def _insert(
        self,
        witness_path: Path | None,
        head: tuple[int, str] | None,
        when: float,
        event: str,
        proposal_id: str,
        actor: str,
        text: str,
    ) -> AuditRow:
        """Chain one row onto `head` (None: read the newest row) inside the caller's transaction; `witness_path`
        is bound as the store's witness when it has none yet (None: not asked)."""
        conn = self.store.conn
        if witness_path is not None:
            witness.bind(self.store, witness_path)
        (row,) = chained(self._head() if head is None else head, [(when, event, proposal_id, actor, text)])
        conn.execute("INSERT INTO audit_log VALUES (?, ?, ?, ?, ?, ?, ?, ?)", list(row.values()))
        return row

    def rows(self, proposal_id: str | None = None, event: str | None = None) -> list[AuditRow]:
        return read_rows(self.store, proposal_id=proposal_id, event=event)


def read_rows(store: Store, *, proposal_id: str | None = None, event: str | None = None) -> list[AuditRow]:
    sql = "SELECT seq, ts_s, event, proposal_id, actor, payload, prev_hash, hash FROM audit_log WHERE 1=1"
    params: list[Any] = []
    if proposal_id is not None:
        sql, params = sql + " AND proposal_id = ?", [*params, proposal_id]
    if event is not None:
        sql, params = sql + " AND event = ?", [*params, event]
    rows = store.conn.execute(sql + " ORDER BY seq, hash", params).fetchall()
    return [AuditRow(int(r[0]), float(r[1]), *(str(v) for v in r[2:])) for r in rows]


def step_rows_naming(store: Store, proposal_id: str) -> list[AuditRow]:
    """The `step_approval` rows whose payload names `proposal_id` among its targets (one signature over a plan
    step approves each target it names: guardrails/step_message.py). A row's claim is only a claim: the
    decisions module re-verifies its signature over the message rebuilt from those targets."""
    rows = store.conn.execute(
        "SELECT seq, ts_s, event, proposal_id, actor, payload, prev_hash, hash FROM audit_log "
        "WHERE event = 'step_approval' AND list_contains("
        "json_extract_string(payload, '$.targets[*].proposal_id'), ?) ORDER BY seq, hash",
        [proposal_id],
    ).fetchall()
    return [AuditRow(int(r[0]), float(r[1]), *(str(v) for v in r[2:])) for r in rows]


def chain_heads(store: Store) -> list[tuple[int, str]] | None:
    """Every row's (seq, hash); None when the `audit_log` table is missing."""
    try:
        rows = store.conn.execute("SELECT seq, hash FROM audit_log ORDER BY seq").fetchall()
    except duckdb.CatalogException:
        return None
    return [(int(r[0]), str(r[1])) for r in rows]


def verify_witness(store: Store, path: Path) -> witness.WitnessResult:
    """The chain against the witness file at `path` (see `guardrails.witness.check`)."""
    return witness.check(chain_heads(store), witness.read(path))


def verify(store: Store) -> VerifyResult:
    """Recompute the chain in `seq` order; report the first row whose link or content does not hold."""
    if chain_heads(store) is None:
        return VerifyResult(False, 0, 0, "the audit_log table is missing (dropped?)")
    rows = read_rows(store)
    prev = GENESIS_HASH
    for expected_seq, row in enumerate(rows, start=1):
        if row.seq != expected_seq:
            kind = "duplicated" if row.seq < expected_seq else "missing (deleted?)"
            seq = row.seq if row.seq < expected_seq else expected_seq
            return VerifyResult(False, len(rows), seq, f"seq {seq} {kind}", prev)
        if row.prev_hash != prev:
            return VerifyResult(
                False,
                len(rows),
                row.seq,
                "prev_hash does not match the previous row (reordered or edited)",
                prev,
            )
        if row_hash(prev, row.seq, row.ts_s, row.event, row.proposal_id, row.actor, row.payload) != row.hash:
            return VerifyResult(
                False, len(rows), row.seq, "hash does not match the row's content (edited)", prev
            )
        prev = row.hash
    return VerifyResult(True, len(rows), None, "", prev)
