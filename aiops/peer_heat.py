"""A GPU's temperature against its node's other GPUs at their power: one coolant, one load, one temperature, give
or take a GPU's own few degrees (docs/SIMULATOR.md: a static offset within ±3.5 °C, ±5 % thermal resistance). A
GPU whose cooling failed while its job stood or restarted every minute never reaches its loaded temperature, so
against its own history it may not look hot, yet it runs far above its peers at their power. Shared by detection
(aiops/detect/gpu_rules.py: `gpu_hot`) and the analyst (aiops/rca/throttle_scorers.py: `thermal_throttle`)."""

from __future__ import annotations

import statistics
from collections.abc import Iterable

PEER_HOT_C = 8.0  # this much above the node's other GPUs, past their spread at that power, is hot
# How far apart healthy GPUs of one node drift with their power: each GPU's thermal resistance (±5 %) and power
# hunger (±4 %) at 0.055 °C/W, either side (docs/SIMULATOR.md); 6 °C at 600 W on top of the static offsets.
SPREAD_C_PER_W = 0.01
PEER_POWER_SLACK = 1.1  # a GPU drawing more than this times its peers' median may be warmer for its work
MIN_PEERS = 2  # a node with fewer other GPUs reporting says nothing

Reading = tuple[str, str, float | None, float | None]  # gpu, node, temperature (°C), power (W)
PeerOffset = tuple[float, float]  # °C above the median of its node's other GPUs, and their median power (W)


def peer_offsets(readings: Iterable[Reading]) -> dict[str, PeerOffset]:
    """Per GPU, how much warmer it ran than the median of its node's other GPUs, and their median power, where it
    drew no more than `PEER_POWER_SLACK` times that power (a GPU working harder may run warmer)."""
    by_node: dict[str, list[tuple[str, float, float]]] = {}
    for gpu, node, temp_c, power_w in readings:
        if temp_c is not None and power_w is not None:
            by_node.setdefault(node, []).append((gpu, float(temp_c), float(power_w)))
    out: dict[str, PeerOffset] = {}
    for members in by_node.values():
        for gpu, temp_c, power_w in members:
            peers = [(t, p) for g, t, p in members if g != gpu]
            if len(peers) < MIN_PEERS:
                continue
            peer_power_w = statistics.median(p for _, p in peers)
            if power_w <= PEER_POWER_SLACK * peer_power_w:
                out[gpu] = (temp_c - statistics.median(t for t, _ in peers), peer_power_w)
    return out


def further_above(now: PeerOffset, usual: PeerOffset) -> float:
    """How much further above its node's other GPUs a GPU runs `now` than it `usual`ly does, less what their power's
    change explains. Healthy GPUs' distances from one another scale with power (each GPU's own thermal resistance
    and power hunger: `SPREAD_C_PER_W` either side), so a GPU that runs 3 °C below its peers at 530 W runs level
    with them when the job stalls at 80 W: that is not 4.5 °C of heat, and nor is the spread term of a loaded
    reference against an idle window (a stalled job's cool GPU was judged hot through the fleet's 15 s samples)."""
    return now[0] - usual[0] - SPREAD_C_PER_W * abs(now[1] - usual[1])
