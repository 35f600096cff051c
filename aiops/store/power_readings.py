"""Readings of the store every layer above needs: each GPU's power (`aiops.models.GpuPower`) from its newest
sample, the jobs, their priorities, and what a scope draws besides its GPUs.

Demand (what a GPU would draw uncapped): its newest draw, unless it is power-capped now. Capped means NVML's
`SwPowerCap` clocks-event reason is set (nvml.h `nvmlClocksEventReasonSwPowerCap`, 0x4): the draw then shows
the cap, not the work. A capped GPU's demand is its draw from the newest sample in the last `lookback_s`
without `SwPowerCap` (the pre-cap draw), never less than its draw now; when no such sample exists the demand
is unknown and taken as the GPU's maximum limit, so the allocator never believes in headroom it cannot see.

TDP: `power_limit_default_w` (nvmlDeviceGetPowerManagementDefaultLimit); where a collector did not record it,
the maximum constraint stands in (on H100/H200 SXM both are 700 W).

GPUs whose newest sample is an NVML error (lost, off the bus) have no record: nothing can set their limit.
Their draw, if any, still shows in the rack's measured power, so `non_gpu_power_w` (rack power minus the GPUs'
draw) counts it and a budget derived from it stays safe.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from aiops.labels import component_kind
from aiops.models import GpuPower
from aiops.nvml_bits import SW_POWER_CAP
from aiops.store.store import Store

DEFAULT_LOOKBACK_S = 3600.0

_NEWEST_SQL = """
SELECT s.gpu, arg_max(s.power_w, s.ts_s) AS draw_w, arg_max(s.power_limit_w, s.ts_s) AS limit_w,
       arg_max(s.power_limit_min_w, s.ts_s) AS min_w, arg_max(s.power_limit_max_w, s.ts_s) AS max_w,
       arg_max(s.power_limit_default_w, s.ts_s) AS default_w, arg_max(s.max_sm_clock_mhz, s.ts_s) AS clock_mhz,
       arg_max(s.clocks_event_reasons, s.ts_s) AS reasons, arg_max(s.nvml_error, s.ts_s) AS nvml_error,
       max(s.ts_s) AS ts_s
FROM gpu_samples s JOIN topology t ON t.component = s.gpu AND t.kind = 'gpu'
WHERE s.ts_s <= ? AND ({where})
GROUP BY s.gpu
"""

_PRE_CAP_SQL = """
SELECT gpu, arg_max(power_w, ts_s) AS draw_w FROM gpu_samples
WHERE ts_s <= ? AND ts_s > ? AND nvml_error IS NULL AND power_w IS NOT NULL
  AND coalesce(clocks_event_reasons, 0) & {bit} = 0 AND gpu IN (SELECT unnest(?))
GROUP BY gpu
"""


def scope_where(scope: str, racks: Collection[str] = ()) -> tuple[str, list[Any]]:
    """SQL over `topology t` selecting the GPUs a scope covers (fleet, a rack, a node or one GPU; `racks`: the
    topology's racks, whose configured names look like a host's)."""
    kind = component_kind(scope, racks)
    if kind == "fleet":
        return "TRUE", []
    if kind == "rack":
        return "t.rack = ?", [scope]
    if kind == "node":
        return "t.node = ?", [scope]
    if kind == "gpu":
        return "t.component = ?", [scope]
    raise ValueError(f"power scope '{scope[:60]}' is not fleet, a rack, a node or a GPU")


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def newest_ts_s(store: Store) -> float | None:
    """The newest GPU sample's time: "now" for a stored run (which may be old)."""
    value = store.scalar("SELECT max(ts_s) FROM gpu_samples")
    return _float(value)


def jobs_of_gpus(store: Store) -> dict[str, str]:
    """GPU -> the job it serves (from `job_ranks`); a GPU listed under two jobs goes to the first by name."""
    out: dict[str, str] = {}
    for row in store.query("SELECT job, gpu FROM job_ranks ORDER BY job, rank"):
        out.setdefault(str(row["gpu"]), str(row["job"]))
    return out


def gpu_power_from_store(
    store: Store,
    now_ts_s: float | None = None,
    scope: str = "fleet",
    *,
    lookback_s: float = DEFAULT_LOOKBACK_S,
) -> list[GpuPower]:
    """Per GPU in `scope` with a usable newest sample at or before `now_ts_s` (default: the newest sample),
    sorted by GPU name. Raises ValueError for a scope that is not fleet, a rack, a node or a GPU."""
    where, params = scope_where(scope, racks_in_store(store))
    when = now_ts_s if now_ts_s is not None else newest_ts_s(store)
    if when is None:
        return []
    rows = store.query(_NEWEST_SQL.format(where=where), [when, *params])
    usable = [
        r
        for r in rows
        if r["nvml_error"] is None
        and None not in (_float(r["min_w"]), _float(r["max_w"]), _float(r["draw_w"]), _float(r["limit_w"]))
    ]
    capped = [str(r["gpu"]) for r in usable if int(r["reasons"] or 0) & SW_POWER_CAP]
    pre_cap: dict[str, float] = {}
    if capped:
        sql = _PRE_CAP_SQL.format(bit=SW_POWER_CAP)
        for row in store.query(sql, [when, when - lookback_s, capped]):
            pre_cap[str(row["gpu"])] = float(row["draw_w"])
    jobs = jobs_of_gpus(store)
    out: list[GpuPower] = []
    for row in sorted(usable, key=lambda r: str(r["gpu"])):
        name = str(row["gpu"])
        min_w, max_w, draw_w = float(row["min_w"]), float(row["max_w"]), float(row["draw_w"])
        demand_w = max(pre_cap.get(name, max_w), draw_w) if name in capped else None
        tdp_w = _float(row["default_w"]) or max_w
        out.append(
            GpuPower(
                name,
                float(row["limit_w"]),
                min(min_w, max_w),
                max_w,
                tdp_w,
                draw_w,
                jobs.get(name),
                demand_w,
                _float(row["clock_mhz"]),
            )
        )
    return out


def job_priorities_from_store(store: Store) -> dict[str, int]:
    """Job -> priority (higher matters more). The schema's `jobs` table has no priority column today, so every
    job known to `jobs` or `job_ranks` gets 0, unless a `priority` column exists (a scheduler export may add
    one): then its integer value, NULL counting as 0."""
    has_priority = bool(
        store.scalar(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'jobs' AND column_name = 'priority' "
            "AND table_catalog = current_database()"
        )
    )
    out = {str(r["job"]): 0 for r in store.query("SELECT DISTINCT job FROM job_ranks")}
    if has_priority:
        for row in store.query("SELECT job, priority FROM jobs"):
            out[str(row["job"])] = int(row["priority"] or 0)
    else:
        out.update({str(r["job"]): 0 for r in store.query("SELECT job FROM jobs")})
    return out


def non_gpu_power_w(
    store: Store, now_ts_s: float, scope: str = "fleet", *, max_age_s: float = 300.0
) -> float:
    """What the scope draws besides its (NVML-visible) GPUs: the racks' newest measured power (rack_samples,
    no older than `max_age_s`) minus the newest draw of their GPUs; 0 when nothing is measured. A node or GPU
    scope has no facility meter: 0."""
    kind = component_kind(scope, racks_in_store(store))
    if kind not in ("fleet", "rack"):
        return 0.0
    rack_filter = "" if kind == "fleet" else "AND rack = ?"
    params: list[Any] = [now_ts_s, now_ts_s - max_age_s] + ([] if kind == "fleet" else [scope])
    rows = store.query(
        "SELECT rack, arg_max(power_kw, ts_s) AS power_kw FROM rack_samples "
        f"WHERE ts_s <= ? AND ts_s > ? AND power_kw IS NOT NULL {rack_filter} GROUP BY rack",
        params,
    )
    total_w = 0.0
    for row in rows:
        rack = str(row["rack"])
        gpu_w = sum(g.draw_w for g in gpu_power_from_store(store, now_ts_s, rack))
        total_w += max(0.0, float(row["power_kw"]) * 1000.0 - gpu_w)
    return total_w


def racks_in_store(store: Store) -> list[str]:
    return [str(r["component"]) for r in store.query("SELECT component FROM topology WHERE kind = 'rack'")]
