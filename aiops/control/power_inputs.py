"""What the power budget allocator (`aiops.control.power.allocate`) needs, read from the store or from the
simulated world: each GPU's NVML limit constraints, its draw, its demand and the job it serves; job priorities;
the power a scope draws besides its GPUs (hosts, NICs, fans), which a rack-level DCIM budget must leave room for.

Demand (what a GPU would draw uncapped): its newest draw, unless it is power-capped now. Capped means NVML's
`SwPowerCap` clocks-event reason is set (nvml.h `nvmlClocksEventReasonSwPowerCap`, 0x4): the draw then shows
the cap, not the work. A capped GPU's demand is its draw from the newest sample in the last `lookback_s`
without `SwPowerCap` (the pre-cap draw), never less than its draw now; when no such sample exists the demand
is unknown and taken as the GPU's maximum limit, so the allocator never believes in headroom it cannot see
(it then shares a cut evenly instead of squeezing the job whose demand is hidden).

GPUs whose newest sample is an NVML error (lost, off the bus) have no state and are left out: nothing can set
their limit. Their draw, if any, still shows in the rack's measured power, so `non_gpu_power_w` (rack power
minus the GPUs' draw) counts it and a budget derived from it stays safe.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from aiops.control.power import GpuPower
from aiops.errors import InputError
from aiops.labels import component_kind
from aiops.nvml_bits import SW_POWER_CAP
from aiops.store import Store
from guardrails.policy import GpuState

DEFAULT_LOOKBACK_S = 3600.0
NVML_MW = 1000.0
NVML_CLOCK_SM = 1  # pynvml.NVML_CLOCK_SM

_NEWEST_SQL = """
SELECT s.gpu, arg_max(s.power_w, s.ts_s) AS draw_w, arg_max(s.power_limit_w, s.ts_s) AS limit_w,
       arg_max(s.power_limit_min_w, s.ts_s) AS min_w, arg_max(s.power_limit_max_w, s.ts_s) AS max_w,
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


def _scope_where(scope: str) -> tuple[str, list[Any]]:
    """SQL over `topology t` selecting the GPUs a scope covers (fleet, rackN, nodeN or one GPU)."""
    kind = component_kind(scope)
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


def _jobs_of_gpus(store: Store) -> dict[str, str]:
    """GPU -> the job it serves (from `job_ranks`); a GPU listed under two jobs goes to the first by name."""
    out: dict[str, str] = {}
    for row in store.query("SELECT job, gpu FROM job_ranks ORDER BY job, rank"):
        out.setdefault(str(row["gpu"]), str(row["job"]))
    return out


def gpu_power_from_store(
    store: Store, now_ts_s: float, scope: str = "fleet", *, lookback_s: float = DEFAULT_LOOKBACK_S
) -> list[GpuPower]:
    """Per GPU in `scope` with a usable newest sample at or before `now_ts_s`: constraints, draw, demand, job.
    Sorted by GPU name. Raises ValueError for a scope that is not fleet, a rack, a node or a GPU."""
    where, params = _scope_where(scope)
    rows = store.query(_NEWEST_SQL.format(where=where), [now_ts_s, *params])
    jobs = _jobs_of_gpus(store)
    usable: list[dict[str, Any]] = []
    for row in rows:
        if row["nvml_error"] is not None:
            continue
        if None in (_float(row["min_w"]), _float(row["max_w"]), _float(row["draw_w"])):
            continue
        usable.append(row)
    capped = [str(r["gpu"]) for r in usable if int(r["reasons"] or 0) & SW_POWER_CAP]
    pre_cap: dict[str, float] = {}
    if capped:
        since = now_ts_s - lookback_s
        sql = _PRE_CAP_SQL.format(bit=SW_POWER_CAP)
        for row in store.query(sql, [now_ts_s, since, capped]):
            pre_cap[str(row["gpu"])] = float(row["draw_w"])
    out: list[GpuPower] = []
    for row in sorted(usable, key=lambda r: str(r["gpu"])):
        name = str(row["gpu"])
        min_w, max_w, draw_w = float(row["min_w"]), float(row["max_w"]), float(row["draw_w"])
        demand_w: float | None = None
        if name in capped:
            demand_w = max(pre_cap.get(name, max_w), draw_w)
        out.append(GpuPower(name, min(min_w, max_w), max_w, draw_w, jobs.get(name), demand_w))
    return out


def current_limits_from_store(store: Store, now_ts_s: float, scope: str = "fleet") -> dict[str, float]:
    """Each GPU's enforced power limit in its newest sample (W)."""
    where, params = _scope_where(scope)
    rows = store.query(_NEWEST_SQL.format(where=where), [now_ts_s, *params])
    return {
        str(r["gpu"]): float(r["limit_w"]) for r in rows if r["nvml_error"] is None and _float(r["limit_w"])
    }


def job_priorities_from_store(store: Store) -> dict[str, int]:
    """Job -> priority (higher matters more). The schema's `jobs` table has no priority column today, so every
    job known to `jobs` or `job_ranks` gets 0, unless a `priority` column exists (a scheduler export may add
    one): then its integer value, NULL counting as 0."""
    has_priority = bool(
        store.scalar(
            "SELECT count(*) FROM information_schema.columns WHERE table_name = 'jobs' AND column_name = 'priority'"
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
    kind = component_kind(scope)
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


# -- the simulated world ---------------------------------------------------------------------------------
def gpu_power_from_world(world: Any, scope: str = "fleet") -> list[GpuPower]:
    """What an agent sees of the twin (`aiops.sim.World`) through its NVML-shaped API: constraints, draw and
    clocks-event reasons per GPU, plus the scheduler's job map. A GPU capped now (`SwPowerCap`) has no
    history here, so its demand is its maximum limit (see the module docstring). Lost GPUs are left out."""
    layout = world.layout
    wanted = {int(i) for i in layout.gpus_of(scope)}
    out: list[GpuPower] = []
    for node in range(layout.nodes):
        nvml = world.nvml(node)
        nvml.nvmlInit()
        for local in range(nvml.nvmlDeviceGetCount()):
            index = node * layout.gpus_per_node + local
            if index not in wanted:
                continue
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(local)
                low_mw, high_mw = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
                draw_w = nvml.nvmlDeviceGetPowerUsage(handle) / NVML_MW
                reasons = int(nvml.nvmlDeviceGetCurrentClocksEventReasons(handle))
            except Exception:  # an NVMLError (GPU_IS_LOST, ...): no state, nothing to set
                continue
            job = int(layout.gpu_job[index])
            max_w = high_mw / NVML_MW
            demand_w = max(max_w, draw_w) if reasons & SW_POWER_CAP else None
            out.append(
                GpuPower(
                    gpu=layout.gpu_names[index],
                    min_w=low_mw / NVML_MW,
                    max_w=max_w,
                    draw_w=draw_w,
                    job=layout.jobs[job].name if job >= 0 else None,
                    demand_w=demand_w,
                )
            )
    return out


def gpu_states_from_world(world: Any) -> dict[str, GpuState]:
    """Each GPU's power limits as the twin's NVML reports them (the validation context of the world that is
    actuated); the agent's guardrails use it too."""
    out: dict[str, GpuState] = {}
    layout = world.layout
    for name, index in layout.gpu_index.items():
        nvml = world.nvml(int(layout.gpu_node[index]))
        try:
            nvml.nvmlInit()
            handle = nvml.nvmlDeviceGetHandleByIndex(int(layout.gpu_local[index]))
            low_mw, high_mw = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
            out[name] = GpuState(
                power_limit_w=nvml.nvmlDeviceGetPowerManagementLimit(handle) / NVML_MW,
                power_limit_min_w=low_mw / NVML_MW,
                power_limit_max_w=high_mw / NVML_MW,
                tdp_w=nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle) / NVML_MW,
                max_sm_clock_mhz=float(nvml.nvmlDeviceGetMaxClockInfo(handle, NVML_CLOCK_SM)),
            )
        except Exception:  # an NVMLError (GPU lost, ...): no state, so power envelopes fail closed
            continue
    return out


def total_draw_w(gpus: Sequence[GpuPower]) -> float:
    return sum(g.draw_w for g in gpus)


# -- DCIM signals ---------------------------------------------------------------------------------------
MAX_BUDGET_KW = 1_000_000.0
SIGNAL_KEYS: tuple[str, ...] = ("kw", "clear")


class DcimSignalError(InputError):
    """A DCIM signal (file or command line) that does not validate: names the source, field and allowed values."""


@dataclass(frozen=True)
class DcimSignal:
    """A facility's word on one scope: `cap` its total power at `budget_kw`, or `clear` the cap."""

    scope: str  # fleet | rack{r}
    kind: str  # cap | clear
    budget_kw: float | None
    ts_s: float
    source: str = "cli"

    @property
    def signal(self) -> str:
        return f"dcim_{self.kind}"

    def same_as(self, other: DcimSignal | None) -> bool:
        return other is not None and (self.scope, self.kind, self.budget_kw) == (
            other.scope,
            other.kind,
            other.budget_kw,
        )


def check_scope(scope: str, known: Iterable[str] | None, source: str, field: str) -> str:
    """A DCIM scope is `fleet` or a rack name that exists (when `known` racks are given)."""
    racks = sorted(known) if known is not None else None
    allowed = ["fleet", *(racks if racks is not None else ["rack<N>"])]
    kind = component_kind(scope)
    if kind not in ("fleet", "rack") or (racks is not None and kind == "rack" and scope not in racks):
        raise DcimSignalError(source, field, f"'{scope[:60]}' is not a DCIM scope here", allowed)
    return scope


def check_budget_kw(value: Any, source: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise DcimSignalError(source, field, f"must be a finite number of kW, got {value!r:.40}")
    if not 0 < value <= MAX_BUDGET_KW:
        raise DcimSignalError(source, field, f"{value:g} kW is out of range", f"0 < kw <= {MAX_BUDGET_KW:g}")
    return float(value)


def parse_dcim_signals(
    data: Any, source: str, ts_s: float, known_racks: Iterable[str] | None = None
) -> list[DcimSignal]:
    """`{"rack1": {"kw": 18}, "fleet": {"kw": 120}, "rack0": {"clear": true}}` -> signals, one per scope."""
    if not isinstance(data, dict):
        raise DcimSignalError(source, "(top level)", "a mapping of scope -> {kw: N} or {clear: true}")
    racks = list(known_racks) if known_racks is not None else None
    out: list[DcimSignal] = []
    for scope, body in data.items():
        name = check_scope(str(scope), racks, source, str(scope))
        if not isinstance(body, dict) or not body:
            raise DcimSignalError(
                source, name, "must be a mapping such as {kw: 18} or {clear: true}", SIGNAL_KEYS
            )
        unknown = sorted(str(k) for k in body if k not in SIGNAL_KEYS)
        if unknown:
            raise DcimSignalError(source, f"{name}.{unknown[0]}", "unknown key", SIGNAL_KEYS)
        if "kw" in body and "clear" in body:
            raise DcimSignalError(source, name, "give either kw or clear, not both", SIGNAL_KEYS)
        if "clear" in body:
            if body["clear"] is not True:
                raise DcimSignalError(source, f"{name}.clear", "only `clear: true` clears a cap", ["true"])
            out.append(DcimSignal(name, "clear", None, ts_s, source))
        else:
            out.append(
                DcimSignal(name, "cap", check_budget_kw(body["kw"], source, f"{name}.kw"), ts_s, source)
            )
    return out


def load_dcim_file(
    path: str | Path, ts_s: float, known_racks: Iterable[str] | None = None
) -> list[DcimSignal]:
    """Read a JSON or YAML file of DCIM signals (see `parse_dcim_signals`)."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DcimSignalError(where, "(file)", "no such file") from None
    except (IsADirectoryError, UnicodeDecodeError) as exc:
        raise DcimSignalError(where, "(file)", f"cannot read: {type(exc).__name__}") from None
    try:
        data = json.loads(text) if where.endswith(".json") else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        raise DcimSignalError(where, "(file)", f"not JSON/YAML: {str(exc).splitlines()[0]}") from None
    return parse_dcim_signals(data if data is not None else {}, f"{where}", ts_s, known_racks)


def record_signal(store: Store, signal: DcimSignal) -> None:
    store.ingest(
        "dcim_signals",
        {"ts_s": [signal.ts_s], "scope": [signal.scope], "kind": [signal.kind],
         "budget_kw": [signal.budget_kw], "source": [signal.source]},
    )  # fmt: skip


def signals_in_force(store: Store) -> dict[str, DcimSignal]:
    """The newest signal of every scope that has one (a `clear` stays until something newer arrives)."""
    rows = store.query(
        "SELECT scope, arg_max(kind, ts_s) AS kind, arg_max(budget_kw, ts_s) AS budget_kw, max(ts_s) AS ts_s, "
        "arg_max(source, ts_s) AS source FROM dcim_signals GROUP BY scope ORDER BY scope"
    )
    return {
        str(r["scope"]): DcimSignal(str(r["scope"]), str(r["kind"]), _float(r["budget_kw"]), float(r["ts_s"]),
                                    str(r["source"]))
        for r in rows
    }  # fmt: skip


def racks_in_store(store: Store) -> list[str]:
    return [str(r["component"]) for r in store.query("SELECT component FROM topology WHERE kind = 'rack'")]
