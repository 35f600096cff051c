"""`[guardrails.breaker]`: the fleet-wide circuit breaker's limits (guardrails/breaker.py, docs/GUARDRAILS.md):
at most this share of the nodes, and of any rack, taken out of service (drained, cordoned, rebooted, moved off
by a job move) in a window, counted across every tier and executor. A section of `[guardrails]`
(aiops/config.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class BreakerConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    enabled: bool = Field(default=True, description="false: no limit (not recommended)")
    max_nodes_fraction: float = Field(
        default=0.1, gt=0, le=1, description="share of all nodes out of service at once, at most"
    )
    max_rack_fraction: float = Field(
        default=0.25, gt=0, le=1, description="share of any one rack's nodes out of service at once, at most"
    )
    window_s: float = Field(
        default=3600.0,
        ge=60,
        le=30 * 86_400,
        description="actions this recent count (the scheduler's drained/cordoned nodes count whatever their age)",
    )
    min_nodes: int = Field(
        default=4,
        ge=0,
        le=100_000,
        description="this many nodes may always be out (small fleets, racks): a few distinct faults an hour are "
        "routine there; a storm is many more",
    )
