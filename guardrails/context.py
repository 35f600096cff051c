"""Build a validation `Context` from a store: topology, each GPU's latest NVML limits, execution history.

TDP: the store records NVML's limit constraints but not nvmlDeviceGetPowerManagementDefaultLimit, so the
maximum constraint stands in for the TDP (on H100/H200 SXM both are 700 W). A `power_limit_default_w` column
in `gpu_samples` would make this exact (see docs/GUARDRAILS.md, schema needs).
"""

from __future__ import annotations

from collections.abc import Sequence

from aiops.store import Store
from guardrails.policy import Context, ExecutionRecord, GpuState
from guardrails.registry import DEFAULT_REGISTRY, Registry
from guardrails.topology import Topology


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def topology_from_store(store: Store) -> Topology:
    rules = store.query("SELECT DISTINCT rule_id FROM lane_rules")
    return Topology.from_rows(
        store.query("SELECT component, kind, parent FROM topology"),
        store.query("SELECT job, gpu FROM job_ranks ORDER BY job, rank"),
        [str(r["rule_id"]) for r in rules],
    )


def gpu_states_from_store(store: Store) -> dict[str, GpuState]:
    """The newest sample of every GPU that has one (rows where NVML answered)."""
    rows = store.query(
        "SELECT gpu, arg_max(power_limit_w, ts_s) AS limit_w, arg_max(power_limit_min_w, ts_s) AS min_w, "
        "arg_max(power_limit_max_w, ts_s) AS max_w, arg_max(max_sm_clock_mhz, ts_s) AS max_clock_mhz "
        "FROM gpu_samples WHERE nvml_error IS NULL GROUP BY gpu"
    )
    return {
        str(r["gpu"]): GpuState(
            power_limit_w=_float(r["limit_w"]),
            power_limit_min_w=_float(r["min_w"]),
            power_limit_max_w=_float(r["max_w"]),
            tdp_w=_float(r["max_w"]),
            max_sm_clock_mhz=_float(r["max_clock_mhz"]),
        )
        for r in rows
    }


def context_from_store(
    store: Store,
    now_ts_s: float,
    history: Sequence[ExecutionRecord] = (),
    registry: Registry = DEFAULT_REGISTRY,
) -> Context:
    return Context(
        topology=topology_from_store(store),
        gpus=gpu_states_from_store(store),
        history=tuple(history),
        now_ts_s=now_ts_s,
        registry=registry,
    )
