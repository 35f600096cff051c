"""The list answers the JSON API keeps for a busy moment (api.py): `GET /api/incidents` and `GET /api/proposals`
read the workspace through the service's own hold, and while the service's flush keeps it longer than
`BUSY_WAIT_S` a list question is answered from what was read before, never by waiting for the flush (a plan step
of thousands of proposals held a shard's workspace ~30 minutes at 40,960 GPUs: docs/BENCHMARKS.md, round eleven):

1. the last answer to the same question (`limit`, `status`), marked `stale`; `as_of_ts_s` says when it was read;
2. else an answer cut, in Python, from a broader kept read that holds everything the question asks for: the
   same status with a larger limit; every status, where the question's items are all listed there (the read was
   not cut, or the question asks for a status listed first, open or pending, and the read lists some of the
   rest, so every one of the first is in it); marked `stale`, `answered_from` naming the question it was cut
   from;
3. else `ListBusy` (HTTP 503 with `Retry-After`, and when the hold began): never a wait for the flush.

Each list keeps the answers to its last `KEPT_ANSWERS` questions, behind a lock: requests are answered on several
threads at once (evicting while another thread inserts could raise). The service reads the default questions
again within its flush's hold (`Api.warm`), so a first question in the next long flush has a broad read to be
cut from.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

KEPT_ANSWERS = 4  # questions a list keeps the answer of (a client that varies `limit` keeps no more)
BUSY_WAIT_S = 2.0  # how long a list question waits for the service's flush before answering from a kept read
RETRY_AFTER_S = 5  # what a 503-busy answer asks the client to wait (the hold may last minutes: ask again)

Answer = dict[str, Any]


@dataclass(frozen=True)
class Question:
    """One list question: at most `limit` items of `status` ("" every status)."""

    limit: int
    status: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"limit": self.limit, "status": self.status}


@dataclass(frozen=True)
class Listing:
    """How one list picks and shows its items, as its SQL does, so a kept answer can be cut in Python: the
    items of `first_statuses` first, then the rest, each newest first (`newest`: larger is newer); shown oldest
    first. `finish` fits a cut answer's other fields to the question (the incident list's node incidents)."""

    items: str  # the answer's field that holds the list
    first_statuses: frozenset[str]
    newest: Callable[[Answer], tuple[Any, ...]]
    finish: Callable[[Answer, Question], Answer] = lambda answer, question: answer

    def first(self, item: Answer) -> bool:
        return str(item.get("status")) in self.first_statuses


def cut_from(listing: Listing, kept: Question, answer: Answer, asked: Question) -> Answer | None:
    """The answer to `asked` cut from `answer` (to `kept`), when it holds every item `asked` would list; None
    when it cannot be told from it (module doc, 2)."""
    items: list[Answer] = answer[listing.items]
    whole = not answer.get("cut")
    if kept.status == asked.status:
        if not whole and asked.limit > kept.limit:
            return None
        chosen, total = items, int(answer["total"])
    elif kept.status == "":
        chosen = [i for i in items if i.get("status") == asked.status]
        first_all_in = asked.status in listing.first_statuses and any(not listing.first(i) for i in items)
        if not (whole or first_all_in):
            return None
        total = len(chosen)
    else:
        return None
    picked = sorted(chosen, key=lambda i: (listing.first(i), listing.newest(i)), reverse=True)[: asked.limit]
    cut = {
        **answer,
        listing.items: sorted(picked, key=listing.newest),
        "total": total,
        "limit": asked.limit,
        "cut": total > len(picked),
        "stale": True,
        "answered_from": kept.as_dict(),
    }
    return listing.finish(cut, asked)


class KeptAnswers:
    """One list's answers to its last `KEPT_ANSWERS` questions (module doc)."""

    def __init__(self, listing: Listing) -> None:
        self.listing = listing
        self._answers: dict[Question, Answer] = {}
        self._lock = threading.Lock()

    def keep(self, question: Question, answer: Answer) -> Answer:
        """`answer` kept as the last one to `question`; returned as it is."""
        with self._lock:
            self._answers.pop(question, None)
            self._answers[question] = answer
            while len(self._answers) > KEPT_ANSWERS:
                del self._answers[next(iter(self._answers))]
        return answer

    def as_of_ts_s(self, question: Question) -> float | None:
        """When the kept answer to `question` was read (None: none is kept)."""
        with self._lock:
            kept = self._answers.get(question)
        return None if kept is None else float(kept["as_of_ts_s"])

    def stale(self, question: Question) -> Answer | None:
        """The answer to `question` from what is kept (module doc, 1 and 2), newest read first; None: none."""
        with self._lock:
            kept = sorted(self._answers.items(), key=lambda pair: -float(pair[1]["as_of_ts_s"]))
        same = next((answer for q, answer in kept if q == question), None)
        if same is not None:
            return {**same, "stale": True}
        for broader, answer in kept:
            found = cut_from(self.listing, broader, answer, question)
            if found is not None:
                return found
        return None
