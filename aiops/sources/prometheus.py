"""A Prometheus HTTP API client (also VictoriaMetrics, which serves the same API) and the fetch of the series
the analyst reads into a workspace. Through aiops/outbound.py (one total deadline per answer, `MAX_BODY_BYTES`,
redirects only within the URL's origin, with the bearer token); every failure is a `SourceError` naming the URL,
the HTTP status and the answer's body (escaped, cut to 300 characters).

`query_range` is asked in chunks of at most `MAX_POINTS` points per series (Prometheus refuses more than
11,000) and about `SAMPLES_PER_REQUEST` samples in all (the first chunk sized by the series count of the metric before, then by its own), each chunk
staged into the store as it arrives, so memory holds one chunk's answer at a time; an answer over
`MAX_BODY_BYTES` is refused.
"""

from __future__ import annotations

import gc
import itertools
import json
import math
import statistics
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from aiops import outbound
from aiops.errors import OutboundError, SourceError
from aiops.sources.mapping import HostIdentity, Staging
from aiops.sources.names import DCGM_FIELDS, NETDEV_SERIES, XID
from aiops.store import Store

MAX_POINTS = 11_000  # Prometheus refuses a query_range of more points per series
SAMPLES_PER_REQUEST = 100_000  # series x points asked at once: one answer is ~2.5-4 MB of JSON, ~20 MB parsed
FIRST_CHUNK_POINTS = 100  # before the number of series is known (no hint)
MAX_BODY_BYTES = 64 * 1024 * 1024
PROBE_METRIC = "DCGM_FI_DEV_GPU_TEMP"


def escaped(body: bytes | bytearray, limit: int = 300) -> str:
    """An answer's body as one printable line (hostile data: never echoed raw to a terminal)."""
    return outbound.excerpt(body, limit=limit)


origin = outbound.origin  # (scheme, host, port): what the bearer token is bound to


@dataclass
class PrometheusClient:
    url: str
    token: str | None = None
    timeout_s: float = 30.0
    bytes_fetched: int = 0
    requests: int = 0

    def get(self, path: str, params: Mapping[str, str]) -> Any:
        """GET `path` with `params`; the answer's `data`, or a SourceError. A redirect is followed only within
        the URL's origin (a proxy's path redirect), with the token; one elsewhere is an error, never a request."""
        url = f"{self.url.rstrip('/')}{path}?{urllib.parse.urlencode(params)}"
        headers = {"Accept": "application/json"}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        self.requests += 1
        try:
            reply = outbound.get(
                url,
                headers=headers,
                timeout_s=self.timeout_s,  # the whole answer, not each read
                max_bytes=MAX_BODY_BYTES,
                redirects="same-origin",
            )
        except OutboundError as exc:
            reason = exc.reason
            if "larger than" in reason:
                reason += ": ask a shorter range or fewer series (--selector)"
            raise SourceError(self.url + path, exc.status, reason) from None
        if not reply.ok:
            raise SourceError(self.url + path, reply.status, reply.excerpt())
        self.bytes_fetched += len(reply.body)
        try:
            answer = decoded(reply.body)
        except (ValueError, RecursionError):  # RecursionError: JSON nested deeper than the parser goes
            raise SourceError(self.url + path, reply.status, "not JSON: " + reply.excerpt()) from None
        if not isinstance(answer, dict) or answer.get("status") != "success":
            raise SourceError(self.url + path, reply.status, reply.excerpt())
        return answer.get("data")

    def query_range(
        self, query: str, start_s: float, end_s: float, step_s: float, *, series_hint: int = 0
    ) -> Iterator[list[Any]]:
        """The matrix of `query` over [start_s, end_s], chunk by chunk: consecutive, never overlapping, each at
        most MAX_POINTS steps and about SAMPLES_PER_REQUEST samples (`series_hint`: how many series to expect
        before the first answer says; the last metric's count, as every DCGM field has one series per GPU)."""
        points = _points(series_hint) if series_hint else FIRST_CHUNK_POINTS
        chunk_start_s = start_s
        while chunk_start_s <= end_s:
            chunk_end_s = min(end_s, chunk_start_s + step_s * (points - 1))
            data = self.get(
                "/api/v1/query_range",
                {"query": query, "start": _ts(chunk_start_s), "end": _ts(chunk_end_s), "step": _ts(step_s)},
            )
            if not isinstance(data, dict) or data.get("resultType") != "matrix":
                raise SourceError(self.url, 200, f"query_range of {query} did not answer a matrix")
            result = list(data.get("result") or [])
            series = len(result)
            del data  # the caller holds the answer (result) while it stages it
            yield result
            del result  # not kept alive while the next answer is read: memory holds one answer at a time
            points = _points(series)
            chunk_start_s = chunk_end_s + step_s

    def scrape_interval_s(self, at_s: float, window_s: float = 300.0, selector: str = "") -> float | None:
        """The spacing of the raw samples of one GPU temperature series before `at_s` (the scrape interval), of
        the series `selector` (label matchers) picks: not another cluster's in a shared server."""
        series = PROBE_METRIC + (f"{{{selector}}}" if selector else "")
        data = self.get("/api/v1/query", {"query": f"{series}[{int(window_s)}s]", "time": _ts(at_s)})
        for series in (data or {}).get("result") or []:
            stamps = [float(v[0]) for v in series.get("values") or []]
            gaps = [b - a for a, b in itertools.pairwise(stamps) if b > a]
            if gaps:
                return float(statistics.median(gaps))
        return None


def decoded(body: bytes | bytearray) -> Any:
    """An answer's JSON (ValueError or RecursionError where it is none), parsed with the cyclic garbage collector
    held off: a query_range answer is three or four new objects a sample, none in a cycle (all freed by their
    counts when the answer is dropped), and every 700 allocations would start a collection that walks the
    process's tracked objects again (measured: 0.28 -> 0.08 CPU-s to parse 11 MB of answers in the analyst's
    process)."""
    paused = gc.isenabled()
    gc.disable()
    try:
        return json.loads(body)
    finally:
        if paused:
            gc.enable()


def decoded_matrix(body: bytes | bytearray) -> list[Any]:
    """The `result` of a query_range answer's body, as `query_range` yields it (tests feed answers' bytes
    through it to the staging)."""
    data = decoded(body).get("data")
    return list(data.get("result") or [])


def _points(series: int) -> int:
    return max(1, min(MAX_POINTS, SAMPLES_PER_REQUEST // max(1, series)))


def _ts(value_s: float) -> str:
    return f"{value_s:.3f}".rstrip("0").rstrip(".")


@dataclass
class FetchReport:
    url: str
    start_s: float
    end_s: float
    step_s: float
    samples: int = 0
    rows: dict[str, int] = field(default_factory=dict)
    bytes_fetched: int = 0
    requests: int = 0


def series_names() -> list[str]:
    """Every metric read: the DCGM fields, the XID gauge, node_exporter's netdev series."""
    names = list(dict.fromkeys(f.name for f in DCGM_FIELDS))
    return [*names, XID, *(s.name for s in NETDEV_SERIES)]


def fetch_into(
    store: Store,
    client: PrometheusClient,
    *,
    start_s: float,
    end_s: float,
    step_s: float | None = None,
    hosts: Mapping[str, HostIdentity] | None = None,
    selector: str = "",
) -> FetchReport:
    """Read every series the analyst uses over [start_s, end_s] into `store` (new, empty); `selector` adds
    label matchers (`job="dcgm"`) to every query. The step is the scrape interval unless given."""
    if end_s <= start_s:
        raise SourceError(client.url, None, f"empty range: start {start_s:g} is not before end {end_s:g}")
    step = step_s or client.scrape_interval_s(end_s, selector=selector) or 15.0
    step = max(step, (end_s - start_s) / (MAX_POINTS * 1000))  # at most 1,000 full chunks a series
    start = math.floor(start_s / step) * step
    report = FetchReport(client.url, start, end_s, step)
    staging = Staging(store)
    series_hint = 0
    for name in series_names():
        matchers = ",".join(m for m in (f'__name__="{name}"', selector) if m)
        for result in client.query_range("{" + matchers + "}", start, end_s, step, series_hint=series_hint):
            report.samples += staging.add(name, result)
            series_hint = max(series_hint, len(result))
            del result  # dropped before the next answer is read
    if not report.samples:
        raise SourceError(
            client.url,
            200,
            f"no dcgm-exporter or node_exporter series between {_ts(start)} and "
            f"{_ts(end_s)} (looked for {', '.join(series_names()[:3])}, ...)",
        )
    report.rows = staging.finish(hosts or {})
    report.bytes_fetched = client.bytes_fetched
    report.requests = client.requests
    return report
