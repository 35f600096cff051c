"""Build a validation `Context` from a store: topology, each GPU's newest power record (`aiops.store.power_readings`)
and the execution history."""

from __future__ import annotations

from collections.abc import Sequence

from aiops.store import Store
from aiops.store.power_readings import gpu_power_from_store
from guardrails.policy import Context, ExecutionRecord
from guardrails.registry import DEFAULT_REGISTRY, Registry
from guardrails.topology import Topology


def topology_from_store(store: Store) -> Topology:
    rules = store.query("SELECT DISTINCT rule_id FROM lane_rules")
    return Topology.from_rows(
        store.query("SELECT component, kind, parent FROM topology"),
        store.query("SELECT job, gpu FROM job_ranks ORDER BY job, rank"),
        [str(r["rule_id"]) for r in rules],
    )


def context_from_store(
    store: Store,
    now_ts_s: float,
    history: Sequence[ExecutionRecord] = (),
    registry: Registry = DEFAULT_REGISTRY,
) -> Context:
    """The GPUs as their newest samples show them (not as of `now_ts_s`, the wall clock of the decision)."""
    return Context(
        topology=topology_from_store(store),
        gpus={g.gpu: g for g in gpu_power_from_store(store)},
        history=tuple(history),
        now_ts_s=now_ts_s,
        registry=registry,
    )
