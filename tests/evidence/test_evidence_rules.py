"""The rules of aiops/evidence/rules.py on real lines (and real lines put side by side)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aiops.evidence import investigate

REAL = Path(__file__).resolve().parents[2] / "evals" / "real"


def _run(tmp_path: Path, name: str, text: str) -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return investigate([path])


def _line(case: str, name: str, number: int) -> str:
    return (REAL / case / name).read_text(encoding="utf-8").splitlines()[number - 1]


def test_app_xids_next_to_hardware_xids_are_not_an_application_error(tmp_path: Path) -> None:
    xid13 = _line("xid13-out-of-range-gpudirect-nvme-2020", "dmesg.txt", 5)
    xid79 = _line("xid79-aer-surprise-down-tesla-2018", "dmesg.txt", 13)
    alone = _run(tmp_path, "a.txt", xid13 + "\n")
    assert alone["hypotheses"][0]["root_cause"] == "application_error"
    both = _run(tmp_path, "b.txt", f"{xid13}\n{xid79}\n")
    assert [h["root_cause"] for h in both["hypotheses"]] == ["gpu_fell_off_bus"]


def test_xid45_caused_by_an_nvlink_xid_is_no_application_error(tmp_path: Path) -> None:
    result = investigate([REAL / "xid45-after-nvlink-xid149-unresolved-2026" / "kern.log"])
    assert result["verdict"] == "inconclusive"
    assert all(h["root_cause"] != "application_error" for h in result["hypotheses"])
    plain45 = _run(
        tmp_path, "k.log", "kernel: NVRM: Xid (PCI:0000:dc:00): 45, pid=1818990, name=python3, Ch 00000001\n"
    )
    assert plain45["hypotheses"][0]["root_cause"] == "application_error"


def test_gen1_link_of_an_idle_gpu_is_not_diagnosed() -> None:
    result = investigate([REAL / "pcie-gen1-downgraded-riser-or-idle-2023" / "lspci-vv.txt"])
    assert result["verdict"] == "inconclusive"
    assert (
        result["hypotheses"][0]["root_cause"] == "pcie_degraded"
        and result["hypotheses"][0]["confidence"] < 0.6
    )


def test_narrow_link_is_diagnosed(tmp_path: Path) -> None:
    text = (
        "3b:00.0 3D controller: NVIDIA Corporation GA100 [A100 SXM4 80GB] (rev a1)\n"
        "\t\tLnkCap:\tPort #0, Speed 16GT/s, Width x16, ASPM not supported\n"
        "\t\tLnkSta:\tSpeed 16GT/s, Width x8 (downgraded)\n"
    )
    result = _run(tmp_path, "lspci.txt", text)
    top = result["hypotheses"][0]
    assert (result["verdict"], top["root_cause"], top["component"]) == (
        "diagnosed",
        "pcie_degraded",
        "this host/gpu@0000:3b:00.0",
    )


def test_a_narrow_link_of_a_device_the_excerpt_does_not_name_is_only_a_lead() -> None:
    """A Quadro on a Raspberry Pi's one Gen 2 lane: `LnkSta: Speed 5GT/s (downgraded), Width x1 (downgraded)` in an
    excerpt without the device's header. lspci compares with the device's own capability, not the slot's, so a card
    in a narrower slot reads the same: a lead, not a verdict (evals/real/unseen6-2026-12-06/README.md)."""
    case = (
        REAL / "unseen6-2026-12-06" / "lspci-lnksta-5gts-x1-downgraded-quadro-rtx8000-raspberry-pi-unresolved"
    )
    result = investigate([case / "lspci-vv.txt"])
    top = result["hypotheses"][0]
    assert result["verdict"] == "inconclusive"
    assert (top["root_cause"], top["confidence"]) == ("pcie_degraded", 0.45)


def test_a_power_brake_on_every_gpu_of_a_node_is_the_nodes() -> None:
    """Eight idle H100s, each `HW Power Brake Slowdown : Active`: the brake is a signal from outside the boards, so
    one hypothesis on the node, not eight on its GPUs (evals/real/unseen7-2026-12-06/README.md)."""
    case = REAL / "unseen7-2026-12-06" / "power-brake-slowdown-active-8x-h100-idle-gpud-fixture-2024"
    result = investigate([case / "nvidia-smi-q.txt"])
    brakes = [
        (h["component"], h["confidence"]) for h in result["hypotheses"] if h["root_cause"] == "power_brake"
    ]
    assert result["verdict"] == "diagnosed" and brakes == [("this host", 0.85)]


def test_a_power_brake_on_one_gpu_of_two_stays_that_gpus(tmp_path: Path) -> None:
    def gpu(bus: str, brake: str) -> str:
        return (
            f'\t<gpu id="00000000:{bus}:00.0">\n\t\t<clocks_event_reasons>\n'
            f"\t\t\t<clocks_event_reason_hw_power_brake_slowdown>{brake}</clocks_event_reason_hw_power_brake_slowdown>\n"
            "\t\t</clocks_event_reasons>\n\t</gpu>\n"
        )

    xml = '<?xml version="1.0" ?>\n<nvidia_smi_log>\n' + gpu("18", "Active") + gpu("3B", "Not Active")
    result = _run(tmp_path, "q.xml", xml + "</nvidia_smi_log>\n")
    brakes = [h["component"] for h in result["hypotheses"] if h["root_cause"] == "power_brake"]
    assert brakes == ["this host/gpu0"]


def test_nvidia_smi_gen_below_max_counts_only_under_load(tmp_path: Path) -> None:
    def smi(pstate: str) -> str:
        return (
            "GPU 00000000:3B:00.0\n    Performance State : " + pstate + "\n    PCI\n        GPU Link Info\n"
            "            PCIe Generation\n                Max : 4\n                Current : 1\n"
        )

    idle = _run(tmp_path, "idle.txt", smi("P8"))
    busy = _run(tmp_path, "busy.txt", smi("P0"))
    assert idle["verdict"] == "inconclusive" and busy["verdict"] == "diagnosed"
    assert busy["hypotheses"][0]["root_cause"] == "pcie_degraded"


def test_clock_event_reasons(tmp_path: Path) -> None:
    thermal = _run(
        tmp_path,
        "t.txt",
        "    Clocks Event Reasons\n        Idle : Not Active\n"
        "        HW Slowdown : Active\n            HW Thermal Slowdown : Active\n",
    )
    brake = _run(
        tmp_path,
        "b.txt",
        "    Clocks Event Reasons\n        HW Slowdown : Active\n"
        "            HW Power Brake Slowdown : Active\n",
    )
    assert thermal["hypotheses"][0]["root_cause"] == "thermal_throttle"
    assert brake["hypotheses"][0]["root_cause"] == "power_brake"


def test_gsp_timeouts_are_a_firmware_fault_and_name_the_gpu_index() -> None:
    result = investigate([REAL / "xid119-gsp-timeout-8x-a100-vllm-2026" / "dmesg.txt"])
    top = result["hypotheses"][0]
    assert (top["root_cause"], top["component"]) == ("gpu_driver_firmware_fault", "this host/gpu5")
    assert top["evidence"][0]["source"] == "dmesg.txt:3"


def test_retry_exceeded_alone_is_inconclusive_and_link_local_gid_points_to_roce() -> None:
    ucx = investigate([REAL / "ucx-transport-retry-exceeded-96-nodes-2020" / "ucx.log"])
    assert ucx["verdict"] == "inconclusive"
    mtu = investigate([REAL / "nccl-loc-access-violation-mtu-mismatch-2024" / "nccl.log"])
    assert mtu["hypotheses"][0]["root_cause"] == "roce_config_error"
    ipv6 = investigate([REAL / "nccl-error12-vendor129-ipv6-gid-unresolved-2024" / "nccl.log"])
    assert all(h["root_cause"] != "roce_config_error" for h in ipv6["hypotheses"])


def test_port_disabled_is_not_a_flap_but_polling_is() -> None:
    disabled = investigate([REAL / "ib-port-disabled-cx6-gpud-2024" / "ibstat.txt"])
    polling = investigate([REAL / "ib-port-polling-rate10-gpud-2025" / "ibstat.txt"])
    assert disabled["verdict"] == "inconclusive" and disabled["hypotheses"] == []
    assert polling["verdict"] == "diagnosed" and polling["hypotheses"][0]["root_cause"] == "nic_link_flap"


def test_data_time_dominating_steps(tmp_path: Path) -> None:
    slow = investigate([REAL / "dataloader-data-time-dominates-mmdet-2019" / "train.log"])
    fast = investigate([REAL / "training-slow-data-time-small-decoy-mmdet-2020" / "train.log"])
    assert slow["hypotheses"][0]["root_cause"] == "input_pipeline_bottleneck"
    assert all(h["root_cause"] != "input_pipeline_bottleneck" for h in fast["hypotheses"])


UNSEEN = REAL / "unseen-2026-12-06"


def test_step_and_data_time_are_read_in_each_frameworks_wording() -> None:
    """PyTorch's ImageNet example (`Time 0.330 (21.103)\tData 0.212 (20.811)`, lines that start `Epoch:`, no
    host), MMEngine (`time: 8.9139  data_time: 7.4351`) and YOLOX (`iter_time: 8.711s, data_time: 8.409s`): real
    lines the reader once left unparsed (evals/real/unseen-2026-12-06/README.md)."""
    for case in (
        "dataloader-time-to-first-batch-imagenet-example-2018",
        "mmengine-data-time-dominates-yolox-2023",
    ):
        result = investigate([UNSEEN / case / "train.log"])
        assert result["sources"][0]["format"] == "train-log", case
        top = result["hypotheses"][0]
        assert (top["root_cause"], top["component"]) == ("input_pipeline_bottleneck", "this host"), case
    # YOLOX: one iteration of four waits on data, the others do not: read, and the median says no bottleneck
    mixed = investigate([UNSEEN / "yolox-slow-iters-mixed-data-time-unresolved-2021" / "train.log"])
    assert mixed["sources"][0]["format"] == "train-log"
    assert mixed["sources"][0]["parsed"] == 4 and mixed["verdict"] == "inconclusive"


def test_a_loader_that_stalls_now_and_then_is_an_input_bottleneck_by_its_share_of_the_time(
    tmp_path: Path,
) -> None:
    """Two of eight steps wait 67.5 and 15.2 s on data, five take 0.15 s with none: the median step is not
    data-bound, the steps' time is (85.7 of 86.9 s). YOLOX's one slow-data step of four (a third of its time) is
    not, nor is one stall alone however long (a loader's first batch) (evals/real/unseen5-2026-12-06/README.md)."""
    stalls = (
        REAL / "unseen5-2026-12-06" / "dataloader-data-time-67s-alexnet-imagenet-example-2017" / "train.log"
    )
    result = investigate([stalls])
    top = result["hypotheses"][0]
    assert result["verdict"] == "diagnosed"
    assert (top["root_cause"], top["confidence"]) == ("input_pipeline_bottleneck", 0.6)
    once = investigate([UNSEEN / "yolox-slow-iters-mixed-data-time-unresolved-2021" / "train.log"])
    assert once["verdict"] == "inconclusive" and once["hypotheses"] == []
    first_batch = tmp_path / "train.log"  # one 90 s wait for the first batch, then ten fast steps
    first_batch.write_text(
        "".join(
            f"Epoch [1][{i}/10] time: {t}, data_time: {d}\n"
            for i, (t, d) in enumerate([(90.5, 90.1)] + [(0.4, 0.01)] * 10)
        )
    )
    assert investigate([first_batch])["hypotheses"] == []


def test_an_ibstat_port_block_pasted_without_its_ca_line_is_still_read() -> None:
    result = investigate([UNSEEN / "ibstat-fragment-down-polling-azhpc-2022" / "ibstat.txt"])
    top = result["hypotheses"][0]
    assert (top["root_cause"], top["component"]) == ("nic_link_flap", "this host/nic@port 1")


def test_gsp_rpc_timeouts_in_the_words_of_newer_drivers() -> None:
    """`_issueRpcAndWait: rpcRecvPoll timedout for fn 76 ...` and `Back to back GSP RPC timeout detected! GPU marked
    for reset`, before an Xid 154, behind a Talos host prefix: the GSP failure itself, not Xid 154 alone
    (evals/real/unseen2-2026-12-06/README.md)."""
    case = REAL / "unseen2-2026-12-06" / "gsp-back-to-back-rpc-timeout-talos-host-prefix-2026"
    result = investigate([case / "kern.log"])
    top = result["hypotheses"][0]
    assert result["verdict"] == "diagnosed"
    assert (top["root_cause"], top["component"]) == (
        "gpu_driver_firmware_fault",
        "192.168.11.119/gpu@0000:0b:00.0",
    )


def test_prometheus_and_sel_and_sysfs_are_read(tmp_path: Path) -> None:
    prom = _run(
        tmp_path,
        "metrics.txt",
        "# HELP DCGM_FI_DEV_XID_ERRORS Value of the last XID error encountered.\n"
        "# TYPE DCGM_FI_DEV_XID_ERRORS gauge\n"
        'DCGM_FI_DEV_XID_ERRORS{gpu="3",UUID="GPU-x",pci_bus_id="00000000:3B:00.0",Hostname="n7"} 79\n'
        'DCGM_FI_DEV_CLOCK_THROTTLE_REASONS{gpu="1",Hostname="n7"} 72\n',
    )
    causes = {(h["root_cause"], h["component"]) for h in prom["hypotheses"]}
    assert ("gpu_fell_off_bus", "n7/gpu3") in causes and ("thermal_throttle", "n7/gpu1") in causes
    sel = _run(
        tmp_path,
        "sel.txt",
        "   1 | 04/12/2024 | 10:22:01 | Temperature #0x30 | Upper Critical going high | Asserted\n",
    )
    assert sel["sources"][0]["format"] == "ipmi-sel" and sel["verdict"] == "inconclusive"
    sysfs = _run(
        tmp_path, "sys.txt", "/sys/class/powercap/intel-rapl:0/constraint_0_power_limit_uw:150000000\n"
    )
    assert sysfs["sources"][0] == {
        "file": "sys.txt",
        "format": "sysfs",
        "lines": 1,
        "parsed": 1,
        "unknown": 0,
        "understood": 1.0,
    }


def test_a_job_log_mixing_iterations_and_nccl_errors_reads_both(tmp_path: Path) -> None:
    steps = (REAL / "dataloader-data-time-dominates-mmdet-2019" / "train.log").read_text(encoding="utf-8")
    port = (REAL / "nccl-ib-async-port-error-flapping-link-2023" / "nccl.log").read_text(encoding="utf-8")
    result = _run(tmp_path, "job.log", steps + port)
    assert result["sources"][0]["format"] == "train-log" and result["sources"][0]["unknown"] == 0
    assert {h["root_cause"] for h in result["hypotheses"]} == {"input_pipeline_bottleneck", "nic_link_flap"}


def test_a_log_without_a_host_names_no_node_and_one_with_a_host_uses_its_name(tmp_path: Path) -> None:
    xid = "NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus."
    bare = _run(tmp_path, "dmesg.txt", f"[ 12.5] {xid}\n")
    assert bare["hypotheses"][0]["component"] == "this host/gpu@0000:3b:00.0"
    assert "node0" not in json.dumps(bare)  # no name invented
    record = {
        "MESSAGE": xid,
        "_HOSTNAME": "GPU-A100-017.dc1.example",
        "__REALTIME_TIMESTAMP": "1764806400000000",
    }
    named = _run(tmp_path, "journal.json", json.dumps(record) + "\n")
    top = named["hypotheses"][0]
    assert (top["root_cause"], top["component"]) == ("gpu_fell_off_bus", "gpu-a100-017/gpu@0000:3b:00.0")
