"""One workspace per database: the DuckDB file that holds every table (telemetry, incidents, hypotheses,
proposals, approvals, the audit log, the agent's journal, the twin's log), and the files that belong to it.

Several processes work on one workspace at once (`aiops chat`, `aiops actions`, `aiops audit verify`,
`aiops dcim watch`, the service). DuckDB lets one process write a file, or several read it, never both; so
every process opens the file for one short piece of work and closes it again (`with workspace.write() as
store:` / `with workspace.read() as store:`), and an open that meets another process's lock waits and
retries with jittered exponential backoff until `lock_timeout_s` (then `WorkspaceBusy` names the holder).
Why not one owning process with a socket API: there is no daemon on a laptop or in CI, and a process that
dies must not leave the others without their state. The cost is an open per operation: about 5 ms of CPU, the
file attached to the process's one DuckDB instance (aiops/store/instances.py; an instance per open cost ~20 ms); a
block of several short local operations in one thread can share one (`held()`).

While the node service (`aiops run`) runs on the workspace it keeps the file open (its ingest and live
detection need the connection held) and lends it on request (aiops/store/lease.py): `read()` and `write()`
ask it first, so the other processes work on the workspace as before.

Files (`files()`): `<db>` and DuckDB's `<db>.wal` while a writer runs; `<db>.checkpoints.sqlite` (LangGraph's
checkpointer, SQLite: it locks per transaction by itself) with SQLite's `-journal`/`-wal`/`-shm` while it
writes; while a service runs, its lock file `<db>.service.lock` (its PID) and socket `<db>.service.sock`. Nothing else beside the database is read: files that older versions left there (`<db>.twin.pkl`,
`<db>.agent.duckdb`, `<db>.agent.sqlite`) are never opened, let alone unpickled (`legacy_files()`).
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import duckdb

from aiops.config import GuardrailsConfig, SchedulerConfig
from aiops.errors import AiopsError, StoreLocked, WorkspaceBusy
from aiops.store.faults import file_fault
from aiops.store.lease import LOCK_SUFFIX, SOCKET_SUFFIX, lease
from aiops.store.store import Store
from aiops.store.writable import FIX_DB, writing

DEFAULT_LOCK_TIMEOUT_S = 30.0
_FIRST_BACKOFF_S = 0.01
_MAX_BACKOFF_S = 0.5
CHECKPOINTS_SUFFIX = ".checkpoints.sqlite"
WITNESS_SUFFIX = ".witness"  # the audit chain's witness (guardrails.witness; deleted with the workspace)
# The web console's (aiops/console): its signing key (guardrails.session_signing) and accounts, both 0600.
CHATOPS_SUFFIXES = (".slack-key",)  # Slack button decisions' signing key (guardrails.slack_signing), 0600
CONSOLE_SUFFIXES = (".console-key", ".console-users.json", ".console-users.json.lock", ".console-setup.json")
_SQLITE_SUFFIXES = ("", "-journal", "-wal", "-shm")
LEGACY_SUFFIXES = (".twin.pkl", ".agent.duckdb", ".agent.duckdb.wal", ".agent.sqlite")


class _Hold(threading.local):
    store: Store | None = None
    writable = False


class Workspace:
    """The database at `path` and everything that belongs to it. `Workspace(":memory:")` keeps one in-memory
    store open for its lifetime (tests, the eval harness); `close()` ends it."""

    def __init__(
        self,
        path: str | Path,
        *,
        lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
        guardrails: GuardrailsConfig | None = None,
        scheduler: SchedulerConfig | None = None,
        threads: int = 1,
    ) -> None:
        self.path = str(path)
        self.threads = threads  # DuckDB's workers in each store it opens (Store's `threads`)
        self.scheduler = (
            scheduler if scheduler is not None else SchedulerConfig()
        )  # `[scheduler]`, as guardrails
        # the guardrails policy of the command that opened the workspace (its config, passed down from the
        # CLI), handed to every store it opens; never read from the environment here
        self.guardrails = guardrails if guardrails is not None else GuardrailsConfig()
        self.lock_timeout_s = lock_timeout_s
        self._sleep = sleep
        self._clock = clock
        self._memory: Store | None = (
            Store(":memory:", guardrails=self.guardrails, scheduler=self.scheduler, threads=threads)
            if self.memory
            else None
        )
        self._hold = _Hold()  # this thread's `held()` store, if any

    @property
    def memory(self) -> bool:
        return self.path == ":memory:"

    def exists(self) -> bool:
        return self.memory or Path(self.path).is_file()

    def require(self) -> Workspace:
        """Self, or an error that says how to make the database when there is none."""
        if not self.exists():
            raise AiopsError(f"{self.path}: no such database (make one with: aiops demo --db {self.path})")
        return self

    # -- files ----------------------------------------------------------------------------------------------
    @property
    def checkpoints_path(self) -> Path:
        """LangGraph's checkpointer (SQLite), owned and named by the workspace."""
        return Path(self.path + CHECKPOINTS_SUFFIX)

    def own_paths(self) -> list[Path]:
        """Every file this workspace may create beside the database (whether it exists now or not)."""
        if self.memory:
            return []
        db = Path(self.path)
        sqlite = [Path(str(self.checkpoints_path) + s) for s in _SQLITE_SUFFIXES]
        service = [Path(self.path + LOCK_SUFFIX), Path(self.path + SOCKET_SUFFIX)]
        witness = [Path(self.path + WITNESS_SUFFIX)]  # the audit chain's witness (guardrails.witness)
        console = [Path(self.path + s) for s in (*CONSOLE_SUFFIXES, *CHATOPS_SUFFIXES)]
        return [db, Path(self.path + ".wal"), *sqlite, *service, *witness, *console]

    def files(self) -> list[Path]:
        return [p for p in self.own_paths() if p.exists()]

    def legacy_files(self) -> list[Path]:
        """Files older versions kept beside the database. Never read: shown so a person can delete them."""
        return [] if self.memory else [p for s in LEGACY_SUFFIXES if (p := Path(self.path + s)).exists()]

    def remove(self) -> None:
        """Delete the database and every file of this workspace (a fresh `aiops demo --db` run)."""
        for path in self.own_paths():
            with writing(path, "the workspace (removing its old files)", FIX_DB):
                path.unlink(missing_ok=True)

    # -- opening --------------------------------------------------------------------------------------------
    def _open(self, read_only: bool, own_instance: bool = False) -> Store:
        """Open the file, retrying while another process holds its lock: attached to this process's DuckDB
        instance (aiops/store/instances.py), or, `own_instance`, in an instance of its own (a store whose
        instance settings change: a report's limits, a pivot's memory bound)."""
        deadline = self._clock() + self.lock_timeout_s
        backoff_s = _FIRST_BACKOFF_S
        while True:
            try:
                return Store(
                    self.path,
                    read_only=read_only,
                    guardrails=self.guardrails,
                    scheduler=self.scheduler,
                    threads=self.threads,
                    shared=not own_instance,
                )
            except StoreLocked as exc:
                now = self._clock()
                if now >= deadline:
                    raise WorkspaceBusy(self.path, exc.holder, self.lock_timeout_s) from None
                self._sleep(min(backoff_s * random.uniform(0.5, 1.5), max(0.0, deadline - now)))
                backoff_s = min(backoff_s * 1.6, _MAX_BACKOFF_S)

    @contextmanager
    def held(self, *, writable: bool = True) -> Iterator[None]:
        """One open of the file for a block of several short pieces of work in this thread: its `read()`s (and,
        `writable`, its `write()`s) reuse it instead of opening the file each (an open attaches the file and
        reads its catalog: ~5 ms of CPU). For blocks that do local work only (the chat's guardrail, execute and verify steps):
        no model call and no `lend()` inside one (the file stays locked for the block). Nested: the outer
        hold serves."""
        if self._memory is not None or self._hold.store is not None:
            yield
            return
        opened = self.write() if writable else self.read()
        with opened as store:
            self._hold.store, self._hold.writable = store, writable
            try:
                yield
            finally:
                self._hold.store = None

    def _held(self, writable: bool) -> Store | None:
        store = self._hold.store
        if store is not None and writable and not self._hold.writable:
            raise RuntimeError(f"{self.path}: a write inside a read-only hold of the workspace")
        return store

    @contextmanager
    def write(self, *, own_instance: bool = False) -> Iterator[Store]:
        """The store, writable, for one short piece of work; closed (and checkpointed) when the block ends.
        `own_instance`: in a DuckDB instance of its own, whose settings the block may change (`_open`)."""
        if self._memory is not None:
            yield self._memory
            return
        if (store := self._held(writable=True)) is not None:
            with self._faults_named():
                yield store  # checkpointed once, when the hold ends
            return
        with lease(self.path, self.lock_timeout_s):
            store = self._open(read_only=False, own_instance=own_instance)
            try:
                with self._faults_named():
                    yield store
                    store.commit_pending()
            finally:
                store.close()

    @contextmanager
    def _faults_named(self) -> Iterator[None]:
        """A damaged file, a full disk: one clear error naming the file (exit 2), not DuckDB's or the OS's."""
        try:
            yield
        except (duckdb.Error, OSError) as exc:
            fault = file_fault(self.path, exc)
            if fault is None:
                raise
            raise fault from exc

    @contextmanager
    def read(self, *, own_instance: bool = False) -> Iterator[Store]:
        """The store, read-only, for one short piece of work. A file that still needs migrations is migrated
        first (a write open), so readers of an older database work too. `own_instance` as for `write()`."""
        if self._memory is not None:
            yield self._memory
            return
        if (held := self._held(writable=False)) is not None:
            with self._faults_named():
                yield held
            return
        self.require()
        with lease(self.path, self.lock_timeout_s):
            try:
                store = self._open(read_only=True, own_instance=own_instance)
            except AiopsError as exc:
                if "needs migrations" not in str(exc):
                    raise
                store = self._open(read_only=False)  # migrates on open
                store.close()
                store = self._open(read_only=True, own_instance=own_instance)
            try:
                with self._faults_named():
                    yield store
            finally:
                store.close()

    @contextmanager
    def read_within(self, wait_s: float) -> Iterator[Store | None]:
        """`read()` for readers that could answer from what they read before while the file is busy (None:
        busy). Here always the store: an open waits for another process as `read()` does; the service's own
        workspace (aiops/service/owner.py) gives None while its flush keeps the file longer than `wait_s`."""
        with self.read() as store:
            yield store

    @contextmanager
    def lend(self) -> Iterator[None]:
        """The file free, for the block, for a child process of ours to open read-only (the agent's SQL worker):
        on loan from the workspace's service when one runs (aiops/store/lease.py), as `read()` would be. The
        service itself lends its own hold instead (`aiops.service.owner.OwnedWorkspace.lend`)."""
        if self._memory is not None:
            yield
            return
        if (
            self._hold.store is not None
        ):  # a read-only hold: its lease covers the borrower, who reads beside it
            if self._hold.writable:
                raise RuntimeError(
                    f"{self.path}: lent while this thread holds it writable (the borrower would wait)"
                )
            yield
            return
        self.require()
        with lease(self.path, self.lock_timeout_s):
            yield

    def close(self) -> None:
        if self._memory is not None:
            self._memory.close()
            self._memory = None

    def __enter__(self) -> Workspace:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
