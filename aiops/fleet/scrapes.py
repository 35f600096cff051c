"""The scraper's own word on each node agent, read soon after each scrape (docs/FLEET.md, "How soon").

Prometheus and VictoriaMetrics both serve `GET /api/v1/targets`: per target its labels, `health` (up, down,
unknown), `lastScrape` (the scrape's time, which is also the time its samples and its `up` carry) and `lastError`.
That answer changes the moment a scrape ends, while a query of `up` waits for the fleet's step read (and on
VictoriaMetrics for its 30 s `-search.latencyOffset`). `ScrapeWatch` asks it every `poll_s` (a tenth of the
step, at least 1 s) and judges the targets that are some node agent's (their `instance` as `aiops_node_info`
carries it: NodePresence) by their newest scrapes:

- a scrape that failed with **connection refused** (both stores say it in those words: "dial tcp ...: connect:
  connection refused") means nothing listens on the agent's port: its process is gone (killed, crashed, its
  host up but the agent not running). That is lost at once (`lost_on_refused`, on by default): one scrape
  interval after the last sample, at the fleet's next poll.
- any other failed scrape (a timeout, "context deadline exceeded" or "with timeout 10s: timeout"; an HTTP error;
  an answer that does not parse) is one late scrape until the next scrape fails too: **one timeout pages
  nothing**; two failed scrapes in a row are a lost agent.
- a scrape that went through (`health` up) clears the target's failures.

Only what the watch saw counts: each failed scrape once (by its `lastScrape`), none guessed between two polls.
While the store does not answer (down, failing, slow: the fleet's sight judges that), the verdicts of its last
answer stand: nothing seen since clears them (a lost agent is not "back" because its store went away). A store
without the targets API (Thanos Query, Mimir: 404) gives no verdict, and presence alone (two scraping steps
without the agent's series) decides; it is asked again every `RETRY_S`. Everything in the answer is hostile
data: entries that do not parse are skipped, the error text is cut and only ever shown escaped.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from aiops import outbound
from aiops.config import FleetConfig
from aiops.errors import SourceError
from aiops.sources.prometheus import PrometheusClient

log = logging.getLogger("aiops.fleet")
REFUSED = re.compile(r"connection refused", re.IGNORECASE)
FAILED_TO_LOSE = 2  # failed scrapes in a row, other than refused, that make an agent lost
RETRY_S = 300.0  # a store without the targets API is asked again this often
MAX_ERROR_CHARS = 200


def watch_client(config: FleetConfig, token: str | None) -> PrometheusClient:
    """The targets API's client: `[fleet] targets_url`, else the store's own URL; the store's bearer token only
    within its origin; an answer's deadline short enough that a hung store delays the loop a poll, not a read."""
    url = config.targets_url or config.prometheus
    same = outbound.origin(url) == outbound.origin(config.prometheus)
    timeout_s = min(config.timeout_s, max(2.0, config.step_s / 5.0))
    return PrometheusClient(url, token=token if same else None, timeout_s=timeout_s)


@dataclass(frozen=True)
class Scrape:
    """A target's newest scrape as the targets API says it."""

    instance: str
    health: str  # up | down | unknown
    at_s: float  # when it was taken (its samples' time)
    error: str  # "" when it went through


def parse_targets(data: Any) -> list[Scrape]:
    """The active targets of a `/api/v1/targets` answer's `data`; an entry that does not parse is skipped."""
    found: list[Scrape] = []
    active = data.get("activeTargets") if isinstance(data, Mapping) else None
    for entry in active if isinstance(active, list) else []:
        if not isinstance(entry, Mapping):
            continue
        labels = entry.get("labels")
        instance = labels.get("instance") if isinstance(labels, Mapping) else None
        at_s = _rfc3339_s(entry.get("lastScrape"))
        health = entry.get("health")
        if not isinstance(instance, str) or at_s is None or health not in ("up", "down", "unknown"):
            continue
        error = entry.get("lastError")
        found.append(
            Scrape(instance, str(health), at_s, error[:MAX_ERROR_CHARS] if isinstance(error, str) else "")
        )
    return found


def _rfc3339_s(value: Any) -> float | None:
    """Seconds since the epoch of a targets API time (nanoseconds cut to microseconds); None for Go's zero time
    (a target never scraped yet) or what does not parse."""
    if not isinstance(value, str) or value.startswith("0001-"):
        return None
    text = re.sub(r"(\.\d{6})\d+", r"\1", value.strip()).replace("Z", "+00:00")
    try:
        stamp = datetime.fromisoformat(text)
    except ValueError:
        return None
    if stamp.tzinfo is None:
        return None
    at_s = stamp.timestamp()
    return at_s if math.isfinite(at_s) and at_s > 0 else None


@dataclass
class _Target:
    at_s: float = -math.inf  # the newest scrape seen
    failed: int = 0  # failed scrapes seen in a row
    first_failed_s: float | None = None  # the first of them
    error: str = ""  # the newest one's error
    last_up_s: float | None = None  # the newest scrape seen going through
    lost_at_s: float | None = None  # the failed scrape that made it lost (None while it is not)


@dataclass(frozen=True)
class Verdict:
    """A node agent's target lost by its scrapes: since when (the scrape that made it lost) and why."""

    instance: str
    lost_at_s: float  # the failed scrape that decided it
    first_failed_s: float
    last_up_s: float | None  # its newest scrape that went through, as the watch saw it
    refused: bool
    error: str
    failed: int

    @property
    def reason(self) -> str:
        if self.refused:
            return f"nothing listens at {self.instance}: its scrape was refused (connection refused)"
        return (
            f"{self.failed} scrapes of {self.instance} in a row failed (the newest: {self.error or 'down'})"
        )


@dataclass
class ScrapeWatch:
    client: PrometheusClient
    step_s: float
    clock: Callable[[], float] = time.time
    lost_on_refused: bool = True
    targets: dict[str, _Target] = field(default_factory=dict)
    polled_s: float = -math.inf  # when the last poll was asked
    answered: bool = False  # a poll answered, and no 404 since (its verdicts stand)
    unsupported: bool = False  # the store answered 404: no targets API (asked again every RETRY_S)
    polls: int = 0

    @property
    def poll_s(self) -> float:
        return max(1.0, self.step_s / 10.0)

    def due(self) -> bool:
        wait_s = RETRY_S if self.unsupported else self.poll_s
        return self.clock() - self.polled_s >= wait_s

    def poll(self, watched: Iterable[str]) -> bool:
        """Ask the targets API (when due) and take in the newest scrape of each target in `watched` (instances);
        returns whether anything a verdict depends on changed."""
        if not self.due():
            return False
        self.polled_s, self.polls = self.clock(), self.polls + 1
        try:
            data = self.client.get("/api/v1/targets", {"state": "active"})
        except SourceError as exc:
            if exc.status != 404:
                return False  # the store down or failing: the last answer's verdicts stand
            was = self.answered
            self.answered = False
            if not self.unsupported:
                self.unsupported = True
                log.warning(
                    "the store has no targets API: a lost agent is judged from its series alone",
                    extra={"url": self.client.url},
                )
            return was
        if self.unsupported:
            log.info("the store answers its targets API again", extra={"url": self.client.url})
        self.unsupported, was, self.answered = False, self.answered, True
        return self.take(parse_targets(data), set(watched)) or not was

    def take(self, scrapes: Iterable[Scrape], watched: set[str]) -> bool:
        """The newest scrape of each watched target; a target the scraper no longer lists (its pod deleted, its
        host removed) is forgotten with its verdict: presence decides about its node from then on."""
        scrapes = list(scrapes)
        listed = {s.instance for s in scrapes}
        gone = [i for i in self.targets if i not in listed]
        for instance in gone:
            del self.targets[instance]
        newest: dict[str, Scrape] = {}
        for s in scrapes:  # one instance in two targets (two jobs): the healthier, then the newer, stands
            if s.instance not in watched or s.health == "unknown":
                continue
            old = newest.get(s.instance)
            if old is None or (s.health == "up", s.at_s) > (old.health == "up", old.at_s):
                newest[s.instance] = s
        changed = bool(gone)
        for instance, s in newest.items():
            state = self.targets.setdefault(instance, _Target())
            if s.at_s <= state.at_s:
                continue  # no scrape since the last poll
            state.at_s = s.at_s
            if s.health == "up":
                changed = changed or state.failed > 0
                state.failed, state.first_failed_s, state.error, state.last_up_s = 0, None, "", s.at_s
                state.lost_at_s = None
            else:
                state.failed += 1
                state.first_failed_s = state.first_failed_s or s.at_s
                state.error = s.error
                if state.lost_at_s is None and self._lost(state):
                    state.lost_at_s = s.at_s
                changed = True
        return changed

    def _refused(self, t: _Target) -> bool:
        return self.lost_on_refused and bool(REFUSED.search(t.error))

    def _lost(self, t: _Target) -> bool:
        return t.failed >= FAILED_TO_LOSE or (t.failed > 0 and self._refused(t))

    def lost(self) -> dict[str, Verdict]:
        """instance -> its verdict, for the targets lost by their scrapes (none while the API does not answer)."""
        if not self.answered:
            return {}
        out: dict[str, Verdict] = {}
        for instance, t in self.targets.items():
            if self._lost(t):
                lost_at_s = t.lost_at_s if t.lost_at_s is not None else t.at_s
                first_s = t.first_failed_s if t.first_failed_s is not None else t.at_s
                out[instance] = Verdict(
                    instance, lost_at_s, first_s, t.last_up_s, self._refused(t), t.error, t.failed
                )
        return out
