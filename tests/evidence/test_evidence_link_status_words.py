"""Link states in two tools' own words, read as the link faults they show (evals/real/unseen10's misses).

NCCL's IB async thread (src/transport/net_ib.cc) names the ibverbs event of a port as `Got async event :
<what>` in older releases and `Got async error event: <what>` in newer ones; `port error` is
IBV_EVENT_PORT_ERR (the link went down), `port active` IBV_EVENT_PORT_ACTIVE (it came up): errors and
actives on one port are a flapping link. `nvidia-smi nvlink -s` prints each GPU's `-L` line, then
`Link N: <speed> GB/s` per active link and `Link N: <inactive>` per inactive one: some inactive among active
ones is a degraded NVLink, as `dcgmi nvlink -s`'s `D` among `U`. An `nvidia-smi -q -x` excerpt without its
XML header is still nvidia-smi's (its element names are the DTD's) and is read as such. The real files are evals/real/unseen10's
(already scored; each case.yaml names its source); the other lines are constructed, marked so."""

from __future__ import annotations

from pathlib import Path

from aiops.evidence import investigate
from aiops.evidence.nccl import parse_line
from aiops.evidence.reading import PARSERS

PROBE = Path(__file__).resolve().parents[2] / "evals" / "real" / "unseen10-2026-12-07"
# llm-d/llm-d#191: a maintainer's `grep net_ib *.log` (grep's file prefix, a bracketed stamp, NCCL's prefix)
FLAP = PROBE / "nccl-net-ib-async-port-error-active-flap-llm-d-prefill-2025" / "nccl.log"
# Azure/azhpc-diagnostics#73: two of a V100-SXM2's six links inactive
NVLINK = PROBE / "nvlink-status-two-links-inactive-v100-sxm2-azhpc-2022" / "nvidia-smi-nvlink.txt"


def test_the_newer_async_wording_is_a_port_event() -> None:
    error = "host:311:405 [0] transport/net_ib.cc:199 NCCL WARN NET/IB : mlx5_32:1 Got async error event: port error"
    active = error.replace("port error", "port active")
    older = "host:311:405 [0] NCCL WARN NET/IB : mlx5_0:1 Got async event : port error"  # constructed
    assert (e := parse_line("nccl.log", 1, error)) is not None
    assert (e.kind, e.component) == ("ib_port_error", "mlx5_32:1")
    assert (a := parse_line("nccl.log", 2, active)) is not None
    assert (a.kind, a.component) == ("ib_port_active", "mlx5_32:1")
    assert (o := parse_line("nccl.log", 3, older)) is not None and o.kind == "ib_port_error"


def test_a_port_that_errs_and_comes_back_is_a_flap() -> None:
    report = investigate([FLAP])
    assert report["verdict"] == "diagnosed"
    top = report["hypotheses"][0]
    assert top["root_cause"] == "nic_link_flap" and top["confidence"] >= 0.8
    assert top["component"].endswith("mlx5_32:1")
    assert "nccl.log:3" in top["evidence"][0]["sources"]  # the `port active` between the two errors


def test_nvlink_status_counts_inactive_links_per_gpu() -> None:
    lines = enumerate(NVLINK.read_text(encoding="utf-8").splitlines(), 1)
    events = [
        e for e in PARSERS["nvidia-smi"](NVLINK.name, lines) if e is not None and e.kind == "nvlink_links"
    ]
    assert len(events) == 1
    (links,) = events
    assert links.component == "GPU3" and links.code == 1
    assert (links.detail["up"], links.detail["down"]) == ("4", "2")
    assert "<inactive>" in links.raw  # the line cited is an inactive link's


def test_inactive_links_among_active_ones_are_a_degraded_nvlink() -> None:
    report = investigate([NVLINK])
    assert report["verdict"] == "diagnosed"
    top = report["hypotheses"][0]
    assert (top["root_cause"], top["component"].endswith("gpu3")) == ("nvlink_degraded", True)


def test_all_links_active_is_a_healthy_reading(tmp_path: Path) -> None:
    text = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0a1b2c3d-0000-1111-2222-333344445555)\n" + "".join(
        f"\t Link {i}: 26.562 GB/s\n" for i in range(18)
    )  # constructed
    status = tmp_path / "nvlink.txt"
    status.write_text(text, encoding="utf-8")
    report = investigate([status])
    assert report["verdict"] == "healthy"
    assert report["sources"][0]["unknown"] == 0


# healthy-nvsmi-q-x-xml-...-l20-2025 (1Panel-dev/1Panel#10990): an `nvidia-smi -q -x` excerpt without its header
XML = PROBE / "healthy-nvsmi-q-x-xml-clocks-event-reasons-idle-l20-2025" / "nvidia-smi-q-x.xml"


def test_an_xml_excerpt_without_its_header_is_read_as_nvidia_smi_q() -> None:
    report = investigate([XML])
    assert report["sources"][0]["format"] == "nvidia-smi-q"
    assert report["sources"][0]["unknown"] == 0
    assert report["verdict"] == "healthy"  # the only active reason is GPU idle


def test_an_xml_excerpt_with_an_active_slowdown_is_not_healthy(tmp_path: Path) -> None:
    text = XML.read_text(encoding="utf-8").replace(
        "<clocks_event_reason_hw_thermal_slowdown>Not Active",
        "<clocks_event_reason_hw_thermal_slowdown>Active",
    )  # constructed from the real file
    hot = tmp_path / "hot.xml"
    hot.write_text(text, encoding="utf-8")
    report = investigate([hot])
    assert report["sources"][0]["format"] == "nvidia-smi-q"
    assert report["verdict"] != "healthy"
