"""The circuit breaker on /metrics, so that Prometheus and the chart's `AiopsBreakerHolding` alert page people
when remediation steps wait on it (docs/METRICS.md): `aiops_breaker_nodes_out`, `aiops_breaker_nodes`,
`aiops_breaker_limit_nodes`, `aiops_breaker_waiting_proposals`. Computed at most every `EVERY_S` (the
scheduler's view is a call to another system), inside the flush's transaction; a failure is the flush step's."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from aiops.runtime.safety import state_of, waiting_on_breaker
from aiops.service.metrics import MetricsCache
from aiops.store import Store
from guardrails.proposal_desk import Guardrails

EVERY_S = 15.0


@dataclass
class BreakerMetrics:
    metrics: MetricsCache
    monotonic: Callable[[], float] = time.monotonic
    last_s: float = field(default=-1e18)

    def observe(self, store: Store, desk: Callable[[], Guardrails], now_ts_s: float) -> None:
        if self.monotonic() - self.last_s < EVERY_S:
            return
        self.last_s = self.monotonic()
        state = state_of(desk(), now_ts_s)
        waiting = len(waiting_on_breaker(store))
        self.metrics.gauge(
            "breaker_nodes", "nodes the circuit breaker counts (topology and scheduler)", state.nodes
        )
        self.metrics.gauge(
            "breaker_nodes_out",
            "nodes out of service now, as the circuit breaker counts them",
            len(state.out),
        )
        self.metrics.gauge(
            "breaker_limit_nodes",
            "nodes that may be out of service at once (overrides included)",
            state.limit,
        )
        self.metrics.gauge(
            "breaker_waiting_proposals", "remediation proposals waiting on the circuit breaker", waiting
        )
