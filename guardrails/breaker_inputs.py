"""What the circuit breaker (guardrails.breaker) counts on one desk: the workspace's `[guardrails.breaker]`
limits, the scheduler's own view of out-of-service nodes (read at most every `VIEW_TTL_S`: `sinfo` or the
Kubernetes node list is a call to another system, which a service makes before its flush holds the workspace:
`HeldView`), and the signed overrides in the audit log. `Guardrails`
adds them to every validation context; `still_waiting` keeps a proposal that waits on the breaker from writing
the same refusal into the audit log at every flush of the service."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable

from aiops.config_breaker import BreakerConfig
from aiops.store import Store
from guardrails.audit import AuditLog
from guardrails.breaker import BreakerPolicy, SchedulerView
from guardrails.executor import ExecutionOutcome
from guardrails.overrides import EVENT, active_overrides
from guardrails.policy import Context, validate
from guardrails.records import ProposalRecord
from guardrails.signing import Verifier

VIEW_TTL_S = 10.0
WAITING = "waiting: "


def breaker_policy(config: BreakerConfig) -> BreakerPolicy:
    return BreakerPolicy(
        enabled=config.enabled,
        max_nodes_fraction=config.max_nodes_fraction,
        max_rack_fraction=config.max_rack_fraction,
        window_s=config.window_s,
        min_nodes=config.min_nodes,
    )


def read_view(read: Callable[[], SchedulerView | None]) -> SchedulerView | None:
    """The scheduler's view now; a read that raises is an unreadable view (the breaker then stops what would
    take nodes out), never a crash."""
    try:
        return read()
    except Exception as exc:
        return SchedulerView("scheduler", error=f"{type(exc).__name__}: {str(exc)[:160]}")


class HeldView:
    """A scheduler's view read outside the workspace's hold and handed, as last read, to the desks inside it:
    `refresh()` asks the scheduler (at most every `ttl_s`; a service calls it before its flush takes the
    workspace), calling the object asks nothing (aiops/service/flush_steps.py). Before the first read it is an
    unreadable view: the breaker stops what would take nodes out."""

    NOT_READ = "the scheduler's view was not read yet"

    def __init__(
        self,
        read: Callable[[], SchedulerView | None],
        *,
        ttl_s: float = VIEW_TTL_S,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.read, self.ttl_s, self._monotonic = read, ttl_s, monotonic
        self._view: tuple[float, SchedulerView | None] | None = None

    def refresh(self) -> None:
        now = self._monotonic()
        if self._view is None or now - self._view[0] >= self.ttl_s:
            self._view = (now, read_view(self.read))

    def __call__(self) -> SchedulerView | None:
        return self._view[1] if self._view is not None else SchedulerView("scheduler", error=self.NOT_READ)


class BreakerInputs:
    def __init__(
        self,
        store: Store,
        audit: AuditLog,
        verifier: Verifier,
        scheduler_view: Callable[[], SchedulerView | None] | None = None,
        *,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.policy = breaker_policy(store.guardrails.breaker)
        self.audit = audit
        self.verifier = verifier
        self._read_view = scheduler_view
        self._monotonic = monotonic
        self._view: tuple[float, SchedulerView | None] | None = None

    def view(self) -> SchedulerView | None:
        """The scheduler's view, at most `VIEW_TTL_S` old; a read that raises is an unreadable view (the breaker
        then stops what would take nodes out), never a crash."""
        if self._read_view is None:
            return None
        now = self._monotonic()
        if self._view is None or now - self._view[0] >= VIEW_TTL_S:
            self._view = (now, read_view(self._read_view))
        return self._view[1]

    def enrich(self, context: Context) -> Context:
        overrides = active_overrides(self.audit.rows(event=EVENT), self.verifier, context.now_ts_s)
        return dataclasses.replace(
            context, breaker=self.policy, scheduler=self.view(), overrides=tuple(overrides)
        )

    @staticmethod
    def still_waiting(record: ProposalRecord, context: Context) -> ExecutionOutcome | None:
        """The refusal to answer without running the executor again: the proposal already waits on the breaker
        for exactly this reason (its status message says so). None: run it (it may go now, or waits anew)."""
        if record.status not in ("pending", "approved") or not record.message.startswith(WAITING):
            return None
        validation = validate(record.action, context)
        if not validation.waiting or record.message != WAITING + validation.message:
            return None
        first = validation.stopped_by
        assert first is not None
        return ExecutionOutcome(record.proposal_id, "refused", validation.message, first.rule)
