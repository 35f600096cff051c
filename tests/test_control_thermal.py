"""The thermal manager: hotspots, capacity weights, placement advice and the power-capping fallback."""

from __future__ import annotations

from aiops.control.thermal import GpuTemp, NodeInfo, RackCooling, ThermalConfig, assess


def fleet(temps_c: dict[str, float], jobs: dict[str, str]) -> tuple[list[GpuTemp], list[NodeInfo]]:
    """2 racks x 2 nodes x 4 GPUs; node temperature per name (one GPU 1 °C warmer), jobs per node."""
    gpus, nodes = [], []
    for n in range(4):
        name = f"node{n}"
        nodes.append(NodeInfo(name, f"rack{n // 2}", jobs.get(name)))
        gpus += [GpuTemp(f"{name}/gpu{g}", name, temps_c[name] + (1.0 if g == 0 else 0.0)) for g in range(4)]
    return gpus, nodes


COOL_RACKS = [RackCooling("rack0", 25.0, 200.0), RackCooling("rack1", 25.0, 200.0)]


def test_finds_the_hot_node_and_advises_a_move_to_a_cooler_one() -> None:
    gpus, nodes = fleet(
        {"node0": 84.0, "node1": 70.0, "node2": 62.0, "node3": 60.0}, {"node0": "train", "node1": "train"}
    )
    report = assess(gpus, nodes, COOL_RACKS)
    hot = [h.component for h in report.hotspots if h.level == "node"]
    assert hot == ["node0"]
    assert any(h.level == "gpu" and h.component == "node0/gpu0" for h in report.hotspots)
    assert not [h for h in report.hotspots if h.level == "rack"]
    assert len(report.moves) == 1
    move = report.moves[0]
    assert (move.job, move.from_node, move.to_node) == ("train", "node0", "node3")  # the coolest idle node
    assert move.gain_c > 20.0
    assert not report.power_caps
    assert (
        report.capacity_weights["node0"]
        < report.capacity_weights["node1"]
        <= report.capacity_weights["node3"]
    )


def test_rising_trend_makes_a_node_hot_before_it_throttles() -> None:
    gpus, nodes = fleet({"node0": 78.0, "node1": 60.0, "node2": 60.0, "node3": 60.0}, {"node0": "train"})
    assert not assess(gpus, nodes, COOL_RACKS).hotspots
    rising = [GpuTemp(g.gpu, g.node, g.temp_c, 0.1 if g.node == "node0" else 0.0) for g in gpus]
    report = assess(rising, nodes, COOL_RACKS, ThermalConfig(horizon_s=60.0))
    assert [h.component for h in report.hotspots if h.level == "node"] == ["node0"]


def test_a_hot_rack_is_no_destination() -> None:
    gpus, nodes = fleet({"node0": 84.0, "node1": 60.0, "node2": 60.0, "node3": 60.0}, {"node0": "train"})
    racks = [RackCooling("rack0", 25.0, 200.0), RackCooling("rack1", 36.0, 200.0)]  # rack1's inlet is hot
    report = assess(gpus, nodes, racks)
    assert [h.component for h in report.hotspots if h.level == "rack"] == ["rack1"]
    assert [m.to_node for m in report.moves] == ["node1"]
    assert report.capacity_weights["node3"] < report.capacity_weights["node1"]


def test_falls_back_to_power_capping_when_every_rack_is_hot() -> None:
    gpus, nodes = fleet(
        {"node0": 85.0, "node1": 60.0, "node2": 84.0, "node3": 60.0}, {"node0": "a", "node2": "b"}
    )
    racks = [RackCooling("rack0", 25.0, 120.0), RackCooling("rack1", 34.0, 200.0)]  # low flow; hot inlet
    report = assess(gpus, nodes, racks)
    assert {h.component for h in report.hotspots if h.level == "rack"} == {"rack0", "rack1"}
    assert not report.moves
    assert {c.job for c in report.power_caps} == {"a", "b"}
    cap_a = next(c for c in report.power_caps if c.job == "a")
    assert cap_a.nodes == ("node0",)
    assert cap_a.shed_w_per_gpu > 0  # (5 - 1) °C / 0.055 °C/W ≈ 73 W
    assert abs(cap_a.shed_w_per_gpu - 4.0 / 0.055) < 1.0
    assert any("power capping" in c.reason for c in report.power_caps)
    assert any("every rack is hot" in note for note in report.notes)
