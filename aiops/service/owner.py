"""The service's hold on its workspace: one service per workspace (an flock on `<db>.service.lock`, which names
the holder's PID), the DuckDB file kept open, and leases for every other process (aiops/store/lease.py).

`owner.store()` gives the open store under the owner's lock (the service's own threads take turns); a lease
request from another process waits for the current holder, closes the file, answers `granted`, and keeps the
lock until the other process says `done` or disconnects (or `lease_timeout_s` passes); the next `store()`
reopens the file. `OwnedWorkspace` is the `Workspace` the service's own code uses: its `read()`/`write()` are
the owner's store, never a lease from itself.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import duckdb

from aiops.config import GuardrailsConfig, SchedulerConfig
from aiops.errors import ServiceRunning, StorageError, StoreLocked
from aiops.store import Store, Workspace
from aiops.store.lease import lock_path, service_pid, socket_path

# DuckDB's optimizer passes a node agent's queries skip (`FileOwner(lean_planner=True)`): each pays off on large
# tables and costs ~0.05-0.5 ms a statement, on a node's few rows a window more than they save (the replayed
# statements of a node agent's minute: 27 % less CPU, every result the same: an optimizer never changes one).
# Kept: the filter pushdown and row-group pruning that bound a window's scan by time, join ordering, the
# deliminator (correlated subqueries), Top-N and the CTE passes.
LEAN_PLANNER_SKIPS = (
    "aggregate_function_rewriter", "aggregate_reuse", "column_lifetime", "common_aggregate",
    "common_subexpressions", "common_subplan", "compressed_materialization", "distinct_aggregate_rewrite",
    "duplicate_groups", "empty_result_pullup", "extension", "join_elimination", "late_materialization",
    "outer_join_simplification", "partial_aggregate_pushdown", "partitioned_execution", "projection_placement",
    "projection_pullup", "redundant_order_keys", "regex_range", "remote_pushdown", "reorder_filter",
    "row_number_rewriter", "sampling_pushdown", "scalar_fn_pushdown", "self_join_aggregate",
    "statistics_propagation", "top_n_window_elimination", "type_pushdown", "unused_columns",
    "window_rewriter", "window_self_join",
)  # fmt: skip


def plan_lightly(conn: duckdb.DuckDBPyConnection) -> list[str]:
    """`LEAN_PLANNER_SKIPS` disabled on `conn` (those this DuckDB has); the names disabled."""
    known = {str(r[0]) for r in conn.execute("SELECT name FROM duckdb_optimizers()").fetchall()}
    skipped = [name for name in LEAN_PLANNER_SKIPS if name in known]
    conn.execute(f"SET disabled_optimizers = '{','.join(skipped)}'")
    return skipped


_LOCK_FIX = "remove it (no aiops run serves this workspace while it is missing) and start again"

log = logging.getLogger("aiops.service")


class FileOwner:
    def __init__(
        self,
        db_path: str,
        *,
        lease_timeout_s: float = 60.0,
        memory_limit_mb: int = 256,
        threads: int = 0,
        lean_planner: bool = False,
        allocator_flush_mb: int = 128,
        checkpoint_mb: int = 16,
        block_size: int = 0,
        guardrails: GuardrailsConfig | None = None,
        scheduler: SchedulerConfig | None = None,
    ) -> None:
        self.db_path = db_path
        self.guardrails = guardrails if guardrails is not None else GuardrailsConfig()
        self.scheduler = scheduler if scheduler is not None else SchedulerConfig()
        self.memory_limit_mb = memory_limit_mb
        self.threads = threads  # 0: DuckDB's default (every core)
        self.lean_planner = lean_planner  # LEAN_PLANNER_SKIPS off (a node agent's small tables)
        self.allocator_flush_mb = allocator_flush_mb
        self.checkpoint_mb = checkpoint_mb  # DuckDB checkpoints past this much write-ahead log
        self.block_size = block_size  # DuckDB's block of the file when this owner creates it (0: DuckDB's)
        self.lease_timeout_s = lease_timeout_s
        self.leases = 0
        # every hold of the file that could have written it: each outermost `store()` (any thread), lend and
        # lease; the loop compares it across its flushes to know nothing else wrote between (Service.flush)
        self.holds = 0
        # when the hold of the file now (under `_lock`, any thread's) began; None while none: what a /api list
        # answers a question with when the flush keeps it (aiops/service/kept_answers.py)
        self.held_since_ts_s: float | None = None
        self._lock = threading.RLock()
        self._store: Store | None = None
        self._lock_fd: int | None = None
        self._server: socket.socket | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._depth = _Depth()  # how deep this thread is in store() (lent() refuses inside it)

    # -- life -------------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Take the service lock (or say who holds it), open the file, listen for lease requests."""
        os.umask(os.umask(0o027) | 0o027)  # what the service writes beside the store: not for other users
        Path(self.db_path).parent.mkdir(parents=True, exist_ok=True)
        fd = _open_lock(lock_path(self.db_path))
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            if not holder.isdigit() or service_pid(self.db_path) is None:
                raise StoreLocked(
                    self.db_path,
                    f"a process that is not a running aiops service (the lock file {lock_path(self.db_path)} "
                    "names none): find it with `fuser` on that file; the file is 0600 now, so only its "
                    "owner can hold it",
                ) from None
            raise ServiceRunning(self.db_path, holder) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._lock_fd = fd
        for made in (self.db_path, self.db_path + ".wal"):
            _private(Path(made))
        with self.store():
            pass  # opens (and migrates) the file now: a bad file fails at start, not later
        path = socket_path(self.db_path)
        path.unlink(missing_ok=True)  # a service killed with -9 leaves it behind; we hold the lock now
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            server.bind(str(path))
        finally:
            os.umask(old_umask)
        server.listen(16)
        server.settimeout(0.5)
        self._server = server
        self._thread = threading.Thread(target=self._serve, name="aiops-leases", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self._server is not None:
            self._server.close()
            socket_path(self.db_path).unlink(missing_ok=True)
        with self._lock:
            if self._store is not None:
                self._store.close()
                self._store = None
        if self._lock_fd is not None:
            os.ftruncate(self._lock_fd, 0)
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- the store --------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def store(self) -> Iterator[Store]:
        with self._lock, self._opened() as store:
            yield store

    @contextlib.contextmanager
    def store_within(self, wait_s: float) -> Iterator[Store | None]:
        """The store as `store()` gives it, or None when another thread (the flush) keeps it longer than
        `wait_s`: for readers that can answer from what they read before (the /api incident list, api.py)."""
        if not self._lock.acquire(timeout=wait_s):
            yield None
            return
        try:
            with self._opened() as store:
                yield store
        finally:
            self._lock.release()

    @contextlib.contextmanager
    def _opened(self) -> Iterator[Store]:
        """The open store (opened now if it is not), counted as a hold; the owner's lock is held."""
        if self._store is None:
            self._store = Store(
                self.db_path,
                guardrails=self.guardrails,
                scheduler=self.scheduler,
                threads=self.threads,
                block_size=self.block_size,
            )
            conn = self._store.conn
            conn.execute(f"SET memory_limit = '{int(self.memory_limit_mb)}MB'")
            conn.execute(f"SET allocator_flush_threshold = '{int(self.allocator_flush_mb)}MB'")
            conn.execute(f"SET checkpoint_threshold = '{int(self.checkpoint_mb)}MB'")
            if self.lean_planner:
                plan_lightly(conn)
        if not self._depth.value:
            self.holds += 1
            self.held_since_ts_s = time.time()
        self._depth.value += 1
        try:
            yield self._store
        finally:
            self._depth.value -= 1
            if not self._depth.value:
                self.held_since_ts_s = None

    def release_memory(self) -> None:
        """What DuckDB's queries freed, back to the kernel now: setting its memory limit again (the same one) ends
        in DuckDB's `Allocator::FlushAll` (BufferPool::SetLimit), which purges the dirty pages of the jemalloc
        arenas built into its library. Without it they stay resident until jemalloc's next decay tick: 4-10 MB
        between an 8-GPU node agent's flushes (docs/BENCHMARKS.md, "Footprint", round eight); ~2 ms. Nothing
        while the file is not open here (lent, leased, not yet opened)."""
        with self._lock:
            if self._store is not None:
                self._store.conn.execute(f"SET memory_limit = '{int(self.memory_limit_mb)}MB'")

    def held_here(self) -> bool:
        """Whether this thread is inside `store()` now (no network call may wait there: flush_steps.py)."""
        return self._depth.value > 0

    @contextlib.contextmanager
    def lent(self) -> Iterator[None]:
        """The file closed in this process for the block, under the owner's lock, so a child process of the
        service (the agent's SQL worker) can open it read-only; the next `store()` reopens it. Refused in a
        thread that holds the store itself (its connection would close beneath it)."""
        if self._depth.value:
            raise RuntimeError("the workspace cannot be lent by a thread that holds it")
        with self._lock:
            self._release_file()
            self.leases += 1
            self.holds += 1
            self.held_since_ts_s = time.time()
            try:
                yield
            finally:
                self.held_since_ts_s = None

    def _release_file(self) -> None:
        if self._store is not None:
            self._store.close()
            self._store = None

    # -- leases -----------------------------------------------------------------------------------------------
    def _serve(self) -> None:
        assert self._server is not None
        while not self._stopping.is_set():
            try:
                client, _ = self._server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with client:
                self._lend(client)

    def _lend(self, client: socket.socket) -> None:
        client.settimeout(5.0)
        try:
            request = client.recv(64).decode("ascii", "replace").strip()
        except OSError:
            return
        if not request.startswith("lease"):
            with contextlib.suppress(OSError):
                client.sendall(b"busy unknown request\n")
            return
        with self._lock:
            self._release_file()
            self.holds += 1  # before the grant: the borrower may write from then on
            self.held_since_ts_s = time.time()
            try:
                client.sendall(f"granted {os.getpid()}\n".encode("ascii"))
                client.settimeout(self.lease_timeout_s)
                client.recv(64)  # "done", or EOF when the borrower closed or died
            except OSError as exc:
                log.warning("lease ended without done", extra={"reason": str(exc)})
            self.held_since_ts_s = None
            self.leases += 1


class _Depth(threading.local):
    value = 0


class OwnedWorkspace(Workspace):
    """The workspace as the service itself sees it: the owner's open store, under the owner's lock."""

    def __init__(self, owner: FileOwner) -> None:
        super().__init__(owner.db_path, guardrails=owner.guardrails, scheduler=owner.scheduler)
        self.owner = owner

    @contextlib.contextmanager
    def write(self, *, own_instance: bool = False) -> Iterator[Store]:
        """The owner's store (its own instance already)."""
        with self.owner.store() as store:
            yield store

    @contextlib.contextmanager
    def read(self, *, own_instance: bool = False) -> Iterator[Store]:
        with self.owner.store() as store:
            yield store

    @contextlib.contextmanager
    def read_within(self, wait_s: float) -> Iterator[Store | None]:
        """The owner's store, or None while the service's own flush keeps it longer than `wait_s`."""
        with self.owner.store_within(wait_s) as store:
            yield store

    @contextlib.contextmanager
    def lend(self) -> Iterator[None]:
        with self.owner.lent():
            yield

    @contextlib.contextmanager
    def held(self, *, writable: bool = True) -> Iterator[None]:
        """Nothing to hold: the owner keeps the file open (each `read()`/`write()` takes its lock, never a new
        open), and holding that lock across a block would stall the service's loop."""
        yield


def _open_lock(path: Path) -> int:
    """The service lock file, 0600 and this user's: a file any local user could open (0644 before issue 36)
    let them hold its flock and so block the service from starting. A link or another owner's file is
    refused with a clear error, never followed or taken."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        fix = _LOCK_FIX if exc.errno == errno.ELOOP else "give --db a file in a folder this user can write"
        raise StorageError(str(path), f"cannot open the service lock: {exc.strerror or exc}", fix) from None
    info = os.fstat(fd)
    if info.st_uid != os.geteuid():
        os.close(fd)
        raise StorageError(
            str(path), f"the service lock belongs to uid {info.st_uid}, not this user", _LOCK_FIX
        )
    if info.st_mode & 0o077:
        os.fchmod(fd, 0o600)
    return fd


def _private(path: Path) -> None:
    """The store's files readable by their owner and group only: DuckDB locks the file for a reader too, so
    any local user who could open it read-only could keep the service from opening it (0644 before issue 36)."""
    try:
        info = path.lstat()
        if info.st_uid == os.geteuid() and info.st_mode & 0o007 and not path.is_symlink():
            path.chmod(info.st_mode & 0o770)
    except OSError:
        pass  # absent (made at the first open, under the umask), or not ours to change
