"""DCIM power signals: a facility's word on a rack or the fleet (`cap` its total power at `budget_kw`, or
`clear` the cap), from the command line or a JSON/YAML file, validated with errors that name the source, the
field and the allowed values; stored in `dcim_signals` (the newest row per scope is the signal in force).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiops.errors import DcimSignalError
from aiops.labels import component_kind
from aiops.safeload import load_file
from aiops.store import Store


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


# -- DCIM signals ---------------------------------------------------------------------------------------
MAX_BUDGET_KW = 1_000_000.0
SIGNAL_KEYS: tuple[str, ...] = ("kw", "clear")


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
    kind = component_kind(scope, racks or ())
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
    data = load_file(path, DcimSignalError)
    return parse_dcim_signals(data if data is not None else {}, where, ts_s, known_racks)


def record_signal(store: Store, signal: DcimSignal) -> None:
    store.ingest(
        "dcim_signals",
        {
            "ts_s": [signal.ts_s],
            "scope": [signal.scope],
            "kind": [signal.kind],
            "budget_kw": [signal.budget_kw],
            "source": [signal.source],
        },
    )


def signals_in_force(store: Store) -> dict[str, DcimSignal]:
    """The newest signal of every scope that has one (a `clear` stays until something newer arrives)."""
    rows = store.query(
        "SELECT scope, arg_max(kind, ts_s) AS kind, arg_max(budget_kw, ts_s) AS budget_kw, max(ts_s) AS ts_s, "
        "arg_max(source, ts_s) AS source FROM dcim_signals GROUP BY scope ORDER BY scope"
    )
    return {
        str(r["scope"]): DcimSignal(
            str(r["scope"]), str(r["kind"]), _float(r["budget_kw"]), float(r["ts_s"]), str(r["source"])
        )
        for r in rows
    }


# The signals up to a window's end, oldest first (the detector and the analyst read caps from here).
DCIM_SIGNALS_SQL = (
    "SELECT ts_s, scope, kind, budget_kw FROM dcim_signals WHERE ts_s <= ? ORDER BY ts_s, scope"
)


def dcim_caps_kw(store: Store, t0: float, t1: float) -> dict[str, float]:
    """Scope (`fleet` or a rack) -> the DCIM cap in force at some time in (t0, t1]: the newest signal of the
    scope is a cap, or a cap arrived within the window (and was cleared again in it)."""
    return caps_kw_from(store.query(DCIM_SIGNALS_SQL, [t1]), t0)


def caps_kw_from(signals: Iterable[Mapping[str, Any]], t0: float) -> dict[str, float]:
    """`dcim_caps_kw` from the signals up to the window's end (DCIM_SIGNALS_SQL's rows, oldest first)."""
    caps: dict[str, float] = {}
    for r in signals:
        scope = str(r["scope"])
        if r["kind"] == "cap" and r["budget_kw"] is not None:
            caps[scope] = float(r["budget_kw"])
        elif float(r["ts_s"]) <= t0:
            caps.pop(scope, None)  # cleared before the window began
    return caps
