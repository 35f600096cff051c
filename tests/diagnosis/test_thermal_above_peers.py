"""Probe 2026-12-07: a GPU's cooling fails while its job barely runs (a link flapping past the IB retry window
restarts the job every minute). It never reaches its loaded temperature, so against its own loaded reference it
is not hot; yet it runs 20 °C above its node's other GPUs at their power, and the detector's load-aware rule
(`gpu_hot`) says so. The analyst names its local cooling (`thermal_throttle`) from the same comparison: the GPU
against its node's peers at the same power (aiops/rca/throttle_scorers.py `_above_peers`). Rows written into a
real workspace; the scorer reads them through the analyst's own facts."""

from __future__ import annotations

from aiops.rca.facts import Facts, Window
from aiops.rca.throttle_scorers import throttling
from aiops.store import Store

BUSY_W, IDLE_W = 610.0, 80.0


def _workspace(hot_gpu_c: float, hot_gpu_power_w: float, usual_c: float = 0.0) -> Store:
    """node5's four GPUs: loaded at 64 °C before t=100; then mostly idle at 40 °C, its gpu3 at `hot_gpu_c`;
    gpu3 `usual_c` warmer than that at load (its place in the airflow)."""
    store = Store(":memory:")
    for t in range(0, 200, 5):
        for g in range(4):
            loaded = t < 100
            power_w = BUSY_W if loaded else (hot_gpu_power_w if g == 3 else IDLE_W)
            temp_c = (
                64.0 + g * 0.5 + (usual_c if g == 3 else 0.0)
                if loaded
                else (hot_gpu_c if g == 3 else 40.0 + g * 0.5)
            )
            store.conn.execute(
                "INSERT INTO gpu_samples (ts_s, gpu, node, util_pct, power_w, power_limit_w, power_limit_max_w, "
                "temp_c, clocks_event_reasons, ecc_dbe_total, pcie_replay_total, pcie_link_width, "
                "pcie_link_max_width, pcie_link_gen, nvlink_crc_total, nvlink_replay_total, retired_rows) "
                "VALUES (?, ?, 'node5', ?, ?, 700, 700, ?, ?, 0, 0, 16, 16, 5, 0, 0, 0)",
                [float(t), f"node5/gpu{g}", 99.0 if loaded else 0.0, power_w, temp_c, 0 if loaded else 1],
            )
    return store


def _thermal(store: Store) -> list[str]:
    facts = Facts(
        store, Window(run_start_s=0.0, start_s=120.0, end_s=195.0, baseline_end_s=100.0, opened_s=120.0)
    )
    return [c.component for c in throttling(facts) if c.label == "thermal_throttle"]


def test_a_gpu_far_above_its_node_peers_at_their_power_is_named() -> None:
    with _workspace(hot_gpu_c=62.0, hot_gpu_power_w=IDLE_W) as store:
        assert _thermal(store) == ["node5/gpu3"]


def test_a_gpu_a_few_degrees_above_its_peers_is_not() -> None:
    with _workspace(hot_gpu_c=44.0, hot_gpu_power_w=IDLE_W) as store:  # a GPU's own offset (±3.5 °C)
        assert _thermal(store) == []


def test_a_gpu_warmer_because_it_works_harder_is_not() -> None:
    with _workspace(hot_gpu_c=62.0, hot_gpu_power_w=400.0) as store:  # it draws five times its peers' power
        assert _thermal(store) == []


def test_a_gpu_as_far_above_its_peers_as_it_usually_runs_is_not() -> None:
    """gpu3 ran 22 °C above its peers at load before the incident too (its place in the airflow): 22 °C above
    them in the incident window is its normal, not a cooling failure."""
    with _workspace(hot_gpu_c=62.0, hot_gpu_power_w=IDLE_W, usual_c=22.0) as store:
        assert _thermal(store) == []


def test_a_gpu_cooler_than_its_peers_at_load_is_not_named_when_level_with_them_at_rest() -> None:
    """Seed 71207 through the fleet's 15 s samples: a GPU 6 °C below its node's other GPUs at 610 W runs level
    with them once its job stands at 80 W (each GPU's own thermal resistance scales with power). Its distance
    from them changed by 6 °C, all of it what their change of power explains: not heat. Judging the offset with
    each window's spread term (0.01 °C/W at 530 W less at 80 W) read 11 °C further above them and named it."""
    with _workspace(hot_gpu_c=41.5, hot_gpu_power_w=IDLE_W, usual_c=-6.0) as store:
        assert _thermal(store) == []
    with _workspace(
        hot_gpu_c=56.0, hot_gpu_power_w=IDLE_W, usual_c=-6.0
    ) as store:  # 15 °C above: its cooling
        assert _thermal(store) == ["node5/gpu3"]
