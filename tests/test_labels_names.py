"""Component names after real hosts (`gpu-a100-017/gpu3`) beside the twin's (`node3/gpu3`): their kinds, a
configured rack told from a bare host name by the topology, and every parser of names that meets them (the
chat's scope, Alertmanager's labels, the causal graph, the NVML actuator)."""

from __future__ import annotations

from typing import Any

import pytest

from aiops import causal
from aiops.agent.scope import components_in
from aiops.labels import (
    component_kind,
    gpu_name,
    host_component,
    host_name_error,
    local_index,
    nic_name,
    node_of,
    rack_name_error,
)
from aiops.service.alerts_in import component_of
from guardrails.actuators_nvml import NvmlPowerActuator
from guardrails.topology import Topology
from tests.guardrails_helpers import action as make_action


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("fleet", "fleet"),
        ("rack3", "rack"),
        ("node3", "node"),
        ("node3/gpu5", "gpu"),
        ("gpu-a100-017", "node"),
        ("gpu-a100-017/gpu3", "gpu"),
        ("gpu-a100-017/nic1", "nic"),
        ("gpu-a100-017/accel0", "accel"),
        ("gpu-a100-017.dc1.example/gpu3", "gpu"),
        ("job:llm", "job"),
        ("policy:r1", "policy"),
        ("GPU-A100-017", None),  # not lowercase: not a name the agent gives
        ("gpu_a100", None),
        ("-gpu", None),
        ("rack3/gpu1", None),  # a rack holds no GPU
        ("gpu-a100-017/gpu", None),
        ("node３", None),  # a full-width digit
        ("a" * 64, None),  # a label longer than 63
        ("", None),
    ],
)
def test_kinds_of_host_and_twin_names(name: str, kind: str | None) -> None:
    assert component_kind(name) == kind


def test_a_configured_rack_is_told_from_a_host_by_the_topology() -> None:
    assert component_kind("row-b") == "node"  # text alone: a bare name is a node
    assert component_kind("row-b", racks={"row-b"}) == "rack"
    assert node_of("row-b", racks={"row-b"}) is None and node_of("row-b") == "row-b"
    assert node_of("gpu-a100-017/gpu3") == "gpu-a100-017" and node_of("fleet") is None
    assert causal.is_facility("row-b", {"gpu-a100-017": "row-b"})
    assert not causal.is_facility("gpu-a100-017", {"gpu-a100-017": "row-b"})
    rack_of = {"gpu-a100-017": "row-b", "gpu-a100-018": "row-c"}
    assert causal.related("row-b", "gpu-a100-017/gpu3", rack_of)
    assert not causal.related("row-c", "gpu-a100-017/gpu3", rack_of)
    assert not causal.related("gpu-a100-018/gpu0", "gpu-a100-017/gpu3", rack_of)


def test_name_helpers_and_errors() -> None:
    assert gpu_name("gpu-a100-017", 3) == "gpu-a100-017/gpu3" and gpu_name(3, 5) == "node3/gpu5"
    assert nic_name("gpu-a100-017", 1) == "gpu-a100-017/nic1"
    assert local_index("gpu-a100-017/gpu3") == 3 and local_index("gpu-a100-017") is None
    assert host_component("GPU-A100-017.dc1.example") == "gpu-a100-017"
    assert host_component("10.0.0.7") is None and host_component("fe80::1") is None
    assert host_name_error("gpu-b200-a3") is None and host_name_error("node0") is None
    assert "lowercase" in (host_name_error("Gpu") or "") and "reserved" in (host_name_error("fleet") or "")
    assert rack_name_error("row-b-07") is None and rack_name_error("rack0") is None
    assert "reserved" in (rack_name_error("node1") or "") and "RFC 1123" in (rack_name_error("row.b") or "")


def test_the_chat_finds_names_its_topology_knows() -> None:
    known = frozenset({"gpu-a100-017", "gpu-a100-017/gpu3", "row-b"})
    question = "Why is GPU-A100-017/gpu3 hot, and is row-b fine? Compare node2 and gpu-a100-099."
    assert components_in(question, known=known) == ["gpu-a100-017/gpu3", "row-b", "node2"]
    assert components_in("is gpu-a100-017. ok?", known=known) == ["gpu-a100-017"]
    assert components_in(question) == ["node2"]  # unknown words are no components


def test_an_alert_about_a_real_host_names_it() -> None:
    labels = {"alertname": "GpuHot", "Hostname": "GPU-A100-017.dc1.example", "gpu": "3"}
    assert component_of(labels, {}) == "gpu-a100-017/gpu3"
    assert component_of({"instance": "gpu-a100-017:9100"}, {}) == "gpu-a100-017"
    assert component_of({"instance": "10.0.0.7:9100"}, {}) is None  # an address names no host
    assert component_of({"instance": "10.0.0.7:9100"}, {"10.0.0.7": "gpu-b"}) == "gpu-b"
    assert component_of({"component": "gpu-a100-017/nic1"}, {}) == "gpu-a100-017/nic1"
    known = {"gpu-a100-017", "gpu-a100-017/gpu3"}
    assert component_of({"Hostname": "gpu-a100-018", "gpu": "0"}, {}, known) is None


class _Nvml:
    """NVML's power calls for 2 GPUs of one host (the shapes of nvidia-ml-py)."""

    def __init__(self) -> None:
        self.limit_mw = [700_000, 700_000]

    def nvmlInit(self) -> None:
        pass

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
        return self.limit_mw[handle]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: int) -> int:
        return 700_000

    def nvmlDeviceSetPowerManagementLimit(self, handle: int, limit: int) -> None:
        self.limit_mw[handle] = limit


def test_the_nvml_actuator_asks_by_the_host_name_and_the_gpus_local_index() -> None:
    topology = Topology(
        {"row-b": ("gpu-a100-017",)},
        {"gpu-a100-017": ("gpu-a100-017/gpu0", "gpu-a100-017/gpu1")},
        {"gpu-a100-017": ()},
    )
    nvml, asked = _Nvml(), []

    def nvml_for(name: str) -> Any:
        asked.append(name)
        return nvml

    actuator = NvmlPowerActuator(nvml_for, topology)
    action = make_action(target="gpu-a100-017/gpu1", parameters={"power_limit_w": 500})
    assert actuator.apply(action, False).ok
    assert nvml.limit_mw == [700_000, 500_000] and set(asked) == {"gpu-a100-017"}
    assert actuator.apply(
        make_action(target="row-b", parameters={"power_limit_w": 600}),
        False,
    ).ok
    assert nvml.limit_mw == [600_000, 600_000]
