"""What a flush may skip because nothing changed it since the flush before (docs/BENCHMARKS.md "Footprint":
most of a node agent's CPU is a fixed cost per DuckDB statement, and most flushes of a quiet node find what
the one before left).

The service is the only writer of its workspace between two of its flushes unless another hold came between:
the owner counts every hold (`FileOwner.holds`: any thread's `store()`, a lease to another process, a lend),
so a flush that finds the count one past where the last flush's hold left it (its own) knows nothing else
wrote. Then, and only then, it trusts what the process itself wrote last:

- the twin's log ends where the twin is (`Twin.vouched`/`current`): `sync` reads nothing, `append` does not
  ask the log for its last `seq`;
- this node's `job_ranks` are the rows `refresh_jobs` wrote last, unless this flush ingests rows of
  `job_ranks` or `topology`: the same collect is not written again, nor its export labels read again;
- detection's inventory (racks and ranks, `INVENTORY_SIGNATURE`) is as it last read it, and so are the
  pager's maintenance windows (only people add or end one, from another hold) and membership (racks, job
  ranks), on a node agent (a fleet learns its inventory from its own source's rows).

Nothing here is kept across a restart: a new process starts with every memory empty, so its first flush reads
and writes everything (tests/test_footprint_statements.py counts an idle flush's statements).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    from aiops.sim.twin import Twin

INVENTORY_TABLES = frozenset({"topology", "job_ranks"})
_T = TypeVar("_T")


class Kept(Generic[_T]):
    """A value read from the store, kept while an epoch of `Unchanged.epochs()` stays where it was read."""

    def __init__(self) -> None:
        self._kept: tuple[int, _T] | None = None

    def get(self, epoch: int | None, read: Callable[[], _T]) -> _T:
        """The kept value while `epoch` is the one it was read at, else `read()` again (None: always read)."""
        if epoch is None or self._kept is None or self._kept[0] != epoch:
            value = read()
            self._kept = None if epoch is None else (epoch, value)
            return value
        return self._kept[1]


@dataclass
class Unchanged:
    holds_after: int | None = None  # the owner's hold count when the last flush's hold ended
    twin_current: bool = False  # the twin knew the log's end when it did
    ranks: list[dict[str, Any]] | None = None  # this node's job_ranks as refresh_jobs wrote them last
    alone: bool = False  # this flush: no hold but the last flush's since it ended
    inventory_same: bool = False  # this flush: topology and job_ranks as the flush before left them
    inventory_moved: bool = True  # they may have changed since detection last read its inventory
    outside_epoch: int = (
        0  # flushes that found another hold since the flush before (it may have written anything)
    )
    inventory_epoch: int = (
        0  # times topology or job_ranks may have changed (ingested, rewritten, another hold)
    )

    def begin(self, holds: int, tables: set[str], twin: Twin | None) -> None:
        """At the start of a flush's hold (`holds`: the owner's count, this hold included; `tables`: those the
        flush ingests rows of)."""
        self.alone = self.holds_after is not None and holds == self.holds_after + 1
        self.inventory_same = self.alone and not (INVENTORY_TABLES & tables)
        if not self.alone:
            self.outside_epoch += 1
        if not self.inventory_same:
            self.ranks = None
            self.inventory_moved = True
            self.inventory_epoch += 1
        if twin is not None:
            twin.vouched = True
            twin.current = self.alone and self.twin_current

    def end(self, holds: int, twin: Twin | None) -> None:
        """When the flush's hold ends: what the next flush may trust, should no other hold come between."""
        self.holds_after = holds
        if twin is not None:
            self.twin_current = twin.current
            twin.vouched = twin.current = False

    def same_ranks(self, rows: list[dict[str, Any]]) -> bool:
        """Whether `rows` are this node's job_ranks as they stand (written by this process, nothing since)."""
        return self.ranks is not None and self.ranks == rows

    def wrote_ranks(self, rows: list[dict[str, Any]]) -> None:
        self.ranks = rows
        self.inventory_same = False
        self.inventory_moved = True
        self.inventory_epoch += 1

    def epochs(self) -> tuple[int, int]:
        """(outside_epoch, inventory_epoch): what a reader keeps is good while they stay (the pager's windows
        and membership)."""
        return self.outside_epoch, self.inventory_epoch

    def take_inventory_moved(self) -> bool:
        """Whether detection must read its inventory again (`LiveDetection.inventory_moved` on a node agent):
        true once after each change, then false until the next."""
        moved, self.inventory_moved = self.inventory_moved, False
        return moved
