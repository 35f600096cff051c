"""Thin wrapper over the `tc` command for the lanes' HTB tree and cls_bpf filter.

Commands run in the NIC's network namespace through `nsenter --net` (not `ip netns exec`, which remounts
/sys and would hide /sys/fs/bpf, where the classifier is pinned). Class minors are hex to tc
(`1:10` is minor 0x10): the helpers here take and return integers and format them.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from aiops.errors import PrerequisiteError, TcError

HTB_MAJOR = 1
ROOT_MINOR = 1
LANE_MINORS: dict[str, int] = {"vip": 0x10, "standard": 0x20, "bulk": 0x30}
FILTER_PRIO = 1
FILTER_HANDLE = 1
TC_TIMEOUT_S = 10.0


def classid(minor: int, major: int = HTB_MAJOR) -> int:
    return (major << 16) | minor


def classid_text(minor: int, major: int = HTB_MAJOR) -> str:
    return f"{major:x}:{minor:x}"


def ns_prefix(netns: str | None) -> list[str]:
    return ["nsenter", f"--net=/run/netns/{netns}"] if netns else []


def run_tc(args: Sequence[str], netns: str | None = None, *, check: bool = True) -> str:
    argv = [*ns_prefix(netns), "tc", *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=TC_TIMEOUT_S, check=False)
    except FileNotFoundError as exc:
        raise PrerequisiteError(
            f"{argv[0]} not found: install iproute2 (tc) and util-linux (nsenter)"
        ) from exc
    if check and done.returncode != 0:
        raise TcError(argv, done.stderr)
    return done.stdout


def show_json(what: str, dev: str, netns: str | None = None, *, stats: bool = False) -> list[dict[str, Any]]:
    """`tc -j [-s] {qdisc|class|filter} show dev DEV` as parsed JSON (filters: egress/root only)."""
    args = ["-j", *(["-s"] if stats else []), what, "show", "dev", dev]
    text = run_tc(args, netns)
    if not text.strip():
        return []
    rows: list[dict[str, Any]] = json.loads(text)
    return rows


def root_qdisc(dev: str, netns: str | None = None) -> dict[str, Any] | None:
    for row in show_json("qdisc", dev, netns):
        if row.get("root"):
            return row
    return None


def is_default_root(row: dict[str, Any] | None) -> bool:
    """The kernel's own root qdisc (handle 0:, e.g. noqueue, pfifo_fast, mq): nothing a person set up."""
    return row is None or str(row.get("handle", "0:")) == "0:"


@dataclass(frozen=True)
class HtbClass:
    minor: int
    rate_mbps: float
    ceil_mbps: float
    prio: int
    parent_minor: int = ROOT_MINOR


def _rate(mbps: float) -> str:
    return f"{max(int(mbps * 1000), 8)}kbit"


def _class_args(op: str, dev: str, cls: HtbClass) -> list[str]:
    # quantum matters only between classes of one prio; a fixed MTU multiple avoids HTB's r2q warnings
    return [
        "class",
        op,
        "dev",
        dev,
        "parent",
        classid_text(cls.parent_minor),
        "classid",
        classid_text(cls.minor),
        "htb",
        "rate",
        _rate(cls.rate_mbps),
        "ceil",
        _rate(cls.ceil_mbps),
        "prio",
        str(cls.prio),
        "quantum",
        "6056",
    ]


def add_htb_root(dev: str, link_mbps: float, default_minor: int, netns: str | None = None) -> None:
    run_tc(
        [
            "qdisc",
            "add",
            "dev",
            dev,
            "root",
            "handle",
            f"{HTB_MAJOR:x}:",
            "htb",
            "default",
            f"{default_minor:x}",
        ],
        netns,
    )
    root = HtbClass(ROOT_MINOR, link_mbps, link_mbps, 0, parent_minor=0)
    args = _class_args("add", dev, root)
    args[args.index("parent") + 1] = f"{HTB_MAJOR:x}:"
    run_tc(args, netns)


def add_class(dev: str, cls: HtbClass, netns: str | None = None) -> None:
    run_tc(_class_args("add", dev, cls), netns)


def change_class(dev: str, cls: HtbClass, netns: str | None = None) -> None:
    """Live rate change (`tc class change`): queued packets stay, no reload."""
    run_tc(_class_args("change", dev, cls), netns)


def add_bpf_filter(dev: str, pinned_prog: str, netns: str | None = None) -> None:
    """cls_bpf in classic mode: the program's return value is the class id (0: no match -> HTB default)."""
    run_tc(
        [
            "filter",
            "add",
            "dev",
            dev,
            "parent",
            f"{HTB_MAJOR:x}:",
            "prio",
            str(FILTER_PRIO),
            "handle",
            str(FILTER_HANDLE),
            "bpf",
            "object-pinned",
            pinned_prog,
        ],
        netns,
    )


def delete_root(dev: str, netns: str | None = None) -> bool:
    """Delete the root qdisc (its classes and filters go with it); False when there was none of ours."""
    argv = [*ns_prefix(netns), "tc", "qdisc", "del", "dev", dev, "root"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=TC_TIMEOUT_S, check=False)
    return done.returncode == 0


_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}


def parse_rate_bps(text: str) -> float:
    """tc's rate text (`10Mbit`, `1500Kbit`, `800bit`) in bits per second."""
    match = re.fullmatch(r"([0-9.]+)([a-zA-Z]*)", text.strip())
    if not match:
        raise ValueError(f"not a tc rate: {text!r}")
    return float(match.group(1)) * _RATE_UNITS.get(match.group(2).lower(), 1)


_CLASS_LINE = re.compile(r"^class htb (\S+) .*?rate (\S+) ceil (\S+)")
_SENT_LINE = re.compile(r"Sent (\d+) bytes (\d+) pkt \(dropped (\d+), overlimits (\d+)")
_BACKLOG_LINE = re.compile(r"backlog (\d+)b (\d+)p")


def class_stats(dev: str, netns: str | None = None) -> dict[int, dict[str, float]]:
    """Per HTB class minor: rate/ceil (bit/s), bytes, packets, drops, overlimits, backlog bytes/packets.

    Parsed from text: iproute2 6.1 prints HTB classes as text even with -j.
    """
    stats: dict[int, dict[str, float]] = {}
    current: dict[str, float] | None = None
    for line in run_tc(["-s", "class", "show", "dev", dev], netns).splitlines():
        head = _CLASS_LINE.match(line)
        if head:
            major, _, minor = head.group(1).partition(":")
            current = None
            if major == f"{HTB_MAJOR:x}" and minor:
                current = {
                    "rate_bps": parse_rate_bps(head.group(2)),
                    "ceil_bps": parse_rate_bps(head.group(3)),
                }
                stats[int(minor, 16)] = current
            continue
        if current is None:
            continue
        sent = _SENT_LINE.search(line)
        if sent:
            current.update(
                bytes=float(sent.group(1)),
                packets=float(sent.group(2)),
                drops=float(sent.group(3)),
                overlimits=float(sent.group(4)),
            )
        backlog = _BACKLOG_LINE.search(line)
        if backlog and "backlog_bytes" not in current:
            current.update(backlog_bytes=float(backlog.group(1)), backlog_packets=float(backlog.group(2)))
    return stats


def filter_names(dev: str, netns: str | None = None) -> list[str]:
    """Names of the bpf programs of the cls_bpf filters on the HTB root."""
    names: list[str] = []
    text = run_tc(["-j", "filter", "show", "dev", dev, "parent", f"{HTB_MAJOR:x}:"], netns, check=False)
    rows: list[dict[str, Any]] = json.loads(text) if text.strip() else []
    for row in rows:
        options = row.get("options") or {}
        program = options.get("prog") or {}
        if row.get("kind") == "bpf" and "name" in program:
            names.append(str(program["name"]))
    return names
