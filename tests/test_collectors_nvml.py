"""The NVML collector: one code path for pynvml and the simulator; per-GPU errors recorded, never fatal;
NOT_SUPPORTED leaves a column NULL; XIDs drained into gpu_events."""

from __future__ import annotations

from typing import Any

import pynvml
import pytest

from aiops.sim import World
from aiops.sim.nvml import SimNvml
from aiops.store import Store
from collectors.nvml import GPU_COLUMNS, NvmlCollector, error_name
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


def test_lost_gpu_is_recorded_and_the_others_are_sampled() -> None:
    world = World(scenario([{"kind": "gpu_fell_off_bus", "target": "node0/gpu1", "start_s": 1}]))
    collector = NvmlCollector(world.nvml(0), "node0")
    world.step(1.0)
    world.step(1.0)
    batch = collector.collect(world.now_ts_s)
    rows = batch["gpu_samples"].to_pylist()
    assert [r["nvml_error"] for r in rows] == [None, "GPU_IS_LOST", None, None]
    assert all(rows[1][c] is None for c in GPU_COLUMNS if c not in ("ts_s", "gpu", "node", "nvml_error"))
    assert rows[0]["temp_c"] is not None and rows[0]["uuid"] is not None
    (error,) = batch["collector_errors"].to_pylist()
    assert (error["component"], error["error"], error["collector"]) == ("node0/gpu1", "GPU_IS_LOST", "nvml")
    assert [(e["gpu"], e["xid"]) for e in batch["gpu_events"].to_pylist()] == [("node0/gpu1", 79)]
    again = collector.collect(world.now_ts_s + 1)
    assert "gpu_events" not in again  # an event is drained once
    assert again["gpu_samples"].num_rows == 4


def test_not_supported_leaves_only_that_column_null() -> None:
    world = stepped()
    refusing = Refusing(world.nvml(0), {"nvmlDeviceGetPcieReplayCounter", "nvmlDeviceGetNvLinkState"},
                        pynvml.NVML_ERROR_NOT_SUPPORTED)  # fmt: skip
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
    assert row["ecc_dbe_total"] >= 1 and row["clocks_event_reasons"] & 0x1  # dead rank: GpuIdle
    assert (
        row["power_limit_min_w"] == 200.0
        and row["power_limit_max_w"] == 700.0
        and row["slowdown_temp_c"] == 87
    )
    assert store.scalar("SELECT count(*) FROM gpu_samples") == 8
    assert store.query("SELECT gpu, xid FROM gpu_events ORDER BY xid") == [
        {"gpu": "node1/gpu0", "xid": 48}, {"gpu": "node1/gpu0", "xid": 94}]  # fmt: skip


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
