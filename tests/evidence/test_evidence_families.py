"""Issue 37, Build item 2: a test per format family, each on verbatim real output: the development cases of
evals/real (case.yaml names each source) and tests/evidence_samples/v3 (its README names each source). The
sealed evals/real/holdout is never read here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiops.evidence import investigate
from aiops.evidence.events import LogEvent

ROOT = Path(__file__).resolve().parents[2]
REAL = ROOT / "evals" / "real"
SAMPLES = ROOT / "tests" / "evidence_samples" / "v3"


def _run(*paths: Path) -> tuple[dict[str, Any], list[LogEvent]]:
    events: list[LogEvent] = []
    return investigate(list(paths), sink=events.append), events


def _kinds(events: list[LogEvent], kind: str) -> list[LogEvent]:
    return [e for e in events if e.kind == kind]


def _top(result: dict[str, Any]) -> tuple[str, float]:
    top = result["hypotheses"][0]
    return top["root_cause"], top["confidence"]


def test_dcgm_diag_tables_from_any_section_and_json() -> None:
    # a DCGM 3.x table captured from its Hardware section header on (NVIDIA/go-dcgm#52)
    result, events = _run(REAL / "dcgm-diag-gpu0-busy-unavailable-fail-unresolved-2023" / "dcgmi-diag.txt")
    assert result["sources"][0]["format"] == "dcgmi"
    fails = [(e.detail["test"], e.component) for e in _kinds(events, "dcgm_diag") if e.code == 1]
    assert ("GPU Memory", "GPU0") in fails and result["verdict"] == "inconclusive"
    # a PCIe failure whose warnings are NVLink links down, on a board without NVLink (NVIDIA/DCGM#49)
    result, _ = _run(REAL / "dcgm-diag-pcie-fail-nvlink-down-no-nvlink-a100-2022" / "dcgmi-diag.txt")
    label, confidence = _top(result)
    assert (label, confidence) == ("nvlink_degraded", 0.4) and result["verdict"] == "inconclusive"
    assert "without NVLink" in result["hypotheses"][0]["summary"]
    # `dcgmi diag -j`: every test skipped ran nothing: no failure, and no positive reading (NVIDIA/DCGM#139)
    result, events = _run(SAMPLES / "dcgmi-diag-j-t400.json")
    diag = _kinds(events, "dcgm_diag")
    assert [e.detail["test"] for e in diag] == [
        "PCIe",
        "GPU Memory",
        "Diagnostic",
        "EUD Test",
        "Targeted Stress",
    ]
    assert {e.code for e in diag} == {3} and {e.component for e in diag} == {"GPU0"}
    assert result["verdict"] == "inconclusive" and not result["findings"]


def test_slurm_logs_states_reasons_and_nhc() -> None:
    result, events = _run(REAL / "slurmctld-gres-count-changed-mig-reconfig-2024" / "slurmctld.log")
    source = result["sources"][0]
    assert source["format"] == "slurm" and source["prefix"] == "syslog+tag"
    low = _kinds(events, "gres_count_low")
    assert [(e.detail["found"], e.detail["configured"]) for e in low] == [("3", "4")]
    assert "Count changed" in _kinds(events, "slurm_reason")[0].detail["reason"]
    assert low[0].host == "mgmt1.int.p2-ecole.calculquebec.cloud"  # the syslog prefix's host, kept
    assert result["verdict"] == "inconclusive" and result["hypotheses"] == []  # a count, not a GPU fault
    result, events = _run(SAMPLES / "sinfo-arjuna.txt")
    bad = {e.detail["state"] for e in _kinds(events, "slurm_node_state") if e.code == 1}
    assert bad == {"drng@", "fail*", "maint"} and result["verdict"] == "inconclusive"
    assert _run(SAMPLES / "scontrol-grep-gres.txt")[0]["verdict"] == "healthy"
    _, events = _run(SAMPLES / "nhc-gpu-count.txt")
    assert [e.detail["check"] for e in _kinds(events, "nhc_check_failed")] == [
        "Check check_nv_gpu_count 2 returned 1"
    ]
    case = REAL / "slurm-kill-task-failed-pyxis-permission-2024"
    result, events = _run(case / "sinfo-R.txt", case / "slurmd.log")
    assert [e.detail["reason"] for e in _kinds(events, "slurm_reason")] == ["Kill task failed"]
    result, _ = _run(REAL / "slurmstepd-nvml-gpu-is-lost-titan-rtx-2024" / "slurm-job.err")
    assert _top(result) == ("gpu_fell_off_bus", 0.75)  # NVML_ERROR_GPU_IS_LOST, in slurmstepd's words


def test_ipmi_sel_and_sensors() -> None:
    result, events = _run(REAL / "ipmitool-sel-processor-ierr-hmi-injection-2016" / "ipmitool-sel.txt")
    assert [f["rows"][0].split("|")[3].strip() for f in result["findings"]] == ["Processor #0xc9"]
    assert result["verdict"] == "inconclusive"
    result, events = _run(SAMPLES / "ipmi-sensors-netdata.txt")
    sensors = _kinds(events, "ipmi_sensor")
    assert result["sources"][0]["format"] == "ipmi-sensors" and len(sensors) == 15
    assert result["verdict"] == "healthy"  # presence, batteries OK, readings: nothing past a threshold


def test_infiniband_and_rdma_tools() -> None:
    result, events = _run(REAL / "ibstat-partial-ibpanic-device-missing-unresolved-2025" / "ibstat.txt")
    assert result["sources"][0]["format"] == "ib" and _kinds(events, "failure_line")[0].line == 20
    result, events = _run(REAL / "healthy-ib-sysfs-state-active-linkup-edr-2026" / "ib-sysfs.txt")
    states = [(e.component, e.detail["physical"]) for e in _kinds(events, "ib_port_state")]
    assert states == [("mlx5_0:1", "linkup"), ("mlx5_1:1", "linkup")] and result["verdict"] == "healthy"
    case = REAL / "roce-hw-counters-ack-timeout-cnp-byteps-unresolved-2019"
    result, events = _run(case / "hw_counters.txt")
    assert [(e.detail["counter"], e.value) for e in _kinds(events, "error_counter")] == [
        ("local_ack_timeout_err", 2705.0)
    ]
    assert [e.detail["counter"] for e in _kinds(events, "congestion_counter")] == ["np_cnp_sent"]
    result, events = _run(
        REAL / "ib-sysfs-counters-saturated-link-downed-unresolved-2025" / "ib-counters.txt"
    )
    counted = {e.detail["counter"]: e.value for e in _kinds(events, "error_counter")}
    assert counted["link_downed"] == 255 and counted["port_xmit_discards"] == 65535
    assert result["sources"][0]["format"] == "generic" and result["verdict"] == "inconclusive"
    _, events = _run(SAMPLES / "ibdev2netdev-sriov-vf.txt")
    assert [(e.component, e.detail["netdev"]) for e in _kinds(events, "netdev_down")] == [
        ("mlx5_3:1", "net1")
    ]


def test_ethtool_mlx5_counters_with_and_without_header() -> None:
    result, _ = _run(REAL / "healthy-ethtool-mlx5-connectx4-counters-2018" / "ethtool-S.txt")
    assert result["sources"][0]["format"] == "ethtool-stats" and result["verdict"] == "healthy"
    result, events = _run(
        REAL / "roce-hw-counters-ack-timeout-cnp-byteps-unresolved-2019" / "ethtool-prio.txt"
    )
    assert result["sources"][0]["format"] == "ethtool-stats"  # `| grep prio`: no "NIC statistics:" header
    assert len(_kinds(events, "nic_counter")) == 32 and result["verdict"] == "healthy"


def test_fabric_manager_and_nvlsm() -> None:
    result, _ = _run(REAL / "fabricmanager-ib-umad-not-loaded-hgx-b200-2026" / "fabricmanager-start.log")
    assert _top(result) == ("gpu_driver_firmware_fault", 0.65) and result["verdict"] == "diagnosed"
    result, events = _run(REAL / "fabricmanager-nothing-to-do-rtx4090-no-nvswitch-2025" / "fabricmanager.log")
    assert result["hypotheses"] == [] and _kinds(events, "fm_error")  # no NVSwitch found: maybe not an HGX
    result, events = _run(SAMPLES / "nvlsm-talos-b200.txt")
    source = result["sources"][0]
    assert source["format"] == "fabric-manager" and set(source["prefix"].split("+")) == {"host", "iso"}
    assert len(_kinds(events, "fm_system")) == 4 and {e.host for e in events} == {"10.10.10.10"}
    assert result["verdict"] == "inconclusive" and not result["findings"]  # a log, and nothing failed


def test_nvidia_smi_output_modes() -> None:
    result, events = _run(REAL / "nvidia-smi-err-every-field-ci-runner-unresolved-2023" / "nvidia-smi.txt")
    assert result["sources"][0]["format"] == "nvidia-smi" and _kinds(events, "nvsmi_error")
    result, events = _run(
        REAL / "nvsmi-q-d-perf-temp-81c-no-active-reason-ollama-2026" / "nvidia-smi-q-d.txt"
    )
    slowed = [e.detail["key"] for e in _kinds(events, "throttle_counter") if e.code == 1]
    assert slowed == ["SW Thermal Slowdown"] and result["verdict"] == "inconclusive"
    result, _ = _run(
        REAL / "healthy-nvsmi-q-excerpt-no-header-rtx2080ti-nvml-container-2022" / "nvidia-smi-q.txt"
    )
    assert result["sources"][0]["format"] == "nvidia-smi-q" and result["verdict"] == "healthy"
    result, events = _run(SAMPLES / "nvidia-smi-L-one-lost.txt")
    assert [e.code for e in _kinds(events, "gpu_header")] == [1, 2, 3]
    assert _top(result) == ("gpu_fell_off_bus", 0.45) and result["verdict"] == "inconclusive"


def test_nccl_ras_reports() -> None:
    """NCCL RAS client output (the inspector plugin's JSON has no public sample here: the generic reader
    reads it as text)."""
    result, events = _run(REAL / "nccl-ras-allgather-count-mismatch-unresolved-2025" / "ncclras.txt")
    assert result["sources"][0]["format"] == "nccl-ras"
    assert [e.detail["errors"] for e in _kinds(events, "ras_group")] == ["MISMATCH"]
    assert {e.host for e in _kinds(events, "ras_rank")} == {"10.137.190.124"}
    case = REAL / "nccl-ras-ok-but-watchdog-timeout-256-ranks-2025"
    result, events = _run(case / "ncclras.txt", case / "pytorch.log")
    assert [e.code for e in _kinds(events, "ras_group")] == [0]  # the report said OK ...
    assert result["verdict"] == "inconclusive"  # ... the watchdog line still keeps it from healthy
    assert {f["title"] for f in result["findings"]} >= {"nccl_watchdog_timeout"}


def test_gpu_agents_device_plugin_and_driver_container() -> None:
    case = REAL / "device-plugin-too-old-for-healthcheck-gtx760-2018"
    result, events = _run(case / "device-plugin.log", case / "nvidia-smi.txt")
    unhealthy = _kinds(events, "gpu_unhealthy")
    assert unhealthy[0].detail["why"] == "too old for health checks" and result["hypotheses"] == []
    result, events = _run(SAMPLES / "driver-container-unload.txt")
    assert [e.line for e in _kinds(events, "failure_line")] == [5, 8] and result["verdict"] == "inconclusive"


def test_kubernetes_events_conditions_and_taints() -> None:
    result, events = _run(
        REAL / "k8s-events-admission-error-vgpu-plugin-transport-closing-2022" / "kubectl-events.txt"
    )
    assert result["sources"][0]["format"] == "k8s"
    assert [e.detail["reason"] for e in _kinds(events, "k8s_event") if e.code == 1] == [
        "FailedScheduling",
        "FailedScheduling",
        "FailedScheduling",
        "UnexpectedAdmissionError",
        "FailedMount",
    ]
    case = REAL / "k8s-allocate-failed-nvml-gpu-is-lost-4-gpu-node-2021"
    result, _ = _run(case / "pod-event.txt", case / "nvidia-smi.txt")
    assert _top(result) == ("gpu_fell_off_bus", 0.75)
    result, events = _run(SAMPLES / "k8s-describe-node-gpu-taint.txt")
    assert not _kinds(events, "k8s_taint") and result["verdict"] == "healthy"  # a GPU taint is on purpose
    result, events = _run(SAMPLES / "k8s-describe-node-unreachable.txt")
    assert len(_kinds(events, "k8s_taint")) == 2 and result["verdict"] == "inconclusive"


def test_a_health_checkers_xid_condition_is_read_as_its_xids(tmp_path: Path) -> None:
    """GKE's `XidCriticalError` node condition, its reason the Xids seen (`{"31":true}`): a row of `kubectl describe
    node` alone, the condition as YAML, and the row under its `Conditions:` table, each read as Xid 31 (an
    application's fault alone, so a lean, not a verdict), never "no abnormal line"."""
    case = REAL / "unseen4-2026-12-06" / "gke-xid-critical-error-condition-xid31-demo-p100-2025"
    row = (case / "kubectl-describe-node.txt").read_text(encoding="utf-8")
    described = tmp_path / "describe-node.txt"  # the real row under the table kubectl prints it in
    described.write_text(
        "Name:               gke-p100-node\nConditions:\n"
        "  Type                 Status  LastHeartbeatTime                 LastTransitionTime                "
        "Reason                       Message\n" + row,
        encoding="utf-8",
    )
    for path in (case / "kubectl-describe-node.txt", case / "node-condition.yaml", described):
        result, events = _run(path)
        assert [(e.code, e.detail["xids"]) for e in _kinds(events, "xid")] == [(31, "31")], path.name
        assert result["verdict"] == "inconclusive" and _top(result) == ("application_error", 0.5), path.name


def test_lspci_config_space_lost_joined_with_nvidia_smi() -> None:
    case = REAL / "lspci-rev-ff-nvsmi-device-handle-quadro-slurm-2023"
    result, _ = _run(case / "lspci.txt", case / "nvidia-smi.txt")
    top = result["hypotheses"][0]
    assert (top["root_cause"], top["component"], top["confidence"]) == (
        "gpu_fell_off_bus",
        "this host/gpu@0000:1c:00.0",
        0.85,
    )
    cited = {source.split(":")[0] for ev in top["evidence"] for source in ev["sources"]}
    assert cited == {"lspci.txt", "nvidia-smi.txt"}  # the join of both files
    alone, _ = _run(case / "lspci.txt")
    assert _top(alone) == ("gpu_fell_off_bus", 0.5)  # rev ff alone: lost, or powered down
    result, events = _run(SAMPLES / "lspci-vv-header-7f-bridge.txt")
    assert [e.component for e in _kinds(events, "pci_config_lost")] == ["0000:01:00.0"]
    assert result["hypotheses"] == []  # a switch port, no GPU


def test_dmesg_wall_clock_indented_and_gsp_lines() -> None:
    case = REAL / "gsp-alloc-failed-reset-required-dmesg-wall-nccltest-2026"
    result, events = _run(case / "dmesg.txt")
    source = result["sources"][0]
    assert source["format"] == "kernel-log" and source["prefix"] == "wall"
    assert [e.detail["time"] for e in _kinds(events, "gsp_error")] == ["Sun Jan 11 09:52:01 2026"]
    assert _top(result) == ("gpu_driver_firmware_fault", 0.75)
    result, _ = _run(REAL / "gsp-rpc-history-dump-gpu6-boot-timeout-2026" / "dmesg.txt")
    assert _top(result)[0] == "gpu_driver_firmware_fault" and result["hypotheses"][0]["component"].endswith(
        "gpu6"
    )


def test_generic_fallback_reads_no_failure_into_names() -> None:
    """The generic classifier reads the lines a parser leaves as fields: a section named `ECC Errors`, an
    `N/A` value under it, `Pending : N/A` are names and readings, not failures (a healthy -q stays healthy)."""
    result, _ = _run(SAMPLES / "nvidia-smi-q-ecc-sections-ros.txt")
    assert result["sources"][0]["format"] == "nvidia-smi-q"
    assert result["verdict"] == "healthy" and not result["findings"]


def test_a_failure_word_in_a_name_is_no_failure() -> None:
    """The classifier's own rule (generic.is_failure), on the shapes it decides between: a key whose value says
    nothing is wrong, a heading, a count of zero; and the lines that do say something failed."""
    from aiops.evidence.generic import is_failure

    for fine in (
        "Remapping Failure Occurred : No",
        "Last Error: None",
        "    ECC Errors",
        "errors: 0",
        "0 errors",
    ):
        assert not is_failure(fine), fine
    for failed in ("error: cannot open", "Kill task failed", "status=1/FAILURE", "Timeouts: many lost"):
        assert is_failure(failed), failed
