"""InfiniBand tools as events: `ibstat` port blocks, `rdma link` lines, `ibqueryerrors` and `perfquery`
counters, `ibdev2netdev`, `rdma statistic` counters. Port states follow the IBA spec (PortState
Down/Init/Armed/Active; PortPhysicalState Polling: the port is trying to train a link and finds no partner;
Disabled: turned off administratively; LinkUp).

`ibdev2netdev` (Mellanox OFED) prints `mlx5_0 port 1 ==> ib0 (Down)`: the state is the Linux network
interface's, not the IB port's. For an IPoIB interface (`ib*`) Down says only that IPoIB is not configured (a
pure IB fabric runs without it); for an Ethernet/RoCE interface Down is the link being down, or a port not in
use: a `netdev_down` finding, not a flap."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence import generic
from aiops.evidence.events import LogEvent

_CA = re.compile(r"^CA '(?P<ca>[^']+)'")
_PORT = re.compile(r"^\s*Port (?P<port>\d+):\s*$")
_FIELD = re.compile(r"^\s*(?P<key>State|Physical state|Rate|Link layer):(?P<value>.+)$")
_RDMA_LINK = re.compile(
    r"^link (?P<dev>\S+)/(?P<port>\d+) .*?\bstate (?P<state>\w+) physical_state (?P<phys>\w+)"
)
_COUNTER = re.compile(
    r"\[?(?P<name>[A-Z][A-Za-z]{1,40}?(?:Counter|Errors|Discards|Wait))\s*(?:==|:\.*|:)\s*(?P<value>\d+)\]?"
)
_IBQ_HEAD = re.compile(r"GUID (?P<guid>0x[0-9a-fA-F]+) port (?P<port>\d+):")
_NETDEV = re.compile(r"^(?P<dev>\S+)\s+port\s+(?P<port>\d+)\s+==>\s+(?P<net>\S+)\s+\((?P<state>Up|Down)\)")
_RDMA_STAT = re.compile(r"^link (?P<dev>\S+)/(?P<port>\d+) ")


def parse(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    ca: str | None = None
    port: str | None = None
    state: str | None = None
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        if (m := _RDMA_LINK.match(raw)) is not None:
            yield LogEvent(
                kind="ib_port_state",
                component=f"{m.group('dev')}:{m.group('port')}",
                detail={"state": m.group("state").lower(), "physical": m.group("phys").lower()},
                **base,
            )
            continue
        if (m := _NETDEV.match(raw)) is not None:
            yield _netdev(m, base)
            continue
        if (m := _RDMA_STAT.match(raw)) is not None and (found := generic.counters(raw[m.end() :])):
            comp = f"{m.group('dev')}:{m.group('port')}"
            yield generic.counter_event(found[0][0], found[0][1], {**base, "component": comp})
            continue
        if (m := _CA.match(raw)) is not None:
            ca, port, state = m.group("ca"), None, None
            yield LogEvent(kind="ib_info", component=ca, **base)
            continue
        if (m := _PORT.match(raw)) is not None:
            port, state = m.group("port"), None
            yield LogEvent(kind="ib_info", component=f"{ca}:{port}", **base)
            continue
        if (m := _FIELD.match(raw)) is not None and (ca is not None or port is not None):
            key, value = m.group("key"), m.group("value").strip()
            comp = _port_name(ca, port)
            if key == "State":
                state = value.lower()
                yield LogEvent(kind="ib_info", component=comp, detail={"state": state}, **base)
            elif key == "Physical state":
                yield LogEvent(
                    kind="ib_port_state",
                    component=comp,
                    detail={"state": state or "", "physical": value.lower()},
                    **base,
                )
            elif key == "Rate":
                rate = re.match(r"\d+", value)
                yield LogEvent(
                    kind="ib_rate", component=comp, value=float(rate.group(0)) if rate else None, **base
                )
            else:
                yield LogEvent(kind="ib_info", component=comp, detail={key: value}, **base)
            continue
        counters = list(_COUNTER.finditer(raw))
        if counters:
            head = _IBQ_HEAD.search(raw)
            where = f"{head.group('guid')}:{head.group('port')}" if head else (f"{ca}:{port}" if ca else None)
            for c in counters[:1]:
                yield LogEvent(
                    kind="ib_counter",
                    component=where,
                    value=float(c.group("value")),
                    detail={c.group("name"): c.group("value") for c in counters},
                    **base,
                )
            continue
        if raw.startswith(("\t", " ")) and ":" in raw and ca is not None:
            yield LogEvent(kind="ib_info", component=ca, **base)
            continue
        yield None


def _port_name(ca: str | None, port: str | None) -> str:
    """`mlx5_0:1` (or the CA alone before its first port); a port block pasted without its `CA '...'` line (a
    post's excerpt) is `port 1` of a CA the excerpt does not name: its state is still the port's. One of the
    two is known."""
    if ca is None:
        return f"port {port}"
    return f"{ca}:{port}" if port else ca


def _netdev(m: re.Match[str], base: dict[str, Any]) -> LogEvent:
    net, state = m.group("net"), m.group("state").lower()
    comp = f"{m.group('dev')}:{m.group('port')}"
    detail = {"netdev": net, "state": state}
    if state == "down" and not net.startswith("ib"):
        return LogEvent(kind="netdev_down", component=comp, detail=detail, **base)
    return LogEvent(kind="ib_info", component=comp, detail=detail, **base)
