"""Sign-in limits, counted before any password hash is computed (argon2id: 64 MiB and tens of milliseconds
each, so the hash is what an attacker spends the service's memory and CPU on).

`SignInGate.admit(name, address)` counts the attempt at once, under one lock, as a failure: 60 concurrent
guesses for one name meet a limit of 5 as 5, never 60 (the count is not read before the hash and written
after it). A sign-in that succeeds takes its own count back (`succeeded`); one that never reached the hash
(the hashing is busy) too (`withdraw`). Three counts, each over the last `WINDOW_S`:

- per name and client address: `PAIR_FAILURES` failures refuse that name from that address until the oldest
  leaves the window (the owner, signing in from elsewhere, is not locked out by someone guessing here);
- per client address: `ADDRESS_FAILURES` failures, whatever the names, refuse that address;
- per name, from every address: past `ACCOUNT_FREE_FAILURES`, a growing delay between attempts (doubling,
  at most `ACCOUNT_MAX_DELAY_S`) instead of a lock, so many addresses together still guess slowly; an address
  this name signed in from before (since the console started) is not held by that delay.

`hashing()` bounds the hashes computed at once to `max_hashes`; a request that waits longer than `wait_s`
for a turn, or finds `MAX_WAITING` already waiting, is refused (503, "busy") without hashing, so a flood of sign-ins costs at most `max_hashes` x
64 MiB and `max_hashes` cores, whatever its size.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import TypeVar

from aiops.errors import SignInBusy

WINDOW_S = 300.0
PAIR_FAILURES = 5
ADDRESS_FAILURES = 30
ACCOUNT_FREE_FAILURES = 10
ACCOUNT_MAX_DELAY_S = 60.0
MAX_HASHES = 2
HASH_WAIT_S = 10.0
MAX_WAITING = 32  # requests waiting for a hashing turn at most; past it, refused at once
_K = TypeVar("_K", str, tuple[str, str])
MAX_KEYS = 20_000  # names, addresses and pairs remembered at most (memory stays bounded)


@dataclass(frozen=True)
class Attempt:
    name: str
    address: str
    at_s: float


@dataclass(frozen=True)
class Refusal:
    why: str
    retry_after_s: int


def _recent(times: list[float], now_s: float) -> list[float]:
    return [t for t in times if now_s - t < WINDOW_S]


class SignInGate:
    def __init__(
        self,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_hashes: int = MAX_HASHES,
        wait_s: float = HASH_WAIT_S,
    ) -> None:
        self.clock = clock
        self.max_hashes = max_hashes
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._pairs: dict[tuple[str, str], list[float]] = {}
        self._addresses: dict[str, list[float]] = {}
        self._accounts: dict[str, list[float]] = {}
        self._known: set[tuple[str, str]] = set()  # (name, address) that signed in
        self._semaphore: asyncio.Semaphore | None = None
        self._waiting = 0
        self.hashing_now = 0  # read by tests and the log: never above max_hashes

    # -- counting ---------------------------------------------------------------------------------------------
    def admit(self, name: str, address: str) -> Attempt | Refusal:
        """The attempt, counted now (as a failure until `succeeded`), or why it is refused (nothing counted)."""
        now = self.clock()
        pair = (name, address)
        with self._lock:
            self._prune(now)
            pair_times = _recent(self._pairs.get(pair, []), now)
            if len(pair_times) >= PAIR_FAILURES:
                wait = pair_times[-PAIR_FAILURES] + WINDOW_S - now
                return Refusal("too many failed sign-ins for this name from here", _ceil(wait))
            address_times = _recent(self._addresses.get(address, []), now)
            if len(address_times) >= ADDRESS_FAILURES:
                wait = address_times[-ADDRESS_FAILURES] + WINDOW_S - now
                return Refusal("too many failed sign-ins from this address", _ceil(wait))
            account_times = _recent(self._accounts.get(name, []), now)
            extra = len(account_times) - ACCOUNT_FREE_FAILURES
            if extra >= 0 and pair not in self._known:
                delay = min(2.0**extra, ACCOUNT_MAX_DELAY_S)
                wait = account_times[-1] + delay - now
                if wait > 0:
                    return Refusal("too many failed sign-ins for this name: slowed down", _ceil(wait))
            self._pairs[pair] = [*pair_times, now]
            self._addresses[address] = [*address_times, now]
            self._accounts[name] = [*account_times, now]
        return Attempt(name, address, now)

    def succeeded(self, attempt: Attempt) -> None:
        """The password was right: this name's failures from this address are forgiven, the address is known."""
        with self._lock:
            self._pairs.pop((attempt.name, attempt.address), None)
            self._take_back(self._addresses, attempt.address, attempt.at_s)
            self._take_back(self._accounts, attempt.name, attempt.at_s)
            if len(self._known) >= MAX_KEYS:
                self._known.clear()
            self._known.add((attempt.name, attempt.address))

    def withdraw(self, attempt: Attempt) -> None:
        """No password was checked (busy): the attempt does not count."""
        with self._lock:
            self._take_back(self._pairs, (attempt.name, attempt.address), attempt.at_s)
            self._take_back(self._addresses, attempt.address, attempt.at_s)
            self._take_back(self._accounts, attempt.name, attempt.at_s)

    @staticmethod
    def _take_back(table: dict[_K, list[float]], key: _K, at_s: float) -> None:
        times = table.get(key)
        if times and at_s in times:
            times.remove(at_s)

    def _prune(self, now_s: float) -> None:
        _prune_table(self._pairs, now_s)
        _prune_table(self._addresses, now_s)
        _prune_table(self._accounts, now_s)

    # -- hashing ----------------------------------------------------------------------------------------------
    def saturated(self) -> bool:
        """Every turn taken and `MAX_WAITING` waiting: a new sign-in is refused before its form is even read."""
        return self._semaphore is not None and self._semaphore.locked() and self._waiting >= MAX_WAITING

    @asynccontextmanager
    async def hashing(self) -> AsyncIterator[None]:
        """A turn to compute one password hash (at most `max_hashes` at once), or `SignInBusy` after `wait_s`."""
        if self._semaphore is None:
            self._semaphore = asyncio.Semaphore(self.max_hashes)
        semaphore = self._semaphore
        if self.saturated():
            raise SignInBusy("sign-in is busy: try again in a few seconds")
        self._waiting += 1
        try:
            async with asyncio.timeout(self.wait_s):
                await semaphore.acquire()
        except TimeoutError:
            raise SignInBusy("sign-in is busy: try again in a few seconds") from None
        finally:
            self._waiting -= 1
        self.hashing_now += 1
        try:
            yield
        finally:
            self.hashing_now -= 1
            semaphore.release()


def _prune_table(table: dict[_K, list[float]], now_s: float) -> None:
    if len(table) < MAX_KEYS:
        return
    for key in [k for k, v in table.items() if not _recent(v, now_s)]:
        del table[key]
    if len(table) >= MAX_KEYS:  # still full of live counts: the half with the fewest failures goes
        # (never the oldest first: 20,000 single failures on other names once pushed out a name being held,
        # and its delay was lifted (issue 36); a held name goes only after half the table holds as many)
        ordered = sorted(table, key=lambda k: (len(table[k]), table[k][-1] if table[k] else 0.0))
        for key in ordered[: len(ordered) // 2]:
            del table[key]


def _ceil(seconds: float) -> int:
    return max(1, int(seconds + 0.999))
