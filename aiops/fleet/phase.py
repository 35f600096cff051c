"""Where the fleet's read grid sits inside a scrape step: just after the node agents' scrapes.

The fleet reads one row per series every `step_s` (aiops/fleet/ingest.py), each the newest sample at or before its
grid point. A grid on multiples of the step reads a scrape taken just after a grid point almost a whole step
late: a row stamped up to `step_s` after the scrape it holds, and everything judged from it that much later. The
phase is learned from the agents' own sample times (`aiops_node_info`, one series per agent): the offset, among
those the scrapes land at plus `MARGIN_S` (the scrape answered and stored), whose rows are the freshest on
average. Where every agent is scraped at one phase (vmagent's `scrape_align_interval`; the evals' `promtool`
backfill) that is just after all of them; where scrapes spread over the step (Prometheus offsets each target by a
hash of its labels, vmagent by default at random) no phase does better than another: the mean lag stays half a
step.
`[fleet] phase_s` sets it instead.
"""

from __future__ import annotations

import math

import numpy as np

from aiops.errors import SourceError
from aiops.sources.prometheus import PrometheusClient

MARGIN_S = 1.0  # after a scrape's time: its samples are stored and answered
PROBE = "aiops_node_info"  # one series per node agent, scraped with the rest of its families
RANK_PROBE = "aiops_rank_probed_seconds_total"  # one series per rank: where the rank timing lands in a step
SCRAPE_JITTER_S = 0.1  # a scrape's sample time off its target's offset in the step, at most


def phase_after(stamps_s: list[float], step_s: float, margin_s: float = MARGIN_S) -> float:
    """The offset in [0, step_s) from multiples of `step_s` at which a grid reads the scrapes at `stamps_s`
    (their times) with the least mean lag; 0 without stamps."""
    if not stamps_s:
        return 0.0
    phases = np.mod(np.asarray(stamps_s, dtype=np.float64), step_s)
    candidates = np.unique(np.round(np.mod(phases + margin_s, step_s), 1))
    lag = np.mod(candidates[:, None] - phases[None, :], step_s)  # how old each scrape is at each candidate
    lag = np.where(lag < margin_s - 1e-9, lag + step_s, lag)  # within the margin: not yet readable there
    return float(candidates[int(np.argmin(lag.mean(axis=1)))])


def learned_phase_s(client: PrometheusClient, at_s: float, step_s: float, selector: str = "") -> float | None:
    """The phase read from the agents' newest scrapes before `at_s`; None when none answered (the store down, or
    no agent scraped yet)."""
    stamps = scrape_stamps(client, at_s, step_s, selector)
    return phase_after(stamps, step_s) if stamps else None


def scrape_phases(stamps_s: list[float], step_s: float) -> list[float]:
    """The offsets in [0, step_s) at which the scrapes at `stamps_s` land, each once (to 1 ms)."""
    return sorted({round(float(s) % step_s, 3) % step_s for s in stamps_s})


def rank_phases_s(
    client: PrometheusClient, at_s: float, step_s: float, selector: str = ""
) -> list[float] | None:
    """The offsets in [0, step_s) at which the agents' per-rank timing (`RANK_PROBE`) is scraped: each agent's
    newest rank sample time before `at_s`, one number per agent (none where no agent exports rank timing); None
    when the store did not answer."""
    matchers = ",".join(m for m in (f'__name__="{RANK_PROBE}"', selector) if m)
    query = f"max by (node, instance) (timestamp({{{matchers}}}))"
    try:
        data = client.get("/api/v1/query", {"query": query, "time": f"{at_s:.3f}"})
    except SourceError:
        return None
    stamps: list[float] = []
    for series in (data or {}).get("result") or [] if isinstance(data, dict) else []:
        value = series.get("value") if isinstance(series, dict) else None
        if not isinstance(value, list | tuple) or len(value) < 2:
            continue
        try:
            stamps.append(float(value[1]))
        except (TypeError, ValueError):
            continue
    return scrape_phases(stamps, step_s)


def landed(phases_s: list[float], since_s: float, until_s: float, step_s: float) -> bool:
    """Whether a scrape at one of the offsets `phases_s` falls in (since_s, until_s]: a read over that span can
    hold rows no read before it held. A scrape's time is taken as SCRAPE_JITTER_S either side of its offset: one
    near a grid point is read at that point and, should its sample come a little later, at the next."""

    def crossed(at_s: float) -> bool:
        return math.floor((until_s - at_s) / step_s) > math.floor((since_s - at_s) / step_s)

    return any(crossed(p - SCRAPE_JITTER_S) or crossed(p + SCRAPE_JITTER_S) for p in phases_s)


def scrape_stamps(
    client: PrometheusClient, at_s: float, step_s: float, selector: str = ""
) -> list[float] | None:
    """The time of each agent's newest scrape before `at_s` (`PROBE`'s samples); None when the store did not
    answer."""
    matchers = ",".join(m for m in (f'__name__="{PROBE}"', selector) if m)
    window_s = max(1, int(2 * step_s))
    try:
        data = client.get("/api/v1/query", {"query": f"{{{matchers}}}[{window_s}s]", "time": f"{at_s:.3f}"})
    except SourceError:
        return None
    stamps: list[float] = []
    for series in (data or {}).get("result") or [] if isinstance(data, dict) else []:
        values = series.get("values") if isinstance(series, dict) else None
        if values and isinstance(values[-1], list | tuple) and values[-1]:
            try:
                stamps.append(float(values[-1][0]))
            except (TypeError, ValueError):
                continue
    return stamps


def on_grid(horizon_s: float, phase_s: float, step_s: float) -> float:
    """The read horizon moved onto the grid of `phase_s` (the first of its points at or after it): the scrapes
    up to the old horizon were read, and a point before it would read some of them again (its counters' increases
    twice); a first read after a restart resumes at the newest stored row, already on the grid."""
    return phase_s + math.ceil((horizon_s - phase_s) / step_s - 1e-9) * step_s
