"""InfiniBand tools as events: `ibstat` port blocks, `rdma link` lines, `ibqueryerrors` and `perfquery`
counters, `ibdev2netdev`, `rdma statistic` counters. Port states follow the IBA spec (PortState
Down/Init/Armed/Active; PortPhysicalState Polling: the port is trying to train a link and finds no partner;
Disabled: turned off administratively; LinkUp).

`ibdev2netdev` (Mellanox OFED) prints `mlx5_0 port 1 ==> ib0 (Down)`: the state is the Linux network
interface's, not the IB port's. For an IPoIB interface (`ib*`) Down says only that IPoIB is not configured (a
pure IB fabric runs without it); for an Ethernet/RoCE interface Down is the link being down, or a port not in
use: a `netdev_down` finding, not a flap.

`ibstatus` (infiniband-diags/scripts/ibstatus, a shell script) prints each port's sysfs files
(/sys/class/infiniband/<dev>/ports/<n>/) under `Infiniband device 'mlx5_0' port 1 status:`: `state:` and
`phys state:` as the kernel names them (`4: ACTIVE`, `1: DOWN`, `2: INIT`; `5: LinkUp`, `2: Polling`,
`3: Disabled`, `7: Phy Test`), `rate:`, `link_layer:`, and `unknown` for a file it cannot read. Its facts become
the events ibstat's give for the same facts (`_port_field`), so the same rules judge them."""

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
IBSTATUS_HEAD = re.compile(r"^Infiniband device '(?P<dev>[^']+)' port (?P<port>\d+) status:\s*$")
_IBSTATUS_FIELD = re.compile(
    r"^\s*(?P<key>default gid|base lid|sm lid|state|phys state|rate|link_layer):\s*(?P<value>.*?)\s*$"
)
# ibstatus's keys as ibstat writes them, so that one function makes the events of both
_IBSTATUS_KEYS = {
    "state": "State",
    "phys state": "Physical state",
    "rate": "Rate",
    "link_layer": "Link layer",
}
# The kernel's PortState names (drivers/infiniband/core/sysfs.c, state_show) where ibstat's differ
# (infiniband-diags ibstat.c port_state_str: Down, Initializing, Armed, Active).
_KERNEL_STATES = {"init": "initializing"}


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
            if key == "State":
                state = value.lower()
            yield _port_field(key, value, _port_name(ca, port), state, base)
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


def _port_field(key: str, value: str, comp: str | None, state: str | None, base: dict[str, Any]) -> LogEvent:
    """One field of an ibstat port block (`key` as ibstat writes it): `State` is information, `Physical state`
    the port's `ib_port_state` (with the state read before it), `Rate` an `ib_rate` in Gb/s."""
    if key == "State":
        return LogEvent(kind="ib_info", component=comp, detail={"state": value.lower()}, **base)
    if key == "Physical state":
        detail = {"state": state or "", "physical": value.lower()}
        return LogEvent(kind="ib_port_state", component=comp, detail=detail, **base)
    if key == "Rate":
        rate = re.match(r"\d+", value)
        return LogEvent(kind="ib_rate", component=comp, value=float(rate.group(0)) if rate else None, **base)
    return LogEvent(kind="ib_info", component=comp, detail={key: value}, **base)


def parse_ibstatus(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    """`ibstatus` port blocks, as the events ibstat's reader makes (`_port_field`): `state:  4: ACTIVE` is
    ibstat's `State: Active`, `phys state:  2: Polling` its `Physical state: Polling`. Fields before any header
    (an excerpt) belong to a port the excerpt does not name (no component: the host's NIC)."""
    comp: str | None = None
    state: str | None = None
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        if (m := IBSTATUS_HEAD.match(raw.strip())) is not None:
            comp, state = f"{m.group('dev')}:{m.group('port')}", None
            yield LogEvent(kind="ib_info", component=comp, **base)
            continue
        if (m := _IBSTATUS_FIELD.match(raw)) is None:
            yield None
            continue
        key, value = m.group("key"), m.group("value")
        if key in ("state", "phys state"):
            value = _kernel_state_name(value)
            if key == "state":
                state = value
            elif value == "unknown" and state != "down":
                # no phys_state file (an old kernel): nothing said about the link, as ibv_devinfo without -v
                yield LogEvent(kind="ib_info", component=comp, detail={"physical": value}, **base)
                continue
        yield _port_field(_IBSTATUS_KEYS.get(key, key), value, comp, state, base)


def _kernel_state_name(value: str) -> str:
    """`4: ACTIVE` -> `active`, `2: INIT` -> `initializing`, `7: Phy Test` -> `phytest` (ibstat's PhyTest);
    `unknown` (the file could not be read) stays."""
    name = re.sub(r"^\d+:\s*", "", value).replace(" ", "").lower()
    return _KERNEL_STATES.get(name, name)


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
