"""Actuator backends: the NVML power limit actuator (fakes shaped like pynvml, and the simulator's own NVML),
the sysfs powercap and cooling-device actuators (fixture trees under tmp_path), and the executor's rollback
when a read-back disagrees. Each refuses values outside its constraints with nothing changed, verifies by
reading back, and restores what it had changed when anything fails."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pynvml
import pytest

from aiops.errors import SysfsError
from aiops.sim import World, gpu
from aiops.store import Store
from guardrails import ApprovalBook, AuditLog, Executor, Topology, verify
from guardrails.actions import Action
from guardrails.actuators import ActuationResult
from guardrails.actuators_nvml import NvmlPowerActuator
from guardrails.actuators_sysfs import CoolingActuator, PowercapActuator, SysfsFiles
from tests.guardrails_helpers import NOW_TS_S, TOPOLOGY, action, context
from tests.simkit import scenario

SMALL = Topology.grid(racks=1, nodes_per_rack=2, gpus_per_node=4, nics_per_node=1)


# -- a pynvml-shaped fake -------------------------------------------------------------------------------------
class PowerNvml:
    """Power-limit calls of one node's NVML, in mW as nvml.h. `silent` GPU indices ignore a set without an
    error (what a caller sees when the driver's refusal is dropped); `refuse` raise an NVMLError instead."""

    NVMLError = pynvml.NVMLError

    def __init__(self, node: int, gpus: int = 4, limit_mw: int = 700_000) -> None:
        self.node = node
        self.limit_mw = {i: limit_mw for i in range(gpus)}
        self.constraints_mw = {i: (200_000, 700_000) for i in range(gpus)}
        self.silent: set[int] = set()
        self.refuse: dict[int, int] = {}  # GPU index -> NVML error code
        self.round_to_w: set[int] = set()  # these GPUs keep whole watts
        self.sets: list[tuple[int, int]] = []
        self.initialised = False

    def nvmlInit(self) -> None:
        self.initialised = True

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        assert self.initialised
        if index not in self.limit_mw:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return index

    def nvmlDeviceGetPowerManagementLimit(self, handle: int) -> int:
        return self.limit_mw[handle]

    def nvmlDeviceGetPowerManagementDefaultLimit(self, handle: int) -> int:
        return 700_000

    def nvmlDeviceGetPowerManagementLimitConstraints(self, handle: int) -> list[int]:
        return list(self.constraints_mw[handle])

    def nvmlDeviceSetPowerManagementLimit(self, handle: int, limit: int) -> None:
        self.sets.append((handle, limit))
        if handle in self.refuse:
            raise pynvml.NVMLError(self.refuse[handle])
        if handle in self.silent:
            return
        self.limit_mw[handle] = limit // 1000 * 1000 if handle in self.round_to_w else limit


def fleet(nodes: int = 2, limit_mw: int = 700_000) -> dict[int, PowerNvml]:
    return {n: PowerNvml(n, limit_mw=limit_mw) for n in range(nodes)}


def by_name(nvml: Mapping[int, Any] | Callable[[int], Any]) -> Callable[[str], Any]:
    """The twin's node{n} name -> its NVML (the actuator asks by a node's name)."""
    if callable(nvml):
        return lambda name: nvml(int(name.removeprefix("node")))
    return lambda name: nvml[int(name.removeprefix("node"))]


def power(target: str = "node1", **parameters: Any) -> Action:
    kind = "reset_power_limit" if not parameters else "set_power_limit"
    return action(kind=kind, target=target, parameters=parameters)


def limits(nvml: PowerNvml) -> list[int]:
    return [nvml.limit_mw[i] for i in sorted(nvml.limit_mw)]


# -- NVML -----------------------------------------------------------------------------------------------------
def test_nvml_sets_every_gpu_of_the_target_and_verifies_by_reading_back() -> None:
    nodes = fleet()
    actuator = NvmlPowerActuator(by_name(nodes), SMALL)
    a = power("node1", power_limit_w=500)
    result = actuator.apply(a, dry_run=False)
    assert result.ok, result.error
    assert limits(nodes[1]) == [500_000] * 4 and limits(nodes[0]) == [700_000] * 4
    assert result.previous == {"power_limit_w": {f"node1/gpu{g}": 700.0 for g in range(4)}}
    assert result.expected == {"power_limit_w": {f"node1/gpu{g}": 500.0 for g in range(4)}}
    assert actuator.read_back(a) == result.expected
    assert nodes[1].initialised and not nodes[0].initialised  # only the nodes it touched


def test_nvml_fraction_of_tdp_and_reset_use_the_default_limit() -> None:
    nodes = fleet()
    actuator = NvmlPowerActuator(by_name(nodes), SMALL)
    assert actuator.apply(power("node0/gpu2", fraction_of_tdp=0.8), dry_run=False).ok
    assert nodes[0].limit_mw[2] == 560_000
    assert actuator.apply(power("node0/gpu2"), dry_run=False).ok  # reset_power_limit
    assert nodes[0].limit_mw[2] == 700_000


def test_nvml_refuses_a_value_outside_one_gpus_constraints_and_changes_no_gpu() -> None:
    nodes = fleet()
    nodes[1].constraints_mw[3] = (200_000, 450_000)
    result = NvmlPowerActuator(by_name(nodes), SMALL).apply(power("rack0", power_limit_w=500), False)
    assert not result.ok
    assert "node1/gpu3" in result.error and "500 W" in result.error and "[200, 450] W" in result.error
    assert "nothing changed" in result.error
    assert nodes[0].sets == [] and nodes[1].sets == []  # refused before any GPU was touched


def test_nvml_a_set_the_driver_silently_ignored_is_caught_and_the_others_restored() -> None:
    nodes = fleet(limit_mw=650_000)
    nodes[1].silent.add(2)
    result = NvmlPowerActuator(by_name(nodes), SMALL).apply(power("node1", power_limit_w=600), False)
    assert not result.ok
    assert "node1/gpu2" in result.error and "driver reports 650 W" in result.error
    assert result.detail["restored"] == ["node1/gpu0", "node1/gpu1"]
    assert limits(nodes[1]) == [650_000] * 4  # nothing left half-applied
    assert (3, 600_000) not in nodes[1].sets  # stopped at the first mismatch


def test_nvml_error_on_the_third_gpu_restores_the_first_two() -> None:
    nodes = fleet()
    nodes[1].refuse[2] = pynvml.NVML_ERROR_NO_PERMISSION
    result = NvmlPowerActuator(by_name(nodes), SMALL).apply(power("node1", power_limit_w=600), False)
    assert not result.ok
    assert "node1/gpu2" in result.error and "NVMLError_NoPermission (code 4)" in result.error
    assert result.detail["restored"] == ["node1/gpu0", "node1/gpu1"]
    assert result.detail["rollback_errors"] == []
    assert limits(nodes[1]) == [700_000] * 4
    assert nodes[1].sets[-2:] == [(0, 700_000), (1, 700_000)]  # the restores, read back


def test_nvml_a_failed_rollback_is_reported_not_hidden() -> None:
    nodes = fleet()
    nodes[1].silent.add(1)
    actuator = NvmlPowerActuator(by_name(nodes), SMALL)
    original = nodes[1].nvmlDeviceSetPowerManagementLimit
    calls = {"n": 0}

    def flaky(handle: int, limit: int) -> None:  # the first GPU accepts the cap, then refuses its restore
        calls["n"] += 1
        if handle == 0 and calls["n"] > 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        original(handle, limit)

    nodes[1].nvmlDeviceSetPowerManagementLimit = flaky  # type: ignore[method-assign]
    result = actuator.apply(power("node1", power_limit_w=600), False)
    assert not result.ok and "ROLLBACK FAILED" in result.error and "NVMLError_GpuIsLost" in result.error
    assert result.detail["rollback_errors"][0].startswith("node1/gpu0")


def test_nvml_dry_run_validates_and_reports_but_touches_nothing() -> None:
    nodes = fleet()
    nodes[1].limit_mw[0] = 500_000
    actuator = NvmlPowerActuator(by_name(nodes), SMALL)
    preview = actuator.apply(power("node1", power_limit_w=500), dry_run=True)
    assert preview.ok and preview.detail["dry_run"] is True and preview.detail["changes"] == 3
    assert preview.detail["power_limit_w"] == {f"node1/gpu{g}": 500.0 for g in range(4)}
    refused = actuator.apply(power("node1", power_limit_w=150), dry_run=True)
    assert not refused.ok and "[200, 700] W" in refused.error
    assert nodes[1].sets == [] and limits(nodes[1]) == [500_000, 700_000, 700_000, 700_000]


def test_nvml_rollback_restores_the_previous_limits_and_reads_them_back() -> None:
    nodes = fleet()
    actuator = NvmlPowerActuator(by_name(nodes), SMALL)
    a = power("node0", power_limit_w=600)
    result = actuator.apply(a, False)
    assert limits(nodes[0]) == [600_000] * 4
    undo = actuator.rollback(a, result.previous)
    assert undo.ok and limits(nodes[0]) == [700_000] * 4
    nodes[0].silent.add(3)
    actuator.apply(a, False)  # fails on gpu3 and restores itself
    nodes[0].limit_mw[1] = 600_000  # someone capped gpu1 meanwhile; gpu3 now ignores sets
    nodes[0].limit_mw[3] = 600_000
    undo = actuator.rollback(a, result.previous)
    assert not undo.ok and "node0/gpu3" in undo.error and "node0/gpu1" not in undo.error
    assert nodes[0].limit_mw[1] == 700_000


def test_nvml_tolerance_accepts_a_driver_that_keeps_whole_watts_and_expects_what_it_reports() -> None:
    nodes = fleet()
    nodes[0].round_to_w.add(1)
    a = power("node0/gpu1", power_limit_w=512.4)
    result = NvmlPowerActuator(by_name(nodes), SMALL).apply(a, False)  # default tolerance 1 W
    assert result.ok and result.expected == {"power_limit_w": {"node0/gpu1": 512.0}}
    strict = NvmlPowerActuator(by_name(nodes), SMALL, tolerance_mw=0)
    refused = strict.apply(power("node0/gpu1", power_limit_w=512.6), False)
    assert not refused.ok and "tolerance 0 W" in refused.error
    assert nodes[0].limit_mw[1] == 512_000  # back to what it was before this action


def test_nvml_target_without_gpus_and_unknown_kind() -> None:
    actuator = NvmlPowerActuator(by_name(fleet()), SMALL)
    assert "no GPUs in node0/nic0" in actuator.apply(power("node0/nic0", power_limit_w=500), False).error
    drain = action(kind="drain_node", target="node0", parameters={})
    assert "no action drain_node" in actuator.apply(drain, False).error
    nan = actuator.apply(power("node0", power_limit_w=float("nan")), True)
    assert not nan.ok and "finite power limit" in nan.error


# -- the simulator's NVML: the same actuator code --------------------------------------------------------------
def sim_topology() -> Topology:
    return Topology.grid(racks=2, nodes_per_rack=2, gpus_per_node=4, nics_per_node=2)


def test_nvml_actuator_drives_the_simulator_through_its_nvml() -> None:
    world = World(scenario())
    actuator = NvmlPowerActuator(by_name(world.nvml), sim_topology(), tolerance_mw=0)
    a = power("node1", power_limit_w=500)
    result = actuator.apply(a, False)
    assert result.ok, result.error
    assert [float(w) for w in world.power_limit_w[4:8]] == [500.0] * 4
    assert float(world.power_limit_w[0]) == 700.0
    assert actuator.read_back(a) == result.expected
    over = actuator.apply(power("node1", power_limit_w=750), False)  # SimNvml constraints: [200, 700] W
    assert not over.ok and "node1/gpu0" in over.error and "[200, 700] W" in over.error
    assert [float(w) for w in world.power_limit_w[4:8]] == [500.0] * 4
    assert actuator.rollback(a, result.previous).ok
    assert [float(w) for w in world.power_limit_w[4:8]] == [700.0] * 4


def test_a_gpu_lost_in_the_simulator_refuses_the_action_before_any_gpu_changes() -> None:
    world = World(scenario([{"kind": "gpu_fell_off_bus", "target": "node1/gpu2", "start_s": 1}]))
    actuator = NvmlPowerActuator(by_name(world.nvml), sim_topology())
    a = power("node1", power_limit_w=600)
    preview = actuator.apply(a, True)
    assert preview.ok  # before the fault every GPU answers
    world.step(1.0)
    world.step(1.0)
    result = actuator.apply(a, False)  # NVML blocks node-wide while the driver handles the loss
    assert not result.ok and "node1/gpu0" in result.error and "NVMLError_Timeout" in result.error
    assert [float(world.power_limit_w[4 + g]) for g in range(4)] == [700.0] * 4  # reading failed: nothing set
    while world.elapsed_s < 1 + gpu.NVML_NODE_HANG_S:
        world.step(1.0)
    result = actuator.apply(a, False)
    assert not result.ok and "node1/gpu2" in result.error and "NVMLError_GpuIsLost" in result.error
    assert [float(world.power_limit_w[4 + g]) for g in range(4)] == [700.0] * 4


# -- the executor: a read-back that disagrees is rolled back and audited ----------------------------------------
class _Overridden(NvmlPowerActuator):
    """After a successful apply another tool (nvidia-smi -pl, a DCIM agent) moves one GPU's limit."""

    def __init__(self, nodes: dict[int, PowerNvml]) -> None:
        super().__init__(by_name(nodes), TOPOLOGY)
        self.nodes = nodes

    def apply(self, action: Action, dry_run: bool) -> ActuationResult:
        result = super().apply(action, dry_run)
        if not dry_run:
            self.nodes[3].limit_mw[5] = 450_000
        return result


def test_executor_rolls_back_and_audits_when_verification_fails(store: Store) -> None:
    nodes = {n: PowerNvml(n, gpus=8) for n in range(8)}
    executor = Executor(_Overridden(nodes), ApprovalBook(TOPOLOGY), AuditLog(store))
    a = action(target="node3", parameters={"power_limit_w": 600})
    executor.book.approve(a, "alice", NOW_TS_S - 30)
    outcome = executor.execute(a, context())
    assert outcome.status == "failed" and outcome.rule == "verification" and outcome.verified is False
    assert "rolled back" in outcome.message
    assert [nodes[3].limit_mw[g] for g in range(8)] == [700_000] * 8
    events = [r.event for r in executor.audit.rows()]
    assert events == ["execution", "verification", "rollback"]
    rollback = executor.audit.rows()[-1].data()
    assert rollback["ok"] is True and rollback["observed"]["power_limit_w"]["node3/gpu5"] == 450.0
    assert rollback["expected"]["power_limit_w"]["node3/gpu5"] == 600.0
    assert rollback["restored"]["power_limit_w"]["node3/gpu5"] == 700.0
    done = executor.ledger.execution("P-1")
    assert done is not None and done["status"] == "failed" and done["result"]["rollback"]["ok"] is True
    assert executor.execute(a, context()).status == "already_executed"  # never retried under the same id
    assert executor.unsafe_actions == 0 and verify(store).ok


def test_executor_verified_path_does_not_roll_back(store: Store) -> None:
    nodes = {n: PowerNvml(n, gpus=8) for n in range(8)}
    executor = Executor(NvmlPowerActuator(by_name(nodes), TOPOLOGY), ApprovalBook(TOPOLOGY), AuditLog(store))
    a = action(parameters={"power_limit_w": 600})
    executor.book.approve(a, "alice", NOW_TS_S - 30)
    outcome = executor.execute(a, context())
    assert outcome.ran and outcome.verified is True
    assert nodes[3].limit_mw[5] == 600_000
    assert "rollback" not in [r.event for r in executor.audit.rows()]


# -- sysfs fixture trees --------------------------------------------------------------------------------------
def cooling_tree(root: Path, devices: list[tuple[str, int, int]]) -> Path:
    """class/thermal/cooling_deviceN/{type,cur_state,max_state} for each (type, cur_state, max_state)."""
    for i, (device_type, cur, top) in enumerate(devices):
        d = root / "class" / "thermal" / f"cooling_device{i}"
        d.mkdir(parents=True)
        (d / "type").write_text(device_type + "\n")
        (d / "cur_state").write_text(f"{cur}\n")
        (d / "max_state").write_text(f"{top}\n")
    return root


def state(root: Path, device: int) -> int:
    return int((root / "class" / "thermal" / f"cooling_device{device}" / "cur_state").read_text())


DEVICES = [("Fan", 2, 10), ("Processor", 0, 3), ("intel_powerclamp", 0, 50), ("Fan", 1, 5)]


def cooling(fraction: float, target: str = "node0") -> Action:
    return action(kind="set_cooling_state", target=target, parameters={"cooling_fraction": fraction})


def test_cooling_sets_fans_only_by_default_and_reads_back(tmp_path: Path) -> None:
    root = cooling_tree(tmp_path / "n0", DEVICES)
    actuator = CoolingActuator({"node0": root}, SMALL)
    a = cooling(0.7)
    result = actuator.apply(a, dry_run=False)
    assert result.ok, result.error
    assert [state(root, i) for i in range(4)] == [7, 0, 0, 4]  # 0.7 × 5 = 3.5 rounds half up to 4
    assert result.previous == {"cooling_state": {"node0/cooling_device0": 2, "node0/cooling_device3": 1}}
    assert (
        actuator.read_back(a)
        == result.expected
        == {"cooling_state": {"node0/cooling_device0": 7, "node0/cooling_device3": 4}}
    )
    assert actuator.rollback(a, result.previous).ok
    assert [state(root, i) for i in range(4)] == [2, 0, 0, 1]


def test_cooling_a_rack_spans_its_nodes_and_a_type_filter_selects_devices(tmp_path: Path) -> None:
    roots = {f"node{n}": cooling_tree(tmp_path / f"n{n}", DEVICES) for n in range(2)}
    result = CoolingActuator(roots, SMALL, types=["Processor"]).apply(cooling(1.0, "rack0"), False)
    assert result.ok and set(result.expected["cooling_state"]) == {
        "node0/cooling_device1",
        "node1/cooling_device1",
    }
    assert [state(roots["node1"], i) for i in range(4)] == [2, 3, 0, 1]


def test_cooling_refuses_a_state_outside_zero_to_max_state_and_changes_nothing(tmp_path: Path) -> None:
    root = cooling_tree(tmp_path, DEVICES)
    result = CoolingActuator({"node0": root}, SMALL).apply(cooling(1.2), False)
    assert not result.ok
    assert "cooling_device0/cur_state" in result.error and "state 12" in result.error
    assert "[0, 10]" in result.error and "nothing changed" in result.error
    assert [state(root, i) for i in range(4)] == [2, 0, 0, 1]


def test_cooling_dry_run_touches_nothing(tmp_path: Path) -> None:
    root = cooling_tree(tmp_path, DEVICES)
    preview = CoolingActuator({"node0": root}, SMALL).apply(cooling(1.0), True)
    assert (
        preview.ok
        and preview.detail["changes"] == 2
        and preview.detail["max_state"]["node0/cooling_device3"] == 5
    )
    assert [state(root, i) for i in range(4)] == [2, 0, 0, 1]


def test_cooling_unreadable_or_missing_attributes_refuse_before_writing(tmp_path: Path) -> None:
    # Tests run as root, so a 0o444 file would still be writable: a directory in the file's place is not.
    root = cooling_tree(tmp_path / "a", DEVICES)
    blocked = root / "class/thermal/cooling_device3/cur_state"
    blocked.unlink()
    blocked.mkdir()
    result = CoolingActuator({"node0": root}, SMALL).apply(cooling(1.0), False)
    assert not result.ok and str(blocked) in result.error and "unreadable" in result.error
    assert state(root, 0) == 2  # the first fan was not written
    missing_root = cooling_tree(tmp_path / "b", DEVICES)
    (missing_root / "class/thermal/cooling_device0/max_state").unlink()
    missing = CoolingActuator({"node0": missing_root}, SMALL).apply(cooling(1.0), False)
    assert not missing.ok and "cooling_device0/max_state: missing" in missing.error
    assert state(missing_root, 0) == 2
    assert not CoolingActuator({"node1": root}, SMALL).apply(cooling(1.0), False).ok  # node0 has no root
    none = CoolingActuator({"node0": root}, SMALL, types=["Chassis"]).apply(cooling(1.0), False)
    assert not none.ok and "no cooling devices of ['Chassis']" in none.error


class _Files(SysfsFiles):
    """Sysfs as the kernel can behave: a write refused with an errno, or accepted and not applied."""

    def __init__(self, refuse: str = "", ignore: str = "") -> None:
        self.refuse, self.ignore = refuse, ignore

    def write_text(self, path: Path, text: str) -> None:
        if self.refuse and self.refuse in str(path):
            raise SysfsError(path, f"write of {text!r} refused (OSError: [Errno 22] Invalid argument)")
        if self.ignore and self.ignore in str(path):
            return
        super().write_text(path, text)


def test_cooling_a_refused_write_restores_the_devices_already_written(tmp_path: Path) -> None:
    root = cooling_tree(tmp_path, DEVICES)
    files = _Files(refuse="cooling_device3")
    result = CoolingActuator({"node0": root}, SMALL, files=files).apply(cooling(1.0), False)
    assert (
        not result.ok and "cooling_device3/cur_state" in result.error and "Invalid argument" in result.error
    )
    assert result.detail["restored"] == ["node0/cooling_device0"]
    assert [state(root, i) for i in range(4)] == [2, 0, 0, 1]


def test_cooling_a_write_that_does_not_stick_is_rolled_back(tmp_path: Path) -> None:
    root = cooling_tree(tmp_path, DEVICES)
    files = _Files(ignore="cooling_device3")
    result = CoolingActuator({"node0": root}, SMALL, files=files).apply(cooling(0.6), False)
    assert not result.ok and "wrote 3 but it reads back 1" in result.error
    assert state(root, 0) == 2


def test_sysfs_writes_never_create_files(tmp_path: Path) -> None:
    with pytest.raises(SysfsError, match="missing"):
        SysfsFiles().write_text(tmp_path / "cur_state", "3")
    assert not (tmp_path / "cur_state").exists()


def powercap_tree(root: Path, limit_uw: int = 200_000_000, max_uw: int | None = 250_000_000) -> Path:
    zone = root / "class" / "powercap" / "intel-rapl:0"
    zone.mkdir(parents=True)
    (zone / "name").write_text("package-0\n")
    (zone / "constraint_0_power_limit_uw").write_text(f"{limit_uw}\n")
    if max_uw is not None:
        (zone / "constraint_0_max_power_uw").write_text(f"{max_uw}\n")
    return root


def limit_uw(root: Path) -> int:
    return int((root / "class/powercap/intel-rapl:0/constraint_0_power_limit_uw").read_text())


def test_powercap_sets_reads_back_and_restores(tmp_path: Path) -> None:
    root = powercap_tree(tmp_path)
    rapl = PowercapActuator(root)
    assert rapl.zones() == ["intel-rapl:0"]
    result = rapl.set_limit_w("intel-rapl:0", 150.0)
    assert result.ok and limit_uw(root) == 150_000_000 and rapl.read_limit_w("intel-rapl:0") == 150.0
    assert result.previous == {"power_limit_uw": {"intel-rapl:0": 200_000_000}}
    assert rapl.restore(result.previous).ok and limit_uw(root) == 200_000_000


def test_powercap_refuses_outside_its_constraints_and_dry_run_changes_nothing(tmp_path: Path) -> None:
    root = powercap_tree(tmp_path)
    rapl = PowercapActuator(root)
    over = rapl.set_limit_w("intel-rapl:0", 300.0)
    assert not over.ok and "constraint_0_power_limit_uw" in over.error and "[0, 250] W" in over.error
    assert not rapl.set_limit_w("intel-rapl:0", -5.0).ok
    assert not rapl.set_limit_w("intel-rapl:0", float("nan")).ok
    preview = rapl.set_limit_w("intel-rapl:0", 120.0, dry_run=True)
    assert preview.ok and preview.detail["changes"] == 1
    assert limit_uw(root) == 200_000_000
    unbounded = PowercapActuator(powercap_tree(tmp_path / "u", max_uw=None))
    assert unbounded.set_limit_w("intel-rapl:0", 300.0).ok  # no max file: only the lower bound


def test_powercap_missing_zone_and_writes_that_fail(tmp_path: Path) -> None:
    root = powercap_tree(tmp_path)
    missing = PowercapActuator(root).set_limit_w("intel-rapl:9", 100.0)
    assert not missing.ok and "intel-rapl:9/constraint_0_power_limit_uw: missing" in missing.error
    assert not PowercapActuator(root).set_limit_w("../../etc", 100.0).ok
    ignored = PowercapActuator(root, _Files(ignore="intel-rapl:0")).set_limit_w("intel-rapl:0", 100.0)
    assert not ignored.ok and "reads back 200000000" in ignored.error
    refused = PowercapActuator(root, _Files(refuse="intel-rapl:0")).set_limit_w("intel-rapl:0", 100.0)
    assert not refused.ok and "refused" in refused.error
    assert limit_uw(root) == 200_000_000
