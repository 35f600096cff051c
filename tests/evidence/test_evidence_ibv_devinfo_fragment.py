"""`ibv_devinfo -v` as operators quote it: a port's lines without the `hca_id:` and `port:` lines above them,
and the port's GID table (`GID[%3d]:\\t\\t<gid>, <type>`, rdma-core libibverbs/examples/devinfo.c). The real
fragment is the one of evals/real/unseen8 (NVIDIA/nccl#769, already scored; its case.yaml names the source);
the others are constructed, marked so, laid out as devinfo.c prints them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiops.evidence import investigate
from aiops.evidence.detect import detect_format
from aiops.evidence.events import LogEvent

# the five tab-indented lines the reporter quoted from `ibv_devinfo -d mlx5_bond_0 -v` (NVIDIA/nccl#769)
REAL_FRAGMENT = (
    "\t\t\tphys_state:\t\tLINK_UP (5)\n"
    "\t\t\tGID[  0]:\t\tfe80:0000:0000:0000:0ac0:ebff:feda:1cfb, RoCE v1\n"
    "\t\t\tGID[  1]:\t\tfe80::ac0:ebff:feda:1cfb, RoCE v2\n"
    "\t\t\tGID[  2]:\t\t0000:0000:0000:0000:0000:ffff:c800:d106, RoCE v1\n"
    "\t\t\tGID[  3]:\t\t::ffff:200.0.209.6, RoCE v2\n"
)

# Constructed (not a capture): a port's state lines quoted without their headers, the link polling.
POLLING_FRAGMENT = (
    "\t\t\tstate:\t\t\tPORT_DOWN (1)\n"
    "\t\t\tmax_mtu:\t\t4096 (5)\n"
    "\t\t\tactive_mtu:\t\t4096 (5)\n"
    "\t\t\tlink_layer:\t\tInfiniBand\n"
    "\t\t\tphys_state:\t\tPOLLING (2)\n"
)

# Constructed (not a capture): the same GID lines under their headers, as `ibv_devinfo -v` prints a whole port.
WHOLE = (
    "hca_id:\tmlx5_bond_0\n"
    "\ttransport:\t\t\tInfiniBand (0)\n"
    "\tphys_port_cnt:\t\t\t1\n"
    "\t\tport:\t1\n"
    "\t\t\tstate:\t\t\tPORT_ACTIVE (4)\n"
    "\t\t\tlink_layer:\t\tEthernet\n" + REAL_FRAGMENT
)


def _read(tmp_path: Path, text: str) -> tuple[dict[str, Any], list[LogEvent]]:
    path = tmp_path / "ibv-devinfo.txt"
    path.write_text(text, encoding="utf-8")
    events: list[LogEvent] = []
    return investigate([path], sink=events.append), events


def _gids(events: list[LogEvent]) -> list[tuple[str | None, str, str, str]]:
    return [
        (e.component, e.detail["gid_index"], e.detail["gid"], e.detail["gid_type"])
        for e in events
        if "gid_index" in e.detail
    ]


def test_a_headerless_fragment_is_ibv_devinfo_and_every_line_is_read(tmp_path: Path) -> None:
    assert detect_format(REAL_FRAGMENT.splitlines()) == "ibv-devinfo"
    result, events = _read(tmp_path, REAL_FRAGMENT)
    source = result["sources"][0]
    assert (source["format"], source["parsed"], source["unknown"]) == ("ibv-devinfo", 5, 0)
    assert [(e.component, e.detail["physical"]) for e in events if e.kind == "ib_port_state"] == [
        (None, "linkup")
    ]
    assert _gids(events) == [
        (None, "0", "fe80:0000:0000:0000:0ac0:ebff:feda:1cfb", "RoCE v1"),
        (None, "1", "fe80::ac0:ebff:feda:1cfb", "RoCE v2"),
        (None, "2", "0000:0000:0000:0000:0000:ffff:c800:d106", "RoCE v1"),
        (None, "3", "::ffff:200.0.209.6", "RoCE v2"),
    ]
    # a link up and a GID table name no fault
    assert result["hypotheses"] == [] and result["findings"] == []


def test_a_headerless_polling_port_is_judged_as_a_whole_one(tmp_path: Path) -> None:
    result, events = _read(tmp_path, POLLING_FRAGMENT)
    states = [(e.detail["state"], e.detail["physical"]) for e in events if e.kind == "ib_port_state"]
    assert states == [("down", "polling")]
    assert result["sources"][0]["unknown"] == 0
    assert [h["root_cause"] for h in result["hypotheses"]] == ["nic_link_flap"]


def test_gid_lines_under_their_headers_name_the_port(tmp_path: Path) -> None:
    result, events = _read(tmp_path, WHOLE)
    assert result["sources"][0]["unknown"] == 0
    assert {g[0] for g in _gids(events)} == {"mlx5_bond_0:1"}
    assert [(e.component, e.detail["state"]) for e in events if e.kind == "ib_port_state"] == [
        ("mlx5_bond_0:1", "active")
    ]
    assert result["verdict"] == "healthy"
