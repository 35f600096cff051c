"""The NVML collector: one code path for pynvml and the simulator; per-GPU errors recorded, never fatal;
NOT_SUPPORTED leaves a column NULL; XIDs drained into gpu_events."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml
import pytest

from aiops.sim import World, gpu
from aiops.sim.nvml import SimNvml
from aiops.store import Store
from collectors.base import RowBatch
from collectors.hostfs import Unavailable
from collectors.nvml import GPU_COLUMNS, NvmlCollector, error_name, inventory, nvml_collector
from tests.host_helpers import write
from tests.simkit import scenario


class Refusing:
    """A SimNvml that answers `code` to some calls (on every GPU, or on one GPU index)."""

    def __init__(self, inner: SimNvml, refused: set[str], code: int, gpu: int | None = None) -> None:
        self._inner, self._refused, self._code, self._gpu = inner, refused, code, gpu

    def __getattr__(self, name: str) -> Any:
        fn = getattr(self._inner, name)
        if name not in self._refused:
            return fn

        def refuse(*args: Any) -> Any:
            if self._gpu is None or (args and getattr(args[0], "index", None) == self._gpu):
                raise pynvml.NVMLError(self._code)
            return fn(*args)

        return refuse


def stepped(*faults: dict[str, Any], seconds: int = 2) -> World:
    world = World(scenario(list(faults)))
    for _ in range(seconds):
        world.step(1.0)
    return world


def test_lost_gpu_is_recorded_and_the_others_are_sampled_after_the_node_wide_hang() -> None:
    world = World(scenario([{"kind": "gpu_fell_off_bus", "target": "node0/gpu1", "start_s": 1}]))
    collector = NvmlCollector(world.nvml(0), "node0")
    world.step(1.0)
    world.step(1.0)
    batch = collector.collect(world.now_ts_s)
    rows = batch["gpu_samples"].to_pylist()
    # NVML blocks node-wide while the driver handles the loss: the others time out too, for a while
    assert [r["nvml_error"] for r in rows] == ["TIMEOUT", "GPU_IS_LOST", "TIMEOUT", "TIMEOUT"]
    assert all(rows[1][c] is None for c in GPU_COLUMNS if c not in ("ts_s", "gpu", "node", "nvml_error"))
    errors = [(e["component"], e["error"], e["collector"]) for e in batch["collector_errors"].to_pylist()]
    assert ("node0/gpu1", "GPU_IS_LOST", "nvml") in errors and len(errors) == 4
    assert [(e["gpu"], e["xid"]) for e in batch["gpu_events"].to_pylist()] == [("node0/gpu1", 79)]
    while world.elapsed_s < 1 + gpu.NVML_NODE_HANG_S:
        world.step(1.0)
    again = collector.collect(world.now_ts_s)
    assert "gpu_events" not in again  # an event is drained once
    rows = again["gpu_samples"].to_pylist()
    assert [r["nvml_error"] for r in rows] == [None, "GPU_IS_LOST", None, None]
    assert rows[0]["temp_c"] is not None and rows[0]["uuid"] is not None
    # each sample says the GPU is lost; collector_errors said it once, when it began (not once per sample)
    assert "collector_errors" not in again
    world.step(1.0)
    assert "collector_errors" not in collector.collect(world.now_ts_s)


def test_an_error_row_per_change_of_a_gpus_state() -> None:
    """A GPU that fails, recovers and fails again is two collector_errors rows; every sample still says it."""
    world = stepped()
    refusing = Refusing(world.nvml(0), {"nvmlDeviceGetPowerUsage"}, pynvml.NVML_ERROR_UNKNOWN, gpu=3)
    collector = NvmlCollector(refusing, "node0")
    errors = 0
    for refused in (
        {"nvmlDeviceGetPowerUsage"},
        {"nvmlDeviceGetPowerUsage"},
        set(),
        {"nvmlDeviceGetPowerUsage"},
        {"nvmlDeviceGetPowerUsage"},
    ):
        refusing._refused = refused
        batch = collector.rows(world.now_ts_s)
        assert batch["gpu_samples"].rows[3][GPU_COLUMNS.index("nvml_error")] == (
            "UNKNOWN" if refused else None
        )
        errors += len(batch["collector_errors"].rows) if "collector_errors" in batch else 0
    assert errors == 2


def test_not_supported_leaves_only_that_column_null() -> None:
    world = stepped()
    refusing = Refusing(
        world.nvml(0),
        {"nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetNvLinkState"},
        pynvml.NVML_ERROR_NOT_SUPPORTED,
    )
    rows = NvmlCollector(refusing, "node0").collect(world.now_ts_s)["gpu_samples"].to_pylist()
    assert all(r["pcie_replay_total"] is None and r["nvlink_crc_total"] is None for r in rows)
    assert all(
        r["nvml_error"] is None and r["temp_c"] is not None and r["pcie_link_width"] == 16 for r in rows
    )


def test_an_error_on_one_gpu_does_not_stop_the_others() -> None:
    world = stepped()
    refusing = Refusing(world.nvml(0), {"nvmlDeviceGetPowerUsage"}, pynvml.NVML_ERROR_UNKNOWN, gpu=3)
    batch = NvmlCollector(refusing, "node0").collect(world.now_ts_s)
    assert [r["nvml_error"] for r in batch["gpu_samples"].to_pylist()] == [None, None, None, "UNKNOWN"]
    assert batch["collector_errors"].to_pylist()[0]["detail"] == str(
        pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
    )


def test_direct_and_tolerant_paths_read_the_same_row() -> None:
    world = stepped()
    collector = NvmlCollector(world.nvml(0), "node0")
    direct = collector.rows(world.now_ts_s)["gpu_samples"].rows
    collector._tolerant = [True] * collector.count
    tolerant = collector.rows(world.now_ts_s)["gpu_samples"].rows
    assert direct == tolerant


def test_rows_fit_the_store(store: Store) -> None:
    world = World(scenario([{"kind": "gpu_ecc_error", "target": "node1/gpu0", "start_s": 1}]))
    collectors = [
        NvmlCollector(world.nvml(node), f"node{node}") for node in (0, 1)
    ]  # registered before the XID
    world.step(1.0)
    world.step(1.0)
    for collector in collectors:
        store.ingest_many(collector.collect(world.now_ts_s))
    row = store.query("SELECT * FROM gpu_samples WHERE gpu = 'node1/gpu0'")[0]
    assert row["ecc_dbe_total"] >= 1 and row["clocks_event_reasons"] & 0x1  # crashed, restarting: GpuIdle
    assert (
        row["power_limit_min_w"] == 200.0
        and row["power_limit_max_w"] == 700.0
        and row["slowdown_temp_c"] == 87
    )
    assert store.scalar("SELECT count(*) FROM gpu_samples") == 8
    assert store.query("SELECT gpu, xid FROM gpu_events ORDER BY xid") == [
        {"gpu": "node1/gpu0", "xid": 48},
        {"gpu": "node1/gpu0", "xid": 63},  # DBE, row remap
        {"gpu": "node1/gpu0", "xid": 94},
    ]


def test_error_names_follow_nvml_h() -> None:
    assert error_name(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) == "GPU_IS_LOST"
    assert error_name(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)) == "NOT_SUPPORTED"
    assert error_name(pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)) == "DRIVER_NOT_LOADED"


def test_real_pynvml_without_a_driver_fails_at_init_not_later() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        with pytest.raises(pynvml.NVMLError):
            NvmlCollector(pynvml, "node0")
        return
    try:  # a machine with a GPU: the same collector reads it
        batch = NvmlCollector(pynvml, "node0").collect(0.0)
        assert batch["gpu_samples"].num_rows == pynvml.nvmlDeviceGetCount()
    finally:
        pynvml.nvmlShutdown()


class WithPci:
    """A SimNvml with the identity calls a driver has (the simulator has none of them): PCI info as pynvml
    returns it (busId bytes, NVML's upper-case form) and a serial GPU 1 refuses (NOT_SUPPORTED, as GeForce)."""

    def __init__(self, inner: SimNvml) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return SimpleNamespace(busId=f"00000000:{0x3B + handle.index:02X}:00.0".encode(), domain=0)

    def nvmlDeviceGetSerial(self, handle: Any) -> str:
        if handle.index == 1:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return f"165{handle.index:010d}"


class WithNuma(WithPci):
    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        return handle.index // 2


def test_inventory_reads_pci_bus_id_serial_and_numa_node() -> None:
    world = stepped()
    found = inventory(NvmlCollector(WithNuma(world.nvml(1)), "node1"))
    assert [(g.gpu, g.pci_bus_id, g.serial, g.numa_node) for g in found] == [
        ("node1/gpu0", "0000:3b:00.0", "1650000000000", 0),
        ("node1/gpu1", "0000:3c:00.0", None, 0),  # NOT_SUPPORTED: NULL
        ("node1/gpu2", "0000:3d:00.0", "1650000000002", 1),
        ("node1/gpu3", "0000:3e:00.0", "1650000000003", 1),
    ]
    assert all(g.uuid and g.uuid.startswith("GPU-") and g.model == "NVIDIA H100 80GB HBM3" for g in found)


def test_inventory_numa_node_from_sysfs_where_nvml_has_no_call(tmp_path: Path) -> None:
    write(
        tmp_path,
        {"sys/bus/pci/devices/0000:3b:00.0/numa_node": 1, "sys/bus/pci/devices/0000:3c:00.0/numa_node": -1},
    )
    world = stepped()
    found = inventory(NvmlCollector(WithPci(world.nvml(0)), "node0"), tmp_path)
    assert [g.numa_node for g in found] == [1, None, None, None]


def test_inventory_on_the_simulator_leaves_what_it_lacks_null() -> None:
    world = stepped()
    found = inventory(NvmlCollector(world.nvml(0), "node0"))
    assert [(g.pci_bus_id, g.serial, g.numa_node) for g in found] == [(None, None, None)] * 4
    assert all(g.uuid for g in found)


class NoDriver:
    """The pynvml module on a machine without the NVIDIA driver: nvmlInit refuses."""

    def __init__(self, code: int) -> None:
        self.code = code
        self.inits = 0

    def nvmlInit(self) -> None:
        self.inits += 1
        raise pynvml.NVMLError(self.code)

    def nvmlShutdown(self) -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded (DRIVER_NOT_LOADED)"),
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found (LIBRARY_NOT_FOUND)"),
    ],
)
def test_no_driver_is_reported_once_then_nothing(code: int, reason: str) -> None:
    module = NoDriver(code)
    collector = nvml_collector("node2", module)
    assert isinstance(collector, Unavailable) and module.inits == 1
    (status,) = collector.collect(1.0)["collector_errors"].to_pylist()
    assert (status["collector"], status["component"], status["error"]) == ("nvml", "node2", "unavailable")
    assert status["detail"] == f"NVML unavailable: {reason}"
    for ts in (2.0, 3.0, 4.0):
        assert collector.collect(ts) == {} and collector.rows(ts) == {}
    assert module.inits == 1  # no retry loop


def test_factory_on_the_simulator_is_the_collector() -> None:
    world = stepped()
    collector = nvml_collector("node0", world.nvml(0))
    assert isinstance(collector, NvmlCollector)
    assert collector.collect(world.now_ts_s)["gpu_samples"].num_rows == 4


def test_real_host_nvml_unavailable_exactly_once() -> None:
    collector = nvml_collector("node0")  # the real pynvml
    if isinstance(collector, NvmlCollector):
        collector.close()
        pytest.skip("this machine has a working NVIDIA driver")
    rows = [
        row for ts in range(5) for row in collector.rows(float(ts)).get("collector_errors", RowBatch(())).rows
    ]
    assert len(rows) == 1 and rows[0][3] == "unavailable" and rows[0][4].startswith("NVML unavailable: ")


class PagesOnly(Refusing):
    """A GPU before Ampere: no row remapper (NOT_SUPPORTED); it retires pages instead."""

    def __init__(self, inner: SimNvml, pages: int | None) -> None:
        super().__init__(inner, {"nvmlDeviceGetRemappedRows"}, pynvml.NVML_ERROR_NOT_SUPPORTED)
        self._pages = pages

    def nvmlDeviceGetRetiredPages(self, device: Any, sourceFilter: int) -> list[int]:
        assert sourceFilter == pynvml.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR
        if self._pages is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return [0x1000 * k for k in range(self._pages)]


def test_retired_rows_are_the_remapped_rows_or_before_ampere_the_retired_pages() -> None:
    """An uncorrectable error's row is remapped (the twin's H100: nvmlDeviceGetRemappedRows); a GPU without a
    row remapper counts its pages retired for double-bit errors; one with neither leaves the column NULL."""
    world = stepped({"kind": "gpu_ecc_error", "target": "node0/gpu1", "start_s": 1, "severity": 0.9})
    rows = NvmlCollector(world.nvml(0), "node0").collect(world.now_ts_s)["gpu_samples"].to_pylist()
    assert [r["retired_rows"] for r in rows] == [0, 2, 0, 0]  # two uncorrectable errors at severity 0.9
    pages = NvmlCollector(PagesOnly(world.nvml(0), 3), "node0").collect(world.now_ts_s)["gpu_samples"]
    assert [r["retired_rows"] for r in pages.to_pylist()] == [3, 3, 3, 3]
    neither = NvmlCollector(PagesOnly(world.nvml(0), None), "node0").collect(world.now_ts_s)["gpu_samples"]
    assert all(r["retired_rows"] is None and r["temp_c"] is not None for r in neither.to_pylist())
