"""Intended state: what the product set, and so what it expects to see (issue 34, contract 2 of the wave).

Every executed action is the expected state of what it changed until a later executed action changes the same
thing (a reset, a rollback's inverse, another cap: the newest wins), the executor rolled it back (its execution
then failed and never counts), or it expires (`[guardrails] intended_ttl_s` after it ran: a cap left in place
for days is again a limit nobody is answering for). Detection, diagnosis and reports read it: a limit the
service set is not a misconfiguration, not an incident, not GPU-hours lost; a limit that moves away from what
was set, or that nobody set, still is.

Where it comes from, and nothing else (the analyst stays blind to the twin):
- this workspace's own execution ledger (`executions` with status `executed`, its proposal's action, the
  actuator's reported detail): a node's own actions, and on `aiops fleet` the proposals it dispatched that a
  node ran;
- on the fleet, what the node agents export (`aiops_intended_state*`, docs/METRICS.md, read into
  `intended_exports` by aiops/fleet/pivot.py): what each node ran itself.

Times are on the telemetry's clock (`executions.data_ts_s`; a real host's wall clock, the twin's in a
simulation), so a window of samples is compared with what was intended at its end.

Properties (`PROPERTIES`), per kind (`effects`): set_power_limit/reset_power_limit -> `power_limit_w` per GPU
(the limits the actuator read back, else the parameter); set_clock_limit -> `sm_clock_max_mhz` per GPU (a GPU
reset or a node reboot sets it back to the default: None); set_cooling_state -> `cooling_fraction`;
set_fan_speed -> `fan_speed_pct`; drain_node -> `drained`; enable_lanes -> `lanes_enforced`; enable_ecn ->
`ecn_enabled`; set_lane_rate -> `lane_rate_fraction:<lane>`; restart_job with `exclude` -> `excluded:<component>`
on the job (it runs without that component: a node agent that restarted its job off itself says so, and the
fleet's copy of the same restart is superseded, guardrails/supersede.py). A value of None means "the default":
the product put it back (a reset), so anything else is not its doing.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from aiops.store import Store
from guardrails.actions import Action, canonical_json, sha256_hex

DEFAULT_TTL_S = 72 * 3600.0
PROPERTIES: tuple[str, ...] = (
    "power_limit_w",
    "sm_clock_max_mhz",
    "cooling_fraction",
    "fan_speed_pct",
    "drained",
    "lanes_enforced",
    "ecn_enabled",
    "lane_rate_fraction",  # one per lane: lane_rate_fraction:<lane>
    "excluded",  # one per component a job was restarted without: excluded:<component>
)
# how close a reading must be to the value set to be that value: NVML reads power limits back in mW, clocks in
# MHz steps the GPU supports (a locked ceiling reads as the nearest supported clock)
TOLERANCE: dict[str, tuple[float, float]] = {  # property -> (absolute, relative)
    "power_limit_w": (2.0, 0.01),
    "sm_clock_max_mhz": (15.0, 0.01),
    "cooling_fraction": (0.01, 0.0),
    "fan_speed_pct": (1.0, 0.0),
}

Key = tuple[str, str]  # (component, property)


@dataclass(frozen=True)
class Intended:
    """The value an executed action set on one (component, property), who set it and until when."""

    component: str
    prop: str  # the property (contract 2 calls it `property`)
    value: float | None  # None: the default (the product put it back)
    proposal_id: str
    kind: str
    action_hash: str
    set_ts_s: float  # on the telemetry's clock
    expires_ts_s: float
    source: str = "executed"  # executed (this workspace's ledger) | node:<host> (what that agent exported)

    @property
    def key(self) -> Key:
        return (self.component, self.prop)

    def matches(self, observed: float | None) -> bool:
        """Is `observed` this value (within the property's read-back tolerance)? Never for a default."""
        if self.value is None or observed is None or not math.isfinite(float(observed)):
            return False
        absolute, relative = TOLERANCE.get(self.prop.split(":")[0], (1e-6, 0.0))
        return abs(float(observed) - self.value) <= max(absolute, relative * abs(self.value))


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(float(value)) else None


def _gpus(units: Iterable[str], target: str) -> list[str]:
    gpus = sorted(u for u in units if "/gpu" in u)
    return gpus or ([target] if "/gpu" in target else [])


def effects(
    kind: str, target: str, parameters: Mapping[str, Any], units: Iterable[str], detail: Mapping[str, Any]
) -> list[tuple[str, str, float | None]]:
    """What an executed action set: (component, property, value) for each thing it changed. Kinds that set no
    lasting state (tickets, checks, plain restarts, migrations) set nothing here."""
    units = list(units)
    if kind in ("set_power_limit", "reset_power_limit"):
        observed = detail.get("power_limit_w")
        if isinstance(observed, dict) and observed:
            return [(str(g), "power_limit_w", _number(v)) for g, v in sorted(observed.items())]
        wanted = _number(parameters.get("power_limit_w")) if kind == "set_power_limit" else None
        if kind == "set_power_limit" and wanted is None:
            return []  # a fraction of TDP the actuator did not report: the value is unknown here
        return [(g, "power_limit_w", wanted) for g in _gpus(units, target)]
    if kind == "set_clock_limit":
        mhz = _number(parameters.get("sm_clock_max_mhz"))
        return [(g, "sm_clock_max_mhz", mhz) for g in _gpus(units, target)] if mhz is not None else []
    if kind in ("gpu_reset", "reboot_node"):  # both clear locked clocks (nvmlDeviceResetGpuLockedClocks)
        return [(g, "sm_clock_max_mhz", None) for g in _gpus(units, target)]
    simple = {
        "set_cooling_state": ("cooling_fraction", parameters.get("cooling_fraction")),
        "set_fan_speed": ("fan_speed_pct", parameters.get("fan_speed_pct")),
        "drain_node": ("drained", 1.0),
        "enable_lanes": ("lanes_enforced", 1.0),
        "enable_ecn": ("ecn_enabled", 1.0),
        "set_lane_rate": (f"lane_rate_fraction:{parameters.get('lane', '')}", parameters.get("fraction")),
    }
    exclude = parameters.get("exclude")
    if kind == "restart_job" and isinstance(exclude, str) and exclude:
        return [(target, f"excluded:{exclude}", 1.0)]
    if kind in simple:
        prop, value = simple[kind]
        number = _number(value)
        return [(target, prop, number)] if number is not None else []
    return []


class IntendedHistory:
    """Every intended value in the order it was set; `at(t)` is the state in force at `t`."""

    def __init__(self, entries: Iterable[Intended]) -> None:
        self.entries = sorted(entries, key=lambda e: (e.set_ts_s, e.proposal_id))

    def __bool__(self) -> bool:
        return bool(self.entries)

    def at(self, now_ts_s: float) -> dict[Key, Intended]:
        """Per (component, property), the newest value set at or before `now_ts_s` and not expired by then."""
        state: dict[Key, Intended] = {}
        for entry in self.entries:
            if entry.set_ts_s > now_ts_s:
                break
            state[entry.key] = entry
        return {k: e for k, e in state.items() if e.expires_ts_s > now_ts_s}

    def value(self, component: str, prop: str, now_ts_s: float) -> Intended | None:
        found = None
        for entry in self.entries:
            if entry.set_ts_s > now_ts_s:
                break
            if entry.component == component and entry.prop == prop:
                found = entry
        return found if found is not None and found.expires_ts_s > now_ts_s else None

    def intervals(self, prop: str) -> list[tuple[str, float, float, float | None, str]]:
        """(component, from, to, value, proposal id) of each value of `prop` while it was in force: from when it
        was set to when the next value replaced it or it expired."""
        out = []
        by_component: dict[str, list[Intended]] = {}
        for entry in self.entries:
            if entry.prop == prop:
                by_component.setdefault(entry.component, []).append(entry)
        for component, entries in sorted(by_component.items()):
            for entry, following in zip(entries, [*entries[1:], None], strict=True):
                end = entry.expires_ts_s if following is None else min(entry.expires_ts_s, following.set_ts_s)
                out.append((component, entry.set_ts_s, end, entry.value, entry.proposal_id))
        return out


def ttl_s(store: Store) -> float:
    configured = getattr(store.guardrails, "intended_ttl_s", None)
    return float(configured) if configured else DEFAULT_TTL_S


def _executed(store: Store, ttl: float) -> list[Intended]:
    rows = store.query(
        "SELECT e.proposal_id, e.units, coalesce(e.data_ts_s, e.ts_s) AS set_ts_s, e.result, p.action "
        "FROM executions e JOIN proposals p USING (proposal_id) WHERE e.status = 'executed' ORDER BY set_ts_s"
    )
    out = []
    for row in rows:
        try:
            action, result = json.loads(row["action"]), json.loads(row["result"] or "{}")
        except ValueError:
            continue  # an unreadable row is no evidence of what was set (audit verify names tampering)
        detail = result.get("detail") if isinstance(result, dict) else None
        kind, target = str(action.get("kind", "")), str(action.get("target", ""))
        parameters = action.get("parameters") if isinstance(action.get("parameters"), dict) else {}
        digest = _hash(kind, target, parameters)
        for component, prop, value in effects(
            kind, target, parameters, row["units"] or [], detail if isinstance(detail, dict) else {}
        ):
            set_ts_s = float(row["set_ts_s"])
            out.append(
                Intended(
                    component, prop, value, str(row["proposal_id"]), kind, digest, set_ts_s, set_ts_s + ttl
                )
            )
    return out


def _hash(kind: str, target: str, parameters: dict[str, Any]) -> str:
    """`guardrails.actions.action_hash` of the stored action's (kind, target, parameters)."""
    return sha256_hex(canonical_json([kind, target, parameters]))


def _exported(store: Store) -> list[Intended]:
    """What node agents exported (a fleet workspace; empty on a node)."""
    rows = store.query(
        "SELECT node, component, property, value, proposal_id, kind, action_hash, set_ts_s, expires_ts_s "
        "FROM intended_exports ORDER BY set_ts_s"
    )
    return [
        Intended(
            str(r["component"]),
            str(r["property"]),
            None if r["value"] is None else float(r["value"]),
            str(r["proposal_id"]),
            str(r["kind"]),
            str(r["action_hash"]),
            float(r["set_ts_s"]),
            float(r["expires_ts_s"]),
            f"node:{r['node']}",
        )
        for r in rows
    ]


def intended_history(store: Store) -> IntendedHistory:
    """Everything this workspace knows it (or, on the fleet, a node agent) set, from its ledger and exports."""
    own = _executed(store, ttl_s(store))
    mine = {(e.proposal_id, e.component, e.prop) for e in own}
    exported = [e for e in _exported(store) if (e.proposal_id, e.component, e.prop) not in mine]
    return IntendedHistory([*own, *exported])


def intended_state(store: Store, now_ts_s: float) -> dict[Key, Intended]:
    """Contract 2: per (component, property), the value the newest executed action set, in force at
    `now_ts_s` (telemetry clock): its proposal, when it was set, and when it expires."""
    return intended_history(store).at(now_ts_s)


def history_key(store: Store) -> tuple[Any, ...]:
    """Changes whenever the intended history may have (a new execution, a newly exported value): a cheap
    question callers ask before rebuilding the history."""
    row = store.query(
        "SELECT (SELECT count(*) FROM executions WHERE status = 'executed') AS n, "
        "(SELECT max(coalesce(data_ts_s, ts_s)) FROM executions) AS t, "
        "(SELECT count(*) FROM intended_exports) AS x"
    )[0]
    return (row["n"], row["t"], row["x"])


class IntendedCache:
    """The intended history of one store, rebuilt only when `history_key` changed (detection asks every window)."""

    def __init__(self) -> None:
        self.key: tuple[Any, ...] | None = None
        self.history = IntendedHistory([])

    def get(self, store: Store) -> IntendedHistory:
        key = history_key(store)
        if key != self.key:
            self.key, self.history = key, intended_history(store)
        return self.history


def restore_intended(actions: list[Action], intended: Mapping[Key, Intended]) -> list[Action]:
    """A limit that moved away from what the product set is put back to that value, not reset to the default
    (which would undo the product's own cap): each `reset_power_limit` on a GPU, or on a node all of whose
    set GPUs share one value, becomes `set_power_limit` to the value that was set."""
    out = []
    for action in actions:
        if action.kind != "reset_power_limit":
            out.append(action)
            continue
        mine = [
            e
            for (component, prop), e in intended.items()
            if prop == "power_limit_w" and e.value is not None and component_in(component, action.target)
        ]
        values = {float(e.value) for e in mine if e.value is not None}
        if len(values) != 1:
            out.append(action)
            continue
        value = values.pop()
        who = ", ".join(sorted({e.proposal_id for e in mine}))
        out.append(
            action.model_copy(
                update={
                    "kind": "set_power_limit",
                    "parameters": {"power_limit_w": value},
                    "reason": f"put back the {value:g} W limit {who} set (intended state); it moved away from it",
                    "rollback": {"kind": "reset_power_limit"},
                }
            )
        )
    return out


def component_in(component: str, target: str) -> bool:
    """`node3/gpu5` is in `node3` and in itself."""
    return component == target or component.startswith(target + "/")


__all__ = [
    "DEFAULT_TTL_S",
    "PROPERTIES",
    "Intended",
    "IntendedCache",
    "IntendedHistory",
    "effects",
    "intended_history",
    "intended_state",
    "restore_intended",
]
