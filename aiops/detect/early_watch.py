"""Early warnings as incidents (docs/DETECTION.md, "Early warnings"): the store read in 5-minute buckets
(aligned to the clock, so a whole-history analysis and the live service cut the same ones), the trends judged by
aiops/detect/early.py, and one warning incident per (signal, component) while its trend holds.

A warning is an incident of the lowest severity (`info`: it never pages by default; [notify.severity]
`page_from`, aiops/service/paging.py) with one `early_warning` symptom carrying its evidence (the counter series
and the rate against the component's own and its peers' rates). Its diagnosis is the label it forecasts, a
hypothesis with low confidence (aiops/rca/forecast.py), and its plan the forecast playbook's `early_warning`
steps (schedule a diagnostic; drain at the next checkpoint). It resolves when its trend has not held for
`FADE_S`, or as soon as the detection rules report any symptom on its component (the fault it forecast, or
something else, has arrived: the analyst's own incident takes over). A component with a symptom of the rules is
not warned about for `HARD_HOLD_S` after it.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiops.detect.early import BUCKET_S, EarlyWarning, TrendWatch
from aiops.detect.kinds import symptom
from aiops.detect.windows import Row, for_the_pass, racks_of_nodes
from aiops.models import Incident, Symptom
from aiops.store import Store

WARNING_SEVERITY = "info"  # the lowest on the ladder (aiops.config_notify.SEVERITIES); pages only if asked
FADE_S = 3600.0
HARD_HOLD_S = 6 * 3600.0

_GPU_BUCKET = """gpu, any_value(node) AS node, max(ecc_sbe_total) AS ecc_corrected,
       max(pcie_replay_total) AS pcie_replay, max(nvlink_crc_total) + coalesce(max(nvlink_replay_total), 0) AS nvlink_errors,
       avg(temp_c) AS temp_c, avg(power_w) AS power_w, max(power_limit_max_w) AS power_max_w"""
GPU_BUCKET_SQL = f"""
SELECT {_GPU_BUCKET}
FROM gpu_samples WHERE ts_s > ? AND ts_s <= ? AND nvml_error IS NULL GROUP BY gpu ORDER BY gpu"""
NIC_BUCKET_SQL = """
SELECT nic, sum(errors) AS ib_link_errors FROM (
  SELECT nic, device, port, max(symbol_error) + coalesce(max(link_error_recovery), 0) AS errors
  FROM ib_port_samples WHERE ts_s > ? AND ts_s <= ? AND nic IS NOT NULL GROUP BY nic, device, port)
GROUP BY nic ORDER BY nic"""
# detect()'s pass: the buckets ending at k * BUCKET_S for k in ($2, $3], each row's bucket k = ceil(ts_s / B) settled
# by the boundaries themselves (as the one-bucket queries' `ts_s > end - B AND ts_s <= end` place it)
_BUCKET_OF = (
    "_k + CAST(ts_s > _k * $1 AS BIGINT) - CAST(ts_s <= (_k - 1) * $1 AS BIGINT) AS _bucket FROM "
    "(SELECT *, CAST(ceil(ts_s / $1) AS BIGINT) AS _k FROM {table} WHERE ts_s > $2 * $1 AND ts_s <= $3 * $1{where})"
)
GPU_BUCKETS_SQL = (
    f"SELECT _bucket, {_GPU_BUCKET} FROM (SELECT *, "
    + _BUCKET_OF.format(table="gpu_samples", where=" AND nvml_error IS NULL")
    + ") GROUP BY _bucket, gpu ORDER BY _bucket, gpu"
)
NIC_BUCKETS_SQL = (
    "SELECT _bucket, nic, sum(errors) AS ib_link_errors FROM (SELECT _bucket, nic, device, port, "
    "max(symbol_error) + coalesce(max(link_error_recovery), 0) AS errors FROM (SELECT *, "
    + _BUCKET_OF.format(table="ib_port_samples", where=" AND nic IS NOT NULL")
    + ") GROUP BY _bucket, nic, device, port) GROUP BY _bucket, nic ORDER BY _bucket, nic"
)
READ_AHEAD_BUCKETS = 288  # a day of buckets read at once in detect()'s pass


@dataclass
class _Open:
    incident: Incident
    held_ts_s: float  # the end of the last bucket its trend held in


class EarlyWatch:
    """Feed it every detection window (`process`); it judges each bucket once the window passes its end."""

    def __init__(self, store: Store | None, new_id: Callable[[], str]) -> None:
        """`store`: where `process` reads the buckets (None: the caller hands them to `judge`)."""
        self.store = store
        self.new_id = new_id
        self.trends = TrendWatch()
        self.next_end_ts_s: float | None = None
        self.open: dict[tuple[str, str], _Open] = {}
        self.hard_ts_s: dict[str, float] = {}  # component -> its newest symptom of the detection rules
        self.rack_of: dict[str, str] = {}

    def process(self, t0: float, t1: float, symptoms: Iterable[Symptom] = ()) -> list[Incident]:
        """The window (t0, t1] with the rules' symptoms in it; the warning incidents that changed."""
        changed: dict[str, Incident] = {}
        for s in symptoms:
            for incident in self.hard(s.component, s.ts_s):
                changed[incident.incident_id] = incident
        if self.next_end_ts_s is None:
            self.next_end_ts_s = (math.floor(t0 / BUCKET_S) + 1) * BUCKET_S
        while self.next_end_ts_s <= t1 + 1e-9 and self.store is not None:
            end_ts_s = self.next_end_ts_s
            gpus, nics = self._bucket(self.store, end_ts_s)
            if not self.rack_of and gpus:
                self.rack_of = racks_of_nodes(self.store)
            for incident in self.judge(end_ts_s, gpus, nics):
                changed[incident.incident_id] = incident
            self.next_end_ts_s += BUCKET_S
        return list(changed.values())

    @staticmethod
    def _bucket(store: Store, end_ts_s: float) -> tuple[list[Row], list[Row]]:
        """The GPU and NIC rows of the bucket ending at `end_ts_s`: asked of the store, or in detect()'s pass read
        READ_AHEAD_BUCKETS buckets at a time (the same rows: nothing writes the store while it runs)."""
        held: dict[int, tuple[list[Row], list[Row]]] | None = for_the_pass(store, "early buckets", dict)
        if held is None:
            bounds = [end_ts_s - BUCKET_S, end_ts_s]
            return store.query(GPU_BUCKET_SQL, bounds), store.query(NIC_BUCKET_SQL, bounds)
        k = round(end_ts_s / BUCKET_S)
        if k not in held:  # the next READ_AHEAD_BUCKETS buckets from this one
            held.clear()
            last = k + READ_AHEAD_BUCKETS - 1
            held.update({i: ([], []) for i in range(k, last + 1)})
            params = [BUCKET_S, k - 1, last]
            for at, sql in ((0, GPU_BUCKETS_SQL), (1, NIC_BUCKETS_SQL)):
                for row in store.query(sql, params):
                    held[int(row.pop("_bucket"))][at].append(row)
        return held.pop(k)

    def hard(self, component: str, ts_s: float) -> list[Incident]:
        """The rules reported a symptom on `component` at `ts_s`: what it warned of (or another fault) is here, the
        analyst's incident takes over; its open warnings resolve, and none opens on it for `HARD_HOLD_S`."""
        self.hard_ts_s[component] = max(self.hard_ts_s.get(component, ts_s), ts_s)
        done: list[Incident] = []
        for key, entry in list(self.open.items()):
            if key[1] == component:
                del self.open[key]
                done.append(entry.incident.model_copy(update={"resolved_ts_s": ts_s, "last_ts_s": ts_s}))
        return done

    def resume(self, incident: Incident) -> None:
        """Carry on a warning that was open when the service stopped (it fades unless its trend comes back)."""
        signal = incident.symptoms[-1].detail.get("signal") if incident.symptoms else None
        if isinstance(signal, str):
            self.open[(signal, incident.symptoms[-1].component)] = _Open(incident, incident.last_ts_s)

    def warm_from(self, replayed: EarlyWatch) -> None:
        """Take the bucket history (and the rules' recent symptoms) of a replay of windows judged before."""
        self.trends = replayed.trends
        self.next_end_ts_s = replayed.next_end_ts_s
        self.hard_ts_s.update(replayed.hard_ts_s)
        self.rack_of = replayed.rack_of

    def open_incidents(self) -> list[Incident]:
        return [entry.incident for entry in self.open.values()]

    # -- one bucket ---------------------------------------------------------------------------------------
    def judge(
        self, end_ts_s: float, gpus: Sequence[Mapping[str, Any]], nics: Sequence[Mapping[str, Any]]
    ) -> list[Incident]:
        """One bucket ending at `end_ts_s`: rows as `GPU_BUCKET_SQL` and `NIC_BUCKET_SQL` return them (the bench
        builds them from the twin directly); the warning incidents that changed."""
        found: list[EarlyWarning] = []
        for signal in ("ecc_corrected", "nvlink_errors", "pcie_replay"):
            totals = {str(r["gpu"]): float(r[signal]) for r in gpus if r[signal] is not None}
            found += self.trends.counters(signal, end_ts_s, totals)
        ib = {str(r["nic"]): float(r["ib_link_errors"]) for r in nics if r["ib_link_errors"] is not None}
        found += self.trends.counters("ib_link_errors", end_ts_s, ib)
        readings = {
            str(r["gpu"]): (
                float(r["temp_c"]),
                float(r["power_w"]),
                self.rack_of.get(str(r["node"]), str(r["node"])),
            )
            for r in gpus
            if r["temp_c"] is not None and r["power_w"] is not None
        }
        found += self.trends.temperatures(end_ts_s, readings)
        return self._lifecycle(end_ts_s, found)

    def _lifecycle(self, end_ts_s: float, found: Sequence[EarlyWarning]) -> list[Incident]:
        changed: list[Incident] = []
        held: set[tuple[str, str]] = set()
        for warning in found:
            key = (warning.signal, warning.component)
            hard = self.hard_ts_s.get(warning.component)
            if hard is not None and end_ts_s - hard < HARD_HOLD_S:
                continue
            held.add(key)
            entry = self.open.get(key)
            if entry is None:
                incident = warning_incident(self.new_id(), warning)
            else:
                incident = entry.incident.model_copy(
                    update={"last_ts_s": end_ts_s, "symptoms": [warning_symptom(warning)]}
                )
            self.open[key] = _Open(incident, end_ts_s)
            changed.append(incident)
        for key, entry in list(self.open.items()):
            if key not in held and end_ts_s - entry.held_ts_s >= FADE_S:
                del self.open[key]
                changed.append(entry.incident.model_copy(update={"resolved_ts_s": end_ts_s}))
        return changed


def warning_symptom(warning: EarlyWarning) -> Symptom:
    return symptom("early_warning", warning.component, warning.ts_s, **warning.detail())


def warning_incident(incident_id: str, warning: EarlyWarning) -> Incident:
    forecast = " or ".join(warning.forecasts)
    return Incident(
        incident_id=incident_id,
        opened_ts_s=warning.ts_s,
        last_ts_s=warning.ts_s,
        title=f"Early warning: {warning.describe()}; forecasts {forecast}",
        severity=WARNING_SEVERITY,
        components=[warning.component],
        symptoms=[warning_symptom(warning)],
        impact=f"early warning: nothing has failed yet ({forecast} forecast)",
    )
