"""Issue 26 item 2: formats operators hand over, each read from real output (the source of every sample is
named beside it; lines are copied verbatim, never edited, a sample may be a contiguous excerpt)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiops.evidence import investigate
from aiops.evidence.detect import detect_format
from aiops.evidence.events import LogEvent

SAMPLES = Path(__file__).resolve().parents[1] / "evidence_samples"


def _run(tmp_path: Path, name: str, text: str) -> dict[str, Any]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return investigate([path])


def _events(tmp_path: Path, name: str, text: str) -> list[LogEvent]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    events: list[LogEvent] = []
    investigate([path], sink=events.append)
    return events


# A real H200 (driver 580.159.04) as `nvidia-smi` printed it on this project's device machine, followed by the
# `--query-compute-apps` CSV of the same capture: the file is used as captured (tests/evidence_samples).
def test_the_plain_nvidia_smi_table_of_a_real_h200(tmp_path: Path) -> None:
    path = SAMPLES / "nvidia-smi-h200.txt"
    events: list[LogEvent] = []
    result = investigate([path], sink=events.append)
    source = result["sources"][0]
    assert source["format"] == "nvidia-smi" and source["unknown"] <= 4  # the CSV tail and the date line
    temps = [e for e in events if e.kind == "temperature"]
    assert [(e.component, e.value, e.line) for e in temps] == [("0000:00:06.0", 40.0, 10)]
    gpu = [e for e in events if e.kind == "gpu_header"]
    assert gpu[0].detail["name"] == "NVIDIA H200" and gpu[0].detail["ecc"] == "0"
    assert result["verdict"] == "healthy"  # an idle, healthy GPU


# The driver-510 layout, from https://github.com/NVIDIA/gpu-operator/issues/356 (the nvidia-smi table).
NVSMI_510 = """Thu Jun  2 21:32:25 2022       
+-----------------------------------------------------------------------------+
| NVIDIA-SMI 510.47.03    Driver Version: 510.47.03    CUDA Version: 11.6     |
|-------------------------------+----------------------+----------------------+
| GPU  Name        Persistence-M| Bus-Id        Disp.A | Volatile Uncorr. ECC |
| Fan  Temp  Perf  Pwr:Usage/Cap|         Memory-Usage | GPU-Util  Compute M. |
|                               |                      |               MIG M. |
|===============================+======================+======================|
|   0  NVIDIA GeForce ...  Off  | 00000000:05:00.0 Off |                  N/A |
| N/A   51C    P0    15W /  N/A |      0MiB /  4096MiB |      0%      Default |
|                               |                      |                  N/A |
+-------------------------------+----------------------+----------------------+
"""  # noqa: W291 (the date line ends in spaces, as printed)


def test_the_older_nvidia_smi_table_layout(tmp_path: Path) -> None:
    events = _events(tmp_path, "smi.txt", NVSMI_510)
    temps = [e for e in events if e.kind == "temperature"]
    assert [(e.component, e.value) for e in temps] == [("0000:05:00.0", 51.0)]


# From https://github.com/ci-for-research/self-hosted-runners/issues/40 (nvidia-smi's own failure).
NVSMI_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
    "NVIDIA driver is installed and running.\n"
)


def test_nvidia_smi_failing_is_never_healthy(tmp_path: Path) -> None:
    result = _run(tmp_path, "nvidia-smi.txt", NVSMI_FAILED)
    assert result["sources"][0]["format"] == "nvidia-smi"
    assert result["verdict"] != "healthy" and result["findings"][0]["title"] == "nvsmi_error"


# `ethtool -S eth0` of a be2net NIC, from https://github.com/isc-projects/ethq/issues/7 (an excerpt).
ETHTOOL_BE2NET = """NIC statistics:
     rx_crc_errors: 0
     rx_alignment_symbol_errors: 0
     rx_pause_frames: 0
     rx_control_frames: 0
     rx_in_range_errors: 0
     rx_out_range_errors: 0
     rx_frame_too_long: 0
     rx_address_filtered: 5164994
     rx_dropped_too_small: 10
     rx_dropped_too_short: 5710
     rx_dropped_header_too_small: 1096
     rx_dropped_tcp_length: 603
     rx_dropped_runt: 0
     rxpp_fifo_overflow_drop: 0
     rx_input_fifo_overflow_drop: 0
     rx_ip_checksum_errs: 12655
     rx_tcp_checksum_errs: 93915
     rx_udp_checksum_errs: 8890
"""


def test_ethtool_counters_with_errors(tmp_path: Path) -> None:
    events = _events(tmp_path, "ethtool.txt", ETHTOOL_BE2NET)
    bad = {e.detail["counter"]: e.value for e in events if e.kind == "nic_error_counter"}
    assert bad == {
        "rx_dropped_too_small": 10,
        "rx_dropped_too_short": 5710,
        "rx_dropped_header_too_small": 1096,
        "rx_dropped_tcp_length": 603,
        "rx_ip_checksum_errs": 12655,
        "rx_tcp_checksum_errs": 93915,
        "rx_udp_checksum_errs": 8890,
    }
    assert investigate([tmp_path / "ethtool.txt"])["sources"][0]["format"] == "ethtool-stats"


# `ibv_devinfo` from https://github.com/deepseek-ai/DeepEP/issues/60 (the first HCA, port down).
IBV_DEVINFO = """hca_id: mlx5_0
        transport:                      InfiniBand (0)
        fw_ver:                         28.39.2048
        node_guid:                      58a2:e103:002a:09b8
        sys_image_guid:                 58a2:e103:002a:09b8
        vendor_id:                      0x02c9
        vendor_part_id:                 4129
        hw_ver:                         0x0
        board_id:                       MT_0000000838
        phys_port_cnt:                  1
                port:   1
                        state:                  PORT_DOWN (1)
                        max_mtu:                4096 (5)
                        active_mtu:             4096 (5)
                        sm_lid:                 0
                        port_lid:               65535
                        port_lmc:               0x00
                        link_layer:             InfiniBand
"""


def test_ibv_devinfo_port_down(tmp_path: Path) -> None:
    result = _run(tmp_path, "ibv_devinfo.txt", IBV_DEVINFO)
    assert result["sources"][0]["format"] == "ibv-devinfo"
    assert result["sources"][0]["unknown"] == 0
    assert result["verdict"] != "healthy"
    assert [f["source"] for f in result["findings"]] == ["ibv_devinfo.txt:12"]


# `dcgmi diag -r 2` (DCGM 3.3.1), from https://github.com/NVIDIA/go-dcgm/issues/52 (the start of its table),
# and the DCGM 4.x layout with per-GPU rows, from https://github.com/NVIDIA/DCGM/issues/253.
DCGMI_33 = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.1                                          |
| Driver Version Detected   | 535.129.03                                     |
| GPU Device IDs Detected   | 1eb8                                           |
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| NVML Library              | Pass                                           |
| CUDA Main Library         | Pass                                           |
| Permissions and OS Blocks | Pass                                           |
| Persistence Mode          | Pass                                           |
| Environment Variables     | Pass                                           |
| Page Retirement/Row Remap | Pass                                           |
"""
DCGMI_42 = """Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 4.2.3                                          |
| Driver Version Detected   | 570.148.08                                     |
| GPU Device IDs Detected   | 26b9, 26b9, 26b9, 26b9                         |
|-----  Deployment  --------+------------------------------------------------|
| software                  | Pass                                           |
|                           | GPU0: Pass                                     |
|                           | GPU1: Pass                                     |
|                           | GPU2: Pass                                     |
|                           | GPU3: Pass                                     |
+-----  Hardware  ----------+------------------------------------------------+
"""


def test_dcgmi_diag_tables_of_two_dcgm_versions(tmp_path: Path) -> None:
    old = _events(tmp_path, "diag33.txt", DCGMI_33)
    assert [e.detail["test"] for e in old if e.kind == "dcgm_diag"] == [
        "Denylist",
        "NVML Library",
        "CUDA Main Library",
        "Permissions and OS Blocks",
        "Persistence Mode",
        "Environment Variables",
        "Page Retirement/Row Remap",
    ]
    new = _events(tmp_path, "diag42.txt", DCGMI_42)
    per_gpu = [(e.component, e.code) for e in new if e.kind == "dcgm_diag" and e.component]
    assert per_gpu == [("GPU0", 0), ("GPU1", 0), ("GPU2", 0), ("GPU3", 0)]
    assert investigate([tmp_path / "diag42.txt"])["verdict"] == "healthy"


# `ipmitool sel elist` before the BMC clock is set, from https://github.com/ipmitool/ipmitool/pull/340.
SEL_PREINIT = """   1 |  Pre-Init  |0000198492| Critical Interrupt #0xa1 | Bus Fatal Error | Asserted
"""


def test_ipmi_sel_elist_pre_init_line(tmp_path: Path) -> None:
    result = _run(tmp_path, "sel.txt", SEL_PREINIT)
    assert result["sources"][0]["format"] == "ipmi-sel" and result["sources"][0]["parsed"] == 1
    assert result["verdict"] == "inconclusive"  # a critical SEL event, no rule names its cause


# iDRAC's Redfish SEL (`/redfish/v1/Managers/iDRAC.Embedded.1/Logs/Sel`), from
# https://github.com/mrlhansen/idrac_exporter/issues/26 (one whole record of the JSON).
REDFISH_SEL = """    {
      "@odata.id": "/redfish/v1/Managers/iDRAC.Embedded.1/Logs/Sel/13",
      "@odata.type": "#LogEntry.v1_3_0.LogEntry",
      "Created": "2020-07-13T17:26:58-05:00",
      "Description": " Log Entry 13",
      "EntryCode": [
        {
          "Member": "Assert"
        }
      ],
      "EntryType": "SEL",
      "Id": "13",
      "Links": {},
      "Message": "The chassis is open while the power is off.",
      "MessageArgs": [],
      "MessageArgs@odata.count": 0,
      "MessageId": "802ff",
      "Name": " Log Entry 13",
      "SensorNumber": 115,
      "SensorType": [
        {
          "Member": "Physical Chassis Security"
        }
      ],
      "Severity": "Critical"
    },
"""


def test_redfish_log_entry_records(tmp_path: Path) -> None:
    events = _events(tmp_path, "sel.json", REDFISH_SEL)
    logs = [e for e in events if e.kind == "bmc_log"]
    assert len(logs) == 1 and logs[0].code == 1 and logs[0].line == 25
    assert logs[0].detail["Message"] == "The chassis is open while the power is off."
    assert investigate([tmp_path / "sel.json"])["sources"][0]["format"] == "bmc-log"


# Fabric manager in the journal: https://github.com/NVIDIA/gpu-operator/issues/610 (as posted, with its
# localised date) and https://github.com/data-infra/cube-studio/issues/29.
FM_JOURNAL = """11月 15 14:15:47 leon-NF5468M6 systemd[1]: Starting NVIDIA fabric manager service...
11月 15 14:15:47 leon-NF5468M6 nv-fabricmanager[4177]: request to query NVSwitch device information from NVSwitch driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]
11月 15 14:15:47 leon-NF5468M6 systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE
"""
FM_START = """Sep 18 03:19:01 ubuntu2404 nvidia-fabricmanager-start.sh[4753]: Detected Pre-NVL5 system
Sep 18 03:19:01 ubuntu2404 nvidia-fabricmanager-start.sh[4756]: request to query NVSwitch device information from NVSwitch driver failed with error:WARNING Nothing to do [NV_WARN_NOTHING_TO_DO]
Sep 18 03:19:01 ubuntu2404 nvidia-fabricmanager-start.sh[4753]: "/usr/bin/nv-fabricmanager -c /usr/share/nvidia/nvswitch/fabricmanager.cfg" failed! Exit code: 1
Sep 18 03:19:01 ubuntu2404 systemd[1]: nvidia-fabricmanager.service: Control process exited, code=exited, status=1/FAILURE
"""


def test_fabric_manager_failing_to_start(tmp_path: Path) -> None:
    # systemd's `nvidia-fabricmanager.service: ... status=1/FAILURE` is the service failing too (issue 37)
    for name, text, lines in (("fm1.log", FM_JOURNAL, [2, 3]), ("fm2.log", FM_START, [2, 3, 4])):
        events = _events(tmp_path, name, text)
        assert [e.line for e in events if e.kind == "fm_error"] == lines
        result = investigate([tmp_path / name])
        assert result["sources"][0]["format"] == "fabric-manager" and result["verdict"] != "healthy"


# Open MPI `--tag-output` lines, from https://github.com/NVIDIA/nccl/issues/1713: the `[1,2]<stdout>:` prefix
# is removed before the line is read, and the event keeps the line as written.
NCCL_MPIRUN = """[1,2]<stdout>:aiplatform-wlf2-ge78-70:102986:102997 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/RoCE [1]mlx5_1:1/RoCE [2]mlx5_2:1/RoCE [3]mlx5_3:1/RoCE [4]mlx5_4:1/RoCE [5]mlx5_5:1/RoCE [6]mlx5_6:1/RoCE [7]mlx5_7:1/RoCE [8]mlx5_8:1/RoCE [9]mlx5_9:1/RoCE [RO]; OOB bond0:10.82.177.33<0>
[1,2]<stdout>:aiplatform-wlf2-ge78-70:102986:102997 [0] NCCL INFO Using network IB
[1,0]<stdout>:aiplatform-wlf2-ge78-72:58070:58081 [0] NCCL INFO ncclCommInitRank comm 0x55fa0e00e740 rank 0 nranks 4 cudaDev 0 nvmlDev 0 busId 19000 commId 0xd37e70d13f797e7e - Init START
"""


def test_mpirun_prefixed_nccl_lines(tmp_path: Path) -> None:
    events = _events(tmp_path, "mpirun.log", NCCL_MPIRUN)
    assert [e.host for e in events] == [
        "aiplatform-wlf2-ge78-70",
        "aiplatform-wlf2-ge78-70",
        "aiplatform-wlf2-ge78-72",
    ]
    assert events[0].raw.startswith("[1,2]<stdout>:")
    source = investigate([tmp_path / "mpirun.log"])["sources"][0]
    assert source["format"] == "nccl-log" and source["prefix"] == "mpirun"


# AER lines pasted bare (no timestamp, no `kernel:`), from https://github.com/larixer/hid-asus-dkms/issues/33.
AER_BARE = """pcieport 0000:00:1c.5: AER: Multiple Corrected error received: id=00e5
pcieport 0000:00:1c.5: can't find device of ID00e5
pcieport 0000:00:1c.5: PCIe Bus Error: severity=Corrected, type=Physical Layer, id=00e5(Receiver ID)
pcieport 0000:00:1c.5:   device [8086:9d15] error status/mask=00000001/00002000
pcieport 0000:00:1c.5:    [ 0] Receiver Error        
"""  # noqa: W291 (the last line ends in spaces, as the kernel printed it)


def test_bare_kernel_aer_lines(tmp_path: Path) -> None:
    assert detect_format(AER_BARE.splitlines()) == "kernel-log"
    events = _events(tmp_path, "aer.txt", AER_BARE)
    aer = [e for e in events if e.kind == "aer"]
    assert aer and aer[0].code == 0 and aer[0].component == "0000:00:1c.5"


# The same lines numbered as `cat -n` prints them are recognised once the numbers are removed.
def test_line_numbered_paste_is_read(tmp_path: Path) -> None:
    numbered = "".join(f"{i:6d}\t{line}\n" for i, line in enumerate(AER_BARE.splitlines(), start=1))
    result = _run(tmp_path, "numbered.txt", numbered)
    assert result["sources"][0]["format"] == "kernel-log" and result["sources"][0]["prefix"] == "numbered"


# /proc/driver/nvidia/params as read by nvidia-container-cli, from the `read()` of
# https://github.com/NVIDIA/nvidia-container-toolkit/issues/115 (its `\n` escapes are the file's newlines; the
# strace string is cut after DmaRemapPeerMmio, so the lines before it are used).
DRIVER_PARAMS = (
    "ResmanDebugLevel: 4294967295\nRmLogonRC: 1\nModifyDeviceFiles: 0\nDeviceFileUID: 0\nDeviceFileGID: 0\n"
    "DeviceFileMode: 438\nInitializeSystemMemoryAllocations: 1\nUsePageAttributeTable: 4294967295\nEnableMSI: 1\n"
    "EnablePCIeGen3: 0\nMemoryPoolSize: 0\nKMallocHeapMaxSize: 0\nVMallocHeapMaxSize: 0\nIgnoreMMIOCheck: 0\n"
    "TCEBypassMode: 0\nEnableStreamMemOPs: 0\nEnableUserNUMAManagement: 1\nNvLinkDisable: 0\n"
    "RmProfilingAdminOnly: 1\nPreserveVideoMemoryAllocations: 0\nEnableS0ixPowerManagement: 0\n"
    "S0ixPowerManagementVideoMemoryThreshold: 256\nDynamicPowerManagement: 3\n"
    "DynamicPowerManagementVideoMemoryThreshold: 200\nRegisterPCIDriver: 1\nEnablePCIERelaxedOrderingMode: 0\n"
    "EnableResizableBar: 0\nEnableGpuFirmware: 18\nEnableGpuFirmwareLogs: 2\nEnableDbgBreakpoint: 0\n"
    "OpenRmEnableUnsupportedGpus: 0\nDmaRemapPeerMmio: 1\n"
)


def test_driver_module_parameters(tmp_path: Path) -> None:
    result = _run(tmp_path, "params", DRIVER_PARAMS)
    source = result["sources"][0]
    assert source["format"] == "driver-params" and source["unknown"] == 0 and source["parsed"] == 32
    assert result["verdict"] == "healthy"


# `dmesg -H` relative stamps, from https://github.com/rwth-i6/returnn/issues/1500 (an excerpt of its dmesg).
DMESG_RELTIME = """[  +0.000844] nvidia 0000:03:00.0: AER: can't recover (no error_detected callback)
[  +0.000001] snd_hda_intel 0000:03:00.1: AER: can't recover (no error_detected callback)
[  +0.000008] pcieport 0000:00:03.0: AER: device recovery failed
[  +0.000001] pcieport 0000:00:03.0: AER: Multiple Uncorrected (Fatal) error received: 0000:00:03.0
[  +0.000004] pcieport 0000:00:03.0: PCIe Bus Error: severity=Uncorrected (Fatal), type=Transaction Layer, (Requester ID)
[  +0.000898] pcieport 0000:00:03.0:   device [8086:6f08] error status/mask=00004020/00000000
"""


def test_dmesg_relative_stamps_are_read(tmp_path: Path) -> None:
    events = _events(tmp_path, "dmesg-H.txt", DMESG_RELTIME)
    fatal = [e for e in events if e.kind == "aer" and e.code == 2]
    assert [e.line for e in fatal] == [4] and fatal[0].raw.startswith("[  +0.000001]")
    source = investigate([tmp_path / "dmesg-H.txt"])["sources"][0]
    assert source["format"] == "kernel-log" and source["prefix"] == "reltime"


# /proc/driver/nvidia/params of the H200 above (driver 580.159.04), read on the device machine, used as read.
def test_driver_module_parameters_of_a_real_h200() -> None:
    result = investigate([SAMPLES / "driver-params-h200.txt"])
    source = result["sources"][0]
    assert source["format"] == "driver-params" and source["lines"] == 42 and source["unknown"] == 0
