"""An early warning's diagnosis: the labels its trend forecasts, as hypotheses of low confidence (nothing has
failed yet), each with the counter series behind it (aiops/detect/early_watch.py opens the warnings).

The evidence re-runs: the component's counter (or temperature) per 5-minute bucket over the warning's last hour,
and its peers' increase over the same span, straight from the telemetry tables. The labels are the closed
vocabulary's; a warning adds none.
"""

from __future__ import annotations

from typing import Any

from aiops.models import Evidence, Hypothesis, Incident
from aiops.store import Store

CONFIDENCE = (0.35, 0.2)  # the first forecast label, the others: a forecast, never a diagnosis
BUCKET_S = 300.0  # aiops/detect/early.py BUCKET_S (rca does not import detect)
SPAN_S = 3600.0
# per signal: (table, key column, a row's value)
SERIES: dict[str, tuple[str, str, str]] = {
    "ecc_corrected": ("gpu_samples", "gpu", "ecc_sbe_total"),
    "nvlink_errors": ("gpu_samples", "gpu", "nvlink_crc_total + coalesce(nvlink_replay_total, 0)"),
    "pcie_replay": ("gpu_samples", "gpu", "pcie_replay_total"),
    "ib_link_errors": ("ib_port_samples", "nic", "symbol_error + coalesce(link_error_recovery, 0)"),
    "thermal": ("gpu_samples", "gpu", "temp_c"),
}


def _series_sql(signal: str) -> str:
    """The component's value per bucket: its counter's total at the bucket's end, or its mean temperature."""
    table, key, value = SERIES[signal]
    per_bucket = f"round(avg({value}), 2)" if signal == "thermal" else f"max({value})"
    return (
        f"SELECT (floor(ts_s / {BUCKET_S:g}) + 1) * {BUCKET_S:g} AS bucket_end_ts_s, {per_bucket} AS value "
        f"FROM {table} WHERE {key} = ? AND ts_s > ? AND ts_s <= ? GROUP BY 1 ORDER BY 1"
    )


def _peers_sql(signal: str) -> str:
    """Each component of the node over the span: how much its counter grew, or its mean temperature."""
    table, key, value = SERIES[signal]
    change = f"round(avg({value}), 2)" if signal == "thermal" else f"max({value}) - min({value})"
    return (
        f"SELECT {key} AS component, {change} AS change FROM {table} "
        f"WHERE node = ? AND ts_s > ? AND ts_s <= ? AND {key} IS NOT NULL GROUP BY 1 ORDER BY 1"
    )


def forecast_hypotheses(store: Store, incident: Incident) -> list[Hypothesis]:
    """Hypotheses for an early warning's incident (`Incident.is_warning`)."""
    symptom = incident.symptoms[-1]
    detail = symptom.detail
    signal = str(detail.get("signal", ""))
    labels = [str(label) for label in detail.get("forecasts", []) if isinstance(label, str)]
    if signal not in SERIES or not labels:
        return []
    component = symptom.component
    end = incident.last_ts_s
    start = end - SPAN_S
    series_sql = _series_sql(signal)
    series = store.query(series_sql, [component, start, end])
    node = component.split("/")[0]
    peers_sql = _peers_sql(signal)
    peers = store.query(peers_sql, [node, start, end])
    claim = incident.title.removeprefix("Early warning: ")
    evidence = [
        Evidence(claim=claim, sql=series_sql, params=[component, start, end], rows=_last(series)),
        Evidence(
            claim=f"the same over the hour on {node}'s other components (its peers)",
            sql=peers_sql,
            params=[node, start, end],
            rows=_last(peers),
        ),
    ]
    out = []
    for rank, label in enumerate(labels):
        confidence = CONFIDENCE[min(rank, len(CONFIDENCE) - 1)]
        out.append(
            Hypothesis(
                root_cause=label,
                component=component,
                confidence=confidence,
                summary=f"forecast, not a diagnosis: {claim}; {label} may follow",
                evidence=evidence,
            )
        )
    return out


def _last(rows: list[dict[str, Any]], count: int = 12) -> list[dict[str, Any]]:
    return rows[-count:]
