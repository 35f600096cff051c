"""`component_history(store, component)`: one GPU's or node's record across days, from the workspace alone.

- failures: every incident whose top hypothesis names the component (a node: it or one of its GPUs or NICs),
  with the cause, when it opened and resolved;
- actions: every executed proposal on it (a GPU: on it or on its node; a node: on it or anything of it), when it
  ran on the telemetry's clock (`executions.data_ts_s` where the closed loop stamped it, else the ledger's time),
  and its verified outcome (the closed loop's `action_outcomes`: worked | failed | unknown; none yet: unchecked);
- repeats: a failure of a cause that had failed on the component before, with a repair between (`gpu_reset`,
  `reboot_node`): the repair did not hold.
Times are seconds since the epoch on the telemetry's clock (the twin's, in a simulation). Hostile text (titles,
components from telemetry) is data only.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from aiops.store import Store

DAY_S = 86_400.0
DEFAULT_WINDOW_S = 30 * DAY_S
REPAIR_KINDS: tuple[str, ...] = ("gpu_reset", "reboot_node")
# Causes that are a fault of the component itself (hardware, firmware, its link): what makes a lemon. Not:
# configuration (power_cap_misconfig, ecn_misconfig, lanes, roce), the facility or the rack (facility_power_cap,
# rack_cooling_failure), the workload (application_error, input_pipeline_bottleneck, bulk traffic), benign drift.
FAULT_LABELS: frozenset[str] = frozenset(
    {
        "gpu_ecc_error",
        "gpu_fell_off_bus",
        "nvlink_degraded",
        "pcie_degraded",
        "thermal_throttle",
        "power_brake",
        "nic_link_flap",
        "gpu_driver_firmware_fault",
    }
)


@dataclass(frozen=True)
class Failure:
    incident_id: str
    ts_s: float  # opened
    resolved_ts_s: float | None
    root_cause: str
    component: str  # the top hypothesis' component (a GPU of a node, for a node's history)
    confidence: float
    title: str = ""

    @property
    def fault(self) -> bool:
        """A fault of the component itself (counts toward its lemon score)."""
        return self.root_cause in FAULT_LABELS


@dataclass(frozen=True)
class Act:
    proposal_id: str
    kind: str
    target: str
    ts_s: float  # when it ran, on the telemetry's clock where known
    status: str  # the ledger's: executed | failed | started
    incident_id: str | None
    outcome: str | None = None  # worked | failed | unknown (the closed loop's check), None: not checked

    @property
    def repair(self) -> bool:
        return self.kind in REPAIR_KINDS and self.status == "executed"


@dataclass(frozen=True)
class ComponentHistory:
    component: str
    since_ts_s: float
    failures: tuple[Failure, ...] = ()
    actions: tuple[Act, ...] = ()
    recurrences: tuple[dict[str, Any], ...] = field(default_factory=tuple)  # the closed loop's incident_links

    def repairs_between(self, start_ts_s: float, end_ts_s: float, component: str) -> list[Act]:
        """Executed repairs of `component` (a GPU: it or its node) after `start_ts_s` and before `end_ts_s`."""
        node = component.split("/", 1)[0]
        return [
            a
            for a in self.actions
            if a.repair and start_ts_s < a.ts_s < end_ts_s and a.target in (component, node)
        ]

    def repeats(self) -> list[Failure]:
        """Failures whose cause had failed on the same component before, with a repair between."""
        found = []
        for i, failure in enumerate(self.failures):
            for earlier in self.failures[:i]:
                same = earlier.root_cause == failure.root_cause and earlier.component == failure.component
                if same and self.repairs_between(earlier.ts_s, failure.ts_s, failure.component):
                    found.append(failure)
                    break
        return found

    def timeline(self) -> list[dict[str, Any]]:
        """Failures and actions in time order, as people read them (console, reports)."""
        rows: list[dict[str, Any]] = [
            {
                "ts_s": f.ts_s,
                "what": "failure",
                "detail": f"{f.root_cause} on {f.component} ({f.incident_id})",
                "ref": f.incident_id,
            }
            for f in self.failures
        ]
        rows += [
            {
                "ts_s": a.ts_s,
                "what": a.kind,
                "detail": f"{a.kind} on {a.target}: {a.status}"
                + (f", outcome {a.outcome}" if a.outcome else ""),
                "ref": a.proposal_id,
            }
            for a in self.actions
        ]
        return sorted(rows, key=lambda r: (r["ts_s"], r["what"]))


def _covers(column: str, component: str) -> tuple[str, list[Any]]:
    """SQL naming `component`, its node (a GPU's or NIC's), or anything of it (a node's)."""
    if "/" in component:
        return f"{column} IN (?, ?)", [component, component.split("/", 1)[0]]
    return f"({column} = ? OR starts_with({column}, ?))", [component, component + "/"]


def failures_of(store: Store, component: str, since_ts_s: float) -> list[Failure]:
    """Incidents whose top hypothesis names the component (a node: it or anything of it), oldest first."""
    where = "h.component = ?" if "/" in component else "(h.component = ? OR starts_with(h.component, ?))"
    params: list[Any] = [component] if "/" in component else [component, component + "/"]
    rows = store.query(
        "SELECT i.incident_id, i.opened_ts_s, i.resolved_ts_s, i.title, h.root_cause, h.component, h.confidence "
        f"FROM incidents i JOIN hypotheses h ON h.incident_id = i.incident_id AND h.rank = 1 WHERE {where} "
        "AND i.opened_ts_s >= ? ORDER BY i.opened_ts_s, i.incident_id",
        [*params, since_ts_s],
    )
    return [
        Failure(
            str(r["incident_id"]),
            float(r["opened_ts_s"]),
            None if r["resolved_ts_s"] is None else float(r["resolved_ts_s"]),
            str(r["root_cause"]),
            str(r["component"]),
            float(r["confidence"]),
            str(r["title"]),
        )
        for r in rows
    ]


def actions_on(store: Store, component: str, since_ts_s: float) -> list[Act]:
    """Executed (or failed) proposals on the component, its node or anything of it, oldest first."""
    when = "coalesce(e.data_ts_s, e.ts_s)"
    outcome_sql = (
        "(SELECT o.verdict FROM action_outcomes o WHERE o.proposal_id = e.proposal_id "
        "ORDER BY o.checked_ts_s DESC LIMIT 1)"
    )
    where, params = _covers("e.target", component)
    rows = store.query(
        f"SELECT e.proposal_id, e.kind, e.target, {when} AS ts_s, e.status, p.incident_id, {outcome_sql} AS outcome "
        f"FROM executions e LEFT JOIN proposals p USING (proposal_id) WHERE {where} AND {when} >= ? "
        "ORDER BY ts_s, e.proposal_id",
        [*params, since_ts_s],
    )
    return [
        Act(
            str(r["proposal_id"]),
            str(r["kind"]),
            str(r["target"]),
            float(r["ts_s"]),
            str(r["status"]),
            None if r["incident_id"] is None else str(r["incident_id"]),
            None if r["outcome"] is None else str(r["outcome"]),
        )
        for r in rows
    ]


def recurrences_of(store: Store, component: str) -> list[dict[str, Any]]:
    """The closed loop's links of an incident to the earlier one of the same cause on the component."""
    where, params = _covers("component", component)
    return store.query(f"SELECT * FROM incident_links WHERE {where} ORDER BY ts_s", params)


def newest_ts_s(store: Store) -> float | None:
    """The newest time the workspace knows on the telemetry's clock (the latest incident's activity)."""
    value = store.scalar("SELECT max(last_ts_s) FROM incidents")
    return None if value is None else float(value)


def component_history(
    store: Store, component: str, *, now_ts_s: float | None = None, window_s: float = DEFAULT_WINDOW_S
) -> ComponentHistory:
    """The component's failures, actions and outcomes over the last `window_s` before `now_ts_s` (default: the
    newest incident's time)."""
    now = now_ts_s if now_ts_s is not None else (newest_ts_s(store) or 0.0)
    since = now - window_s
    return ComponentHistory(
        component,
        since,
        tuple(failures_of(store, component, since)),
        tuple(actions_on(store, component, since)),
        tuple(recurrences_of(store, component)),
    )
