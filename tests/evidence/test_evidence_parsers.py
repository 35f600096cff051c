"""Parsers and format detection of aiops/evidence on the real corpus's lines (evals/real/)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.errors import EvidenceError
from aiops.evidence import investigate, kernel, nccl
from aiops.evidence.detect import detect_format
from aiops.evidence.investigate import file_format
from aiops.evidence.reader import lines
from aiops.evidence.reading import PARSERS
from aiops.evidence.timeparse import zoned_ts_s
from collectors.kmsg_parse import LineState

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"


def _events(path: Path) -> list[object]:
    fmt = file_format(path)
    return [e for e in PARSERS[fmt](path.name, lines(path)) if e is not None]


@pytest.mark.parametrize(
    ("relative", "expected"),
    [
        ("xid79-aer-surprise-down-tesla-2018/dmesg.txt", "kernel-log"),
        ("xid119-gsp-timeout-8x-a100-vllm-2026/dmesg.txt", "kernel-log"),
        ("xid48-dbe-xid64-gpu-operator-validator-2024/kern.log", "kernel-log"),
        ("xid154-gsp-heartbeat-timeout-rtx5080-2026/kern.log", "kernel-log"),
        ("healthy-nvidia-smi-q-p8-idle-2019/nvidia-smi-q.txt", "nvidia-smi-q"),
        ("remapped-rows-pending-gpud-2024/nvidia-smi-q.txt", "nvidia-smi-q"),
        ("nccl-loc-access-violation-mtu-mismatch-2024/nccl.log", "nccl-log"),
        ("nccl-watchdog-allreduce-v100-ofa-2022/pytorch.log", "nccl-log"),
        ("ucx-transport-retry-exceeded-96-nodes-2020/ucx.log", "nccl-log"),
        ("ib-port-polling-rate10-gpud-2025/ibstat.txt", "ib"),
        ("ib-link-unstable-polling-rdma-link-rccl-2024/rdma-link-1.txt", "ib"),
        ("pcie-gen1-downgraded-riser-or-idle-2023/lspci-vv.txt", "lspci-vv"),
        ("dataloader-data-time-dominates-mmdet-2019/train.log", "train-log"),
        ("device-plugin-xid69-unhealthy-2020/device-plugin.log", "gpu-agent-log"),
    ],
)
def test_format_is_detected_from_content(relative: str, expected: str) -> None:
    assert file_format(REAL / relative) == expected


def test_detection_ignores_the_file_name(tmp_path: Path) -> None:
    misleading = tmp_path / "dmesg.txt"
    misleading.write_bytes((REAL / "ib-port-polling-rate10-gpud-2025/ibstat.txt").read_bytes())
    assert file_format(misleading) == "ib"
    assert detect_format(["hello world", "nothing here"]) is None


def test_xid_lines_carry_code_pci_and_line_numbers() -> None:
    events = _events(REAL / "xid79-aer-surprise-down-tesla-2018/dmesg.txt")
    xid = [e for e in events if getattr(e, "kind", "") == "xid"]
    assert len(xid) == 1
    assert (xid[0].code, xid[0].component, xid[0].line) == (79, "0000:02:00.0", 13)  # type: ignore[attr-defined]
    assert xid[0].uptime_s == pytest.approx(74889.644138)  # type: ignore[attr-defined]
    kinds = {getattr(e, "kind", "") for e in events}
    assert {"aer", "aer_surprise_down"} <= kinds


def test_year_less_and_zone_less_times_are_not_invented() -> None:
    state = LineState()
    syslog = kernel.parse_line("k", 1, "Mar 29 15:38:59 kernel: NVRM: Xid (PCI:0000:01:00): 120, GSP", state)
    dmesg_t = kernel.parse_line(
        "k", 2, "[Sun Apr 26 23:12:26 2026] NVRM: Xid (PCI:0001:6c:00): 119, x", state
    )
    assert syslog is not None and dmesg_t is not None
    assert syslog.ts_s is None and dmesg_t.ts_s is None
    assert dmesg_t.detail["time"] == "Sun Apr 26 23:12:26 2026"
    assert zoned_ts_s("2025-11-09 15:39:31.043 +08:00") == pytest.approx(1762673971.043)
    assert zoned_ts_s("2019-07-21 16:20:05,759 - INFO") is None


def test_journalctl_json_lines_are_read() -> None:
    raw = (
        '{"MESSAGE":"NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.","_HOSTNAME":"gpu-07",'
        '"__REALTIME_TIMESTAMP":"1700000000000000","_TRANSPORT":"kernel"}'
    )
    (event,) = [e for e in kernel.parse("j.json", [(1, raw)]) if e is not None]
    assert (event.kind, event.code, event.host, event.ts_s) == ("xid", 79, "gpu-07", 1700000000.0)
    assert event.raw == raw


def test_nccl_completion_error_keeps_status_and_gids() -> None:
    path = REAL / "nccl-loc-access-violation-mtu-mismatch-2024/nccl.log"
    events = [e for e in nccl.parse(path.name, lines(path)) if e is not None]
    completion = [e for e in events if e.kind == "ib_completion_error"]
    assert len(completion) == 1 and completion[0].code == 5 and completion[0].line == 5
    assert completion[0].detail["local_gid"] == "fe80::e61d:2dff:fef2:9c94"
    assert completion[0].host == "ubuntu20-server-2"


def test_watchdog_lines_give_op_and_sequence() -> None:
    path = REAL / "nccl-watchdog-allreduce-basicsr-2025/pytorch.log"
    watchdog = [
        e for e in nccl.parse(path.name, lines(path)) if e is not None and e.kind == "nccl_watchdog_timeout"
    ]
    assert [e.detail["rank"] for e in watchdog] == ["1", "0", "2"]
    assert {e.code for e in watchdog} == {808} and {e.detail["op"] for e in watchdog} == {"ALLREDUCE"}


def test_nvidia_smi_sections_are_tracked() -> None:
    events = _events(REAL / "remapped-rows-pending-gpud-2024/nvidia-smi-q.txt")
    pending = [e for e in events if getattr(e, "kind", "") == "remap_pending"]
    assert len(pending) == 1 and pending[0].code == 1  # type: ignore[attr-defined]
    idle = _events(REAL / "healthy-throttle-reasons-idle-2018/nvidia-smi-q.txt")
    active = [e.detail["key"] for e in idle if getattr(e, "kind", "") == "clocks_event" and e.code == 1]  # type: ignore[attr-defined]
    assert active == ["Idle"]


def test_nvidia_smi_xml_is_parsed_and_doctype_refused(tmp_path: Path) -> None:
    xml = tmp_path / "q.xml"
    xml.write_text(
        '<?xml version="1.0" ?>\n<nvidia_smi_log>\n<gpu id="00000000:3B:00.0">\n<clocks_event_reasons>\n'
        "<clocks_event_reason_hw_thermal_slowdown>Active</clocks_event_reason_hw_thermal_slowdown>\n"
        "</clocks_event_reasons>\n</gpu>\n</nvidia_smi_log>\n"
    )
    events = _events(xml)
    thermal = [e for e in events if getattr(e, "kind", "") == "clocks_event" and e.code == 1]  # type: ignore[attr-defined]
    assert len(thermal) == 1 and thermal[0].line == 5 and thermal[0].component == "0000:3b:00.0"  # type: ignore[attr-defined]
    bomb = tmp_path / "bomb.xml"
    bomb.write_text(
        '<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY a "aaaa">]>\n<nvidia_smi_log>&a;</nvidia_smi_log>\n'
    )
    with pytest.raises(EvidenceError, match="DOCTYPE"):
        file_format(bomb)


def test_nvidia_smis_own_doctype_is_read_and_a_paste_starting_with_a_bracket_is_no_xml(
    tmp_path: Path,
) -> None:
    """`nvidia-smi -q -x` writes `<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">` after its XML
    declaration: its output is read, not refused; a text paste whose first line starts with `<` (a redacted
    `<node ip>:` host, as a real fabric-manager excerpt has) is read as text, not refused as broken XML."""
    xml = tmp_path / "q.xml"
    xml.write_text(
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n<nvidia_smi_log>\n'
        '<gpu id="00000000:3B:00.0">\n<clocks_event_reasons>\n'
        "<clocks_event_reason_hw_thermal_slowdown>Active</clocks_event_reason_hw_thermal_slowdown>\n"
        "</clocks_event_reasons>\n</gpu>\n</nvidia_smi_log>\n"
    )
    assert file_format(xml) == "nvidia-smi-q"
    thermal = [e for e in _events(xml) if getattr(e, "kind", "") == "clocks_event" and e.code == 1]  # type: ignore[attr-defined]
    assert len(thermal) == 1 and thermal[0].component == "0000:3b:00.0"  # type: ignore[attr-defined]
    inline = (
        tmp_path / "inline.xml"
    )  # an internal subset next to nvidia-smi's own declaration is still refused
    inline.write_text(
        '<?xml version="1.0" ?>\n<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v12.dtd">\n'
        "<!DOCTYPE x [<!ELEMENT x ANY>]>\n<nvidia_smi_log></nvidia_smi_log>\n"
    )
    with pytest.raises(EvidenceError, match="DOCTYPE"):
        file_format(inline)
    case = REAL / "unseen4-2026-12-06" / "fabricmanager-config-invalid-value-h200-talos-extension-2024"
    result = investigate([case / "fabricmanager.log"])
    assert result["sources"][0]["format"] == "fabric-manager" and not result.get("skipped")


def test_unknown_lines_are_counted_not_fatal() -> None:
    path = REAL / "xid13-out-of-range-gpudirect-nvme-2020/dmesg.txt"
    items = list(kernel.parse(path.name, lines(path)))
    assert len(items) == 7 and sum(1 for e in items if e is None) == 4


def test_nvidia_smi_xml_readings_match_the_text_ones(tmp_path: Path) -> None:
    xml = tmp_path / "q.xml"
    xml.write_text(
        '<?xml version="1.0" ?>\n<nvidia_smi_log>\n\t<driver_version>550.54.15</driver_version>\n'
        '\t<gpu id="00000000:18:00.0">\n\t\t<performance_state>P0</performance_state>\n'
        "\t\t<clocks_event_reasons>\n"
        "\t\t\t<clocks_event_reason_gpu_idle>Not Active</clocks_event_reason_gpu_idle>\n"
        "\t\t\t<clocks_event_reason_hw_slowdown>Active</clocks_event_reason_hw_slowdown>\n"
        "\t\t\t<clocks_event_reason_hw_power_brake_slowdown>Active</clocks_event_reason_hw_power_brake_slowdown>\n"
        "\t\t</clocks_event_reasons>\n\t\t<remapped_rows>\n"
        "\t\t\t<remapped_row_unc>2</remapped_row_unc>\n\t\t\t<remapped_row_pending>Yes</remapped_row_pending>\n"
        "\t\t</remapped_rows>\n\t</gpu>\n</nvidia_smi_log>\n"
    )
    result = investigate([xml])
    causes = [(h["root_cause"], h["component"]) for h in result["hypotheses"]]
    assert ("power_brake", "this host/gpu0") in causes and ("gpu_ecc_error", "this host/gpu0") in causes
    assert result["sources"][0]["format"] == "nvidia-smi-q" and result["sources"][0]["unknown"] == 0


def test_a_key_with_an_underscore_is_no_host(tmp_path: Path) -> None:
    """A host name is letters, digits and hyphens (RFC 1123): `worker-4: ` prefixes a line, `data_time: ` or a YAML
    key such as `established_by: ` does not (a folder of logs may hold a YAML file beside them)."""
    log = tmp_path / "k.log"
    xid = "NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."
    log.write_text(
        f"worker-4: {xid.format(bus='07')}\nestablished_by: {xid.format(bus='08')}\nworker-4: {xid.format(bus='07')}\n"
    )
    found = {(h["root_cause"], h["component"]) for h in investigate([log])["hypotheses"]}
    assert found == {
        ("gpu_fell_off_bus", "worker-4/gpu@0000:07:00.0"),
        ("gpu_fell_off_bus", "this host/gpu@0000:08:00.0"),
    }


def test_journal_short_iso_and_dmesg_x_prefixes(tmp_path: Path) -> None:
    log = tmp_path / "k.log"
    log.write_text(
        "2024-12-02T11:38:47+0100 worker4 kernel: NVRM: Xid (PCI:0000:07:00): 48, pid='<unknown>', DBE\n"
        "kern  :err   : [  219.471050] NVRM: Xid (PCI:0000:07:00): 64, pid='<unknown>', name=<unknown>\n"
    )
    assert file_format(log) == "kernel-log"
    first, second = [e for e in PARSERS["kernel-log"]("k.log", lines(log)) if e is not None]
    assert (first.code, first.host, first.ts_s) == (48, "worker4", 1733135927.0)  # 10:38:47 UTC
    assert (second.code, second.uptime_s, second.ts_s) == (64, 219.47105, None)
