"""Network adapters as events: `ethtool -S` counters and `ibv_devinfo` ports.

`ethtool -S <if>` prints "NIC statistics:" and one `name: value` line per counter (names are the driver's:
mlx5 `rx_crc_errors_phy`, `link_down_events_phy`, `rx_discards_phy`; be2net `rx_crc_errors`, ...). A counter
whose name says error, drop, discard, CRC, timeout or link-down and whose value is above 0 is an
`nic_error_counter`; the others are counted only.

`ibv_devinfo` prints `hca_id: mlx5_0`, then per port `port:   1`, `state:  PORT_ACTIVE (4)`, and with -v
`phys_state: LINK_UP (5)` and the port's GID table (`GID[  3]:  ::ffff:10.0.0.6, RoCE v2`, rdma-core
libibverbs/examples/devinfo.c); states follow the IBA PortState / PortPhysicalState names (as ibstat's). An
excerpt that starts below the `hca_id:` (or `port:`) line, as operators quote a port's lines, is read as the same
port of an unnamed HCA: its states and GIDs are the port's all the same."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from typing import Any

from aiops.evidence.events import LogEvent

_NIC_STATS = re.compile(r"^(?:NIC statistics|Statistics for \S+):\s*$")
_COUNTER = re.compile(
    r"^\s+(?:\[\d{1,4}\]: )?(?P<name>[\w.\[\]-]{1,80}(?:: [\w.-]{1,80})?): (?P<value>\d{1,20})\s*$"
)
ERROR_NAME = re.compile(r"err|drop|discard|crc|timeout|link_down|lost|fail|symbol|fcs|abort", re.IGNORECASE)
_HCA = re.compile(r"^hca_id:\s*(?P<hca>\S+)")
_PORT = re.compile(r"^\s+port:\s*(?P<port>\d+)\s*$")
_STATE = re.compile(r"^\s+(?P<key>state|phys_state):\s+(?P<value>[A-Z_]+)(?: \(\d+\))?\s*$")
# devinfo.c prints each GID as `GID[%3d]:\t\t<gid>` and, where the kernel names it, `, <type>` (IB/RoCE v1, RoCE v2)
GID_LINE = re.compile(
    r"^\s+GID\[\s*(?P<index>\d{1,4})\]:\s+(?P<gid>[0-9a-fA-F:.]{2,45})(?:,\s*(?P<type>[\w ./]{1,20}?))?\s*$"
)
MAX_HELD = 256
_FIELD = re.compile(r"^\s+[a-z_]{2,40}:\s+\S")
# ibv_devinfo's names as ibstat's (lower case), which the rules read: PORT_DOWN -> down, POLLING -> polling.
_STATE_NAMES = {
    "PORT_ACTIVE": "active",
    "PORT_DOWN": "down",
    "PORT_INIT": "initializing",
    "PORT_ARMED": "armed",
}
_PHYS_NAMES = {"LINK_UP": "linkup", "POLLING": "polling", "DISABLED": "disabled", "SLEEP": "sleep"}
# Port states (IBA PortState) in which the port carries no traffic: down, or its link up but not yet made
# active by the subnet manager (Initialize: no SM sweep reached it; Armed: configured, not yet activated).
NOT_UP_STATES = frozenset({"down", "initializing", "armed"})


def parse_ethtool(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        if _NIC_STATS.match(raw):
            yield LogEvent(kind="nic_info", **base)
            continue
        m = _COUNTER.match(raw)
        if m is None:
            yield None
            continue
        name, value = m.group("name"), int(m.group("value"))
        kind = "nic_error_counter" if value > 0 and ERROR_NAME.search(name) else "nic_counter"
        yield LogEvent(kind=kind, value=float(value), detail={"counter": name}, **base)


def parse_ibv_devinfo(source: str, numbered: Iterable[tuple[int, str]]) -> Iterator[LogEvent | None]:
    """A port's lines are held until the port ends (at most MAX_HELD): a state other than `PORT_ACTIVE`
    (`PORT_DOWN`, `PORT_INIT`, `PORT_ARMED`: the subnet manager has not brought the port up) is an
    `ib_port_state` of unknown physical state only when no `phys_state` line (ibv_devinfo -v) follows."""
    hca: str | None = None
    port: str | None = None
    state = ""
    held: list[LogEvent | None] = []
    down_at = -1  # index in `held` of the port's state line when the state is not active

    def flush() -> Iterator[LogEvent | None]:
        nonlocal down_at
        if down_at >= 0 and (event := held[down_at]) is not None:
            detail = {"state": event.detail.get("state", "down"), "physical": "unknown"}
            held[down_at] = LogEvent(**{**event.__dict__, "kind": "ib_port_state", "detail": detail})
        yield from held
        held.clear()
        down_at = -1

    for number, raw in numbered:
        base: dict[str, Any] = {"source": source, "line": number, "raw": raw}
        # a port's component: `mlx5_0:1`, or what an excerpt without the headers names of it (None: nothing)
        comp = ":".join(part for part in (hca, port) if part) or None
        if (m := _HCA.match(raw)) is not None or (m := _PORT.match(raw)) is not None:
            yield from flush()
            if "hca" in m.groupdict():
                hca, port, state = m.group("hca"), None, ""
                held.append(LogEvent(kind="ib_info", component=hca, **base))
            else:
                port, state = m.group("port"), ""
                comp = ":".join(part for part in (hca, port) if part)
                held.append(LogEvent(kind="ib_info", component=comp, **base))
        elif (m := _STATE.match(raw)) is not None:
            value = m.group("value")
            if m.group("key") == "state":
                state = _STATE_NAMES.get(value, value.lower())
                if state in NOT_UP_STATES:
                    down_at = len(held)
                held.append(LogEvent(kind="ib_info", component=comp, detail={"state": state}, **base))
            else:
                down_at = -1  # the physical state is known: this line carries the port's state
                detail = {"state": state, "physical": _PHYS_NAMES.get(value, value.lower())}
                held.append(LogEvent(kind="ib_port_state", component=comp, detail=detail, **base))
        elif (m := GID_LINE.match(raw)) is not None:
            detail = {"gid_index": m.group("index"), "gid": m.group("gid"), "gid_type": m.group("type") or ""}
            held.append(LogEvent(kind="ib_info", component=comp, detail=detail, **base))
        elif _FIELD.match(raw):
            held.append(LogEvent(kind="ib_info", component=hca or comp, **base))
        else:
            held.append(None)
        if len(held) >= MAX_HELD:
            yield from flush()
    yield from flush()
