"""`POST /api/dispatch`: a proposal the fleet's people approved, handed to the node agent that acts on it.

The route (aiops/service/web.py) authenticates the machine (the /api bearer token), reads a bounded body
(`MAX_BODY_BYTES`, Content-Length required), parses it (`guardrails.dispatch_request.parse_dispatch`: 400 with a
short reason) and hands it to the service's loop through `DispatchInbox`, then waits at most `WAIT_S` for the
answer (504 after that: the dispatch is withdrawn unless the loop already took it). The inbox wakes the loop
between its ticks (`Service._nap`): a dispatch is judged in a flush at once, not at the next `flush_interval_s`.
The loop judges and runs it in its flush, where the world is (`run`): the same desk and actuator as every other execution, so nothing acts
on the twin or the hardware from a request thread. A dispatch whose backend calls another system (this node's
scheduler: `scontrol`, the Kubernetes API) is judged and claimed in the flush, run after it with the workspace
closed, and answered from a second short hold (flush_steps.act_outside). What the node checks, and what it audits,
is guardrails/dispatched.py; the answer is its JSON (200 executed or failed, 403 refused, 409 a replay,
503 nothing can act here).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiops.runtime.world import Attached, desk
from aiops.service.flush_steps import Later
from aiops.store import Store
from guardrails.actions import Action
from guardrails.executor import ExecutionOutcome
from guardrails.proposal_desk import Guardrails
from guardrails.routing import acts_remotely

if TYPE_CHECKING:  # what a fleet's dispatch is judged by: loaded at the first one (a node of a fleet's)
    from guardrails.dispatch_request import Dispatch
    from guardrails.dispatched import DispatchAnswer, DispatchClaim

log = logging.getLogger("aiops.service")
DISPATCH_ROUTE = "/api/dispatch"
MAX_BODY_BYTES = 64 * 1024
WAIT_S = 30.0  # the loop flushes every few seconds; a dispatch not taken by then is withdrawn
MAX_WAITING = 16


@dataclass(frozen=True)
class _Waiting:
    dispatch: Dispatch
    answer: Future[DispatchAnswer]


class DispatchInbox:
    """Dispatches waiting for the loop; each request waits on its own future."""

    def __init__(self, max_waiting: int = MAX_WAITING) -> None:
        self.max_waiting = max_waiting
        self._lock = threading.Lock()
        self._waiting: list[_Waiting] = []
        self.answered = 0
        self.arrived = threading.Event()  # set by `put`: wakes the loop's nap (Service._nap) to judge it now

    def put(self, dispatch: Dispatch) -> Future[DispatchAnswer] | None:
        """A future the loop answers, or None when too many wait already (the route answers 503)."""
        with self._lock:
            if len(self._waiting) >= self.max_waiting:
                return None
            answer: Future[DispatchAnswer] = Future()
            self._waiting.append(_Waiting(dispatch, answer))
        self.arrived.set()
        return answer

    def __len__(self) -> int:
        with self._lock:
            return len(self._waiting)

    def judge(
        self,
        store: Store,
        attached: Attached,
        node: str,
        outside: Callable[[Later], None] | None = None,
    ) -> None:
        """Proposals the fleet dispatched here: judged by this node's guardrails, run on its world (`attached`:
        the twin's, this host's scheduler's, or none: then every dispatch is answered 503). `outside`: where a
        dispatch whose backend calls another system (this node's scheduler) goes once claimed, to run after
        the flush (flush_steps.act_outside), its request answered then; None: it runs here."""

        def later(claim: DispatchClaim, answer: Future[DispatchAnswer]) -> None:
            assert outside is not None

            def then(guard: Guardrails, outcome: ExecutionOutcome) -> None:
                from guardrails.dispatched import answer_of

                answer.set_result(answer_of(guard, outcome, claim.people))

            outside(Later(claim.claimed, attached, then, answer.set_exception))

        remote = None if outside is None else (lambda action: acts_remotely(attached.actuator, action))
        done = self.run(lambda: desk(store, attached), node, attached.actuator is not None, remote, later)
        log.info("dispatches", extra={"judged": done})

    def run(
        self,
        desk_for: Callable[[], Guardrails],
        node: str,
        can_act: bool,
        remote: Callable[[Action], bool] | None = None,
        later: Callable[[DispatchClaim, Future[DispatchAnswer]], None] | None = None,
    ) -> int:
        """Judge every waiting dispatch on this node's desk (in the loop's flush); returns how many. One whose
        action `remote` says calls another system is claimed and handed to `later` with its answer to give."""
        with self._lock:
            taken, self._waiting = self._waiting, []
        from guardrails.dispatched import DispatchClaim, NodeDispatch

        done = 0
        for item in taken:
            if not item.answer.set_running_or_notify_cancel():
                continue  # the request gave up waiting: nothing was judged, nothing recorded
            try:
                judged = NodeDispatch(desk_for(), node, can_act=can_act, later=remote).accept_or_claim(
                    item.dispatch
                )
            except Exception as exc:  # the loop goes on; the caller hears which exception, not a traceback
                item.answer.set_exception(exc)
                continue
            if isinstance(judged, DispatchClaim):
                assert later is not None
                later(judged, item.answer)
            else:
                item.answer.set_result(judged)
            done += 1
        self.answered += done
        return done
