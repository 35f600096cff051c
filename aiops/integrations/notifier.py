"""The notifier the node service drives (docs/NOTIFY.md): it tells the configured webhooks (generic JSON,
Slack, Alertmanager, PagerDuty, Teams) when an incident opens, is diagnosed and resolves, through a durable
queue in the workspace.

The service calls, from its own loop:
- `Notifier.enqueue(store, event)` inside the write that records the incident change (so the notification
  exists exactly when the change does); `incident_event(...)` builds the event;
- `Notifier.pump(workspace)` every second or so, outside any open store: a brief write takes the due
  deliveries, they are POSTed with the database closed, a second brief write records the results.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from aiops.config import NotifyConfig
from aiops.integrations.event import IncidentEvent, incident_event
from aiops.integrations.sink_queue import Delivery, Result, RetryPolicy, Sink, due, enqueue, record
from aiops.integrations.transport import send as send_http
from aiops.store import Store, Workspace

SendFn = Callable[[Delivery], Result]
DEFAULT_RETRY_BASE_S = 2.0
DEFAULT_BATCH_LIMIT = 50

__all__ = ["IncidentEvent", "Notifier", "PumpStats", "incident_event"]


@dataclass(frozen=True)
class PumpStats:
    """What one pump did: deliveries attempted and what became of them."""

    attempted: int = 0
    delivered: int = 0
    retrying: int = 0
    failed: int = 0
    given_up: int = 0


class Notifier:
    """`clock` returns wall-clock seconds since the epoch (the queue's `ts_s`); `send` is the transport
    (`transport.send`; tests pass a fake); `retry_base_s` the first retry's wait (it doubles up to
    `config.retry_max_s`)."""

    def __init__(
        self,
        config: NotifyConfig,
        clock: Callable[[], float] = time.time,
        send: SendFn = send_http,
        *,
        retry_base_s: float = DEFAULT_RETRY_BASE_S,
        batch_limit: int = DEFAULT_BATCH_LIMIT,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        sinks = (Sink.from_config(hook, f"notify.webhooks[{n}]") for n, hook in enumerate(config.webhooks))
        self.sinks = {sink.sink_id: sink for sink in sinks}
        self.policy = RetryPolicy(retry_base_s, config.retry_max_s, config.give_up_after_s)
        self.batch_limit = batch_limit
        self._clock = clock
        self._send = send
        self._rng = rng or random.Random()

    def enqueue(self, store: Store, event: IncidentEvent) -> int:
        """Queue `event` for every sink (de-duplicated); returns how many notifications were added."""
        severity = self.config.severity
        return len(enqueue(store, event, self.sinks.values(), self._clock(), severity.for_sink))

    def pump(self, workspace: Workspace) -> PumpStats:
        """Send what is due now. Holds the database only for the two brief writes, never during HTTP."""
        if not self.sinks:
            return PumpStats()
        with workspace.write() as store:
            deliveries = due(
                store,
                self._clock(),
                self.sinks,
                self.policy,
                timeout_s=self.config.timeout_s,
                limit=self.batch_limit,
            )
        if not deliveries:
            return PumpStats()
        results = [(delivery, self._attempt(delivery)) for delivery in deliveries]
        with workspace.write() as store:
            statuses = [record(store, d, r, self._clock(), self.policy, self._rng) for d, r in results]
        return PumpStats(
            attempted=len(statuses),
            delivered=statuses.count("delivered"),
            retrying=statuses.count("pending"),
            failed=statuses.count("failed"),
            given_up=statuses.count("given_up"),
        )

    def _attempt(self, delivery: Delivery) -> Result:
        try:
            return self._send(delivery)
        except Exception as exc:  # a broken transport must not lose the queue's place: retried
            return Result("retry", None, f"{type(exc).__name__}: {exc}")
