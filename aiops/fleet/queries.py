"""The PromQL the fleet reads the node agents' families with (aiops/fleet/ingest.py), and how a read asks few
requests: a steady read of a cluster small enough asks several families in one range query.

Each family is asked as `last_over_time(name[window])` (`family_queries`): the function drops the metric's name,
so two families cannot share a plain selector. A group (`plan`) is the union (`or`) of its families' own queries,
each tagged first with a label naming its family (`label_replace`, label `TAG`): the server evaluates every
family's query exactly as it would alone, the tags keep their series apart (`or` adds a series whose labels no
earlier one has: every family's carry a tag of their own), and `split` gives each family its series back. A
group's query is at most `GROUP_URL_CHARS` long once URL-encoded (a reverse proxy in front of the store may refuse
a request line over 8 KB, nginx's default; VictoriaMetrics refuses a query over 16 KB) and is used only
where the read's series are known to be few (`GROUP_SERIES`: its answers stay a few MB); a first read, or a
cluster larger than that, asks each family alone.
"""

from __future__ import annotations

import functools
import math
import urllib.parse
from collections.abc import Mapping, Sequence
from typing import Any

from aiops.fleet import families

TAG = (
    "aiops_fleet_family"  # the label a group's query tags each family's series with (its index in the group)
)
GROUP_SERIES = 20_000  # a read of at most this many series (the last read's) asks its families in groups
GROUP_URL_CHARS = 3_500  # a group's query at most this long URL-encoded (the request line stays under 4 KB)


def window(step_s: float) -> str:
    # one step less a millisecond: a range selector includes both ends on Prometheus 2.x
    return f"{max(1, math.ceil(step_s * 1000) - 1)}ms"


def family_queries(name: str, step_s: float, selector: str) -> list[str]:
    """The queries that read family `name`. A series the pivots read only when positive (a 0/1 gauge; a
    throttle reason's sample counter, whose increase counts only when above 0: one still at 0 adds nothing, and
    one that leaves 0 inside the interval counts from zero as a series born there) is asked with `> 0`, so the
    GPUs' idle reasons, most of the series, are not fetched at all."""

    def one(*extra: str, positive: bool = False) -> str:
        matchers = ",".join(m for m in (f'__name__="{name}"', *extra, selector) if m)
        return f"last_over_time({{{matchers}}}[{window(step_s)}])" + (" > 0" if positive else "")

    if name in families.POSITIVE_GAUGES:
        return [one(positive=True)]
    if name == families.REASON_SAMPLES:  # GpuIdle's counts are read at 0 too: the idle rule's numerator
        return [
            one(f'reason="{families.IDLE_REASON}"'),
            one(f'reason!="{families.IDLE_REASON}"', positive=True),
        ]
    return [one()]


def plan(
    names: Sequence[str], step_s: float, selector: str, grouped: bool
) -> list[tuple[tuple[str, ...], str]]:
    """(the families a request reads, its query), in the order of `names`: each family's own queries, or with
    `grouped` as few unions of them as `GROUP_URL_CHARS` allows. The same for every read of a running fleet (its
    families, step and selector do not change): made once (a steady read asked it again every piece, ~6 ms of
    URL-quoting each)."""
    return list(_plan(tuple(names), step_s, selector, grouped, GROUP_URL_CHARS))


@functools.lru_cache(maxsize=32)
def _plan(
    names: tuple[str, ...], step_s: float, selector: str, grouped: bool, most_chars: int
) -> tuple[tuple[tuple[str, ...], str], ...]:
    if not grouped:
        return tuple(((name,), query) for name in names for query in family_queries(name, step_s, selector))
    out: list[tuple[tuple[str, ...], str]] = []
    members: list[str] = []
    terms: list[str] = []
    encoded = 0  # the URL-encoded length of " or ".join(terms): each character is encoded on its own
    for name in names:
        queries = family_queries(name, step_s, selector)
        mine = [f'label_replace({q}, "{TAG}", "{len(members)}", "", "")' for q in queries]
        if terms and encoded + sum(_OR + _encoded(t) for t in mine) > most_chars:
            out.append((tuple(members), " or ".join(terms)))
            members, terms, encoded = [], [], 0
            mine = [f'label_replace({q}, "{TAG}", "0", "", "")' for q in queries]
        members.append(name)
        encoded += sum(_OR + _encoded(t) for t in mine) - (0 if terms else _OR)
        terms.extend(mine)
    if terms:
        out.append((tuple(members), " or ".join(terms)))
    return tuple(out)


_OR = len(urllib.parse.quote_plus(" or "))  # the separator's encoded length


def _encoded(text: str) -> int:
    return len(urllib.parse.quote_plus(text))


def split(names: tuple[str, ...], result: list[Mapping[str, Any]]) -> list[list[Mapping[str, Any]]]:
    """A group's answer as each family's series, in the order of `names` (a series' tag is its family's index;
    one without a valid tag is no answer to this query and is left out)."""
    if len(names) == 1:
        return [result]
    parts: list[list[Mapping[str, Any]]] = [[] for _ in names]
    for series in result:
        metric = series.get("metric") if isinstance(series, Mapping) else None
        tag = metric.get(TAG) if isinstance(metric, Mapping) else None
        if isinstance(tag, str) and tag.isdigit() and int(tag) < len(names):
            parts[int(tag)].append(series)
    return parts
