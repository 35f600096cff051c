"""A switch ASIC's port changes in its kernel log (`mlxsw_spectrum 0000:01:00.0 swp1: link down`: the mlxsw
driver's `netdev_info(dev, "link up\\n")`, lower case) are read as link events of a switch port, by the shared
kernel-line parser (the live /dev/kmsg collector stores them as link rows of the switch's PCI device, never as a
GPU's event) and weighed apart by investigate's rules: one down is a finding, never a diagnosis. The real lines
are those of evals/real/unseen8 (dentproject/dentOS#11, already scored; its case.yaml names the source); the
flapping port is constructed, marked so."""

from __future__ import annotations

from pathlib import Path

from aiops.evidence import investigate
from aiops.evidence.events import LogEvent
from collectors import kmsg_parse

CASE = (
    Path(__file__).resolve().parents[2]
    / "evals"
    / "real"
    / "unseen8-2026-12-06"
    / "switch-dmesg-link-down-unknown-prefix-dentos-test-harness-unresolved-2021"
)
# as published, with their trailing space
UP = "mlxsw_spectrum 0000:01:00.0 swp1: link up "
DOWN = "mlxsw_spectrum 0000:01:00.0 swp1: link down "


def test_the_shared_parser_reads_a_switch_port_change_as_a_link() -> None:
    assert kmsg_parse.read_line(UP) == kmsg_parse.KernelEvent("link", 1, "0000:01:00.0", "swp1")
    assert kmsg_parse.read_line(DOWN) == kmsg_parse.KernelEvent("link", 0, "0000:01:00.0", "swp1")
    # what a live node would store: a link row of the switch's device, nothing of a GPU
    assert kmsg_parse.classify(DOWN) == kmsg_parse.KernelLine("link", 0, "0000:01:00.0", "swp1")


def test_one_down_of_a_switch_port_is_a_finding_not_a_diagnosis() -> None:
    events: list[LogEvent] = []
    result = investigate([CASE / "dmesg.txt"], sink=events.append)
    links = [(e.line, e.component, e.code) for e in events if e.kind == "nic_link"]
    # the two ports up, ready (IPv6 ADDRCONF), then down while the test harness bridges them
    assert links == [
        (5, "swp1", 1),
        (6, "swp2", 1),
        (7, "swp1", 1),
        (8, "swp2", 1),
        (9, "swp1", 0),
        (10, "swp2", 0),
    ]
    assert all(e.detail.get("switch_port") == "True" for e in events if e.kind == "nic_link")
    assert result["sources"][0]["parsed"] == 6
    assert result["verdict"] == "inconclusive" and result["hypotheses"] == []
    assert [f["source"] for f in result["findings"]] == ["dmesg.txt:9", "dmesg.txt:10"]


def test_a_flapping_switch_port_is_a_lean_on_the_port(tmp_path: Path) -> None:
    # constructed (not a capture): one port down and up twice, in the driver's words and dmesg's stamps
    lines = [
        "[ 7001.100000] mlxsw_spectrum 0000:01:00.0 swp7: link down",
        "[ 7003.200000] mlxsw_spectrum 0000:01:00.0 swp7: link up",
        "[ 7010.300000] mlxsw_spectrum 0000:01:00.0 swp7: link down",
        "[ 7012.400000] mlxsw_spectrum 0000:01:00.0 swp7: link up",
    ]
    path = tmp_path / "dmesg.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = investigate([path])
    assert [(h["root_cause"], h["component"], h["confidence"]) for h in result["hypotheses"]] == [
        ("nic_link_flap", "this host/switch-port@swp7", 0.5)
    ]
    assert result["verdict"] == "inconclusive"
