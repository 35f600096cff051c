"""GPU temperature judged against the GPU's own temperature at the same load (issue 40).

A GPU's temperature follows its power: at steady state it sits `P · R_th` above its coolant, and it gets there
with the time constant of die and cold plate (tens of seconds; the twin's 30 s, docs/SIMULATOR.md). A job that
stands still for minutes (a rank lost, a restart, peers spinning in NCCL at half power) cools its GPUs; one
baseline over every load would learn that cooler temperature as normal and flag the GPUs hot when the job runs
again and they return to their normal loaded temperature. So the baseline is kept per load level (thirds of the
GPU's maximum power limit), and a window is judged against the heaviest load of the last `MEMORY_S` (three time
constants: a GPU that just dropped its load is still as warm as that load made it) or, where that level has no
baseline yet, the nearest heavier one (a GPU hotter than at a heavier load is hot). A GPU whose power is not
reported keeps one baseline.
"""

from __future__ import annotations

import math
from collections import defaultdict, deque

from aiops.detect.baselines import RollingBaseline
from aiops.peer_heat import PEER_HOT_C, PeerOffset, further_above

LEVELS = 3  # load levels: thirds of the maximum power limit (idle, part load or spinning, full load)
MEMORY_S = 90.0  # a GPU's temperature remembers its load this long (three of the twin's 30 s time constants)
HOT_FLOOR_C = 8.0  # hotter than the baseline by this much (and 5 MADs) is hot


def load_level(power_w: float | None, max_w: float | None) -> int | None:
    """0, 1 or 2: the third of the maximum power limit `power_w` is in; None when either is unknown."""
    if power_w is None or not max_w or max_w <= 0:
        return None
    return max(0, min(LEVELS - 1, int(LEVELS * float(power_w) / float(max_w))))


class LoadedTemperature:
    """Per GPU, a rolling median/MAD of its temperature for each load level (`aiops.detect.baselines`)."""

    def __init__(self, window_s: float, size: int = 30) -> None:
        self.memory = max(1, math.ceil(MEMORY_S / window_s))
        self.size = size
        self.levels: dict[str, deque[int]] = defaultdict(lambda: deque(maxlen=self.memory))
        self.baselines: dict[tuple[str, int | None], RollingBaseline] = {}

    def _baseline(self, gpu: str, level: int | None) -> RollingBaseline:
        key = (gpu, level)
        if key not in self.baselines:
            self.baselines[key] = RollingBaseline(size=self.size)
        return self.baselines[key]

    def reference(self, gpu: str, level: int | None) -> RollingBaseline | None:
        """The baseline a window at `level` is judged against (after `observe` recorded it)."""
        if level is None:
            found = self.baselines.get((gpu, None))
            return found if found is not None and found.ready() else None
        heaviest = max(self.levels[gpu], default=level)
        for candidate in range(heaviest, LEVELS):
            found = self.baselines.get((gpu, candidate))
            if found is not None and found.ready():
                return found
        return None

    def hot(self, gpu: str, temp_c: float | None, level: int | None, *, judge: bool) -> bool:
        """Is the window's temperature hot for the load the GPU ran at (`judge`: past the warm-up)? A window
        not judged hot is learnt into its level's baseline."""
        if temp_c is None:
            return False
        recent = self.levels[gpu]
        if level is not None:
            recent.append(level)
        baseline = self.reference(gpu, level)
        high = judge and baseline is not None and baseline.exceeds(temp_c, ratio=0.0, floor=HOT_FLOOR_C)
        if not high:
            self._baseline(gpu, level).add(float(temp_c))
        return high

    def baseline_c(self, gpu: str, level: int | None) -> float | None:
        found = self.reference(gpu, level)
        return found.median if found is not None else None


class PeerOffsets:
    """Per GPU, rolling medians of how far above its node's other GPUs it runs and of their power
    (`aiops.peer_heat.peer_offsets`), learnt from the windows not judged hot. Where a GPU sits in the airflow, or
    its own paste and cold plate, keeps it a fixed few degrees, even 10-15 °C, above its peers for months on an
    air-cooled node: that is its normal. Hot is running `PEER_HOT_C` further above them than it usually does, past
    what their change of power explains (`aiops.peer_heat.further_above`: a GPU whose cooling failed while its job
    stood or restarted every minute, so against its own loaded history it never looked hot); with no history
    yet, nothing is judged."""

    def __init__(self, size: int = 30) -> None:
        self.size = size
        self.baselines: dict[str, tuple[RollingBaseline, RollingBaseline]] = {}

    def hot(self, gpu: str, offset: PeerOffset | None, *, judge: bool) -> bool:
        if offset is None:
            return False
        found = self.baselines.get(gpu)
        if found is None:
            found = self.baselines[gpu] = (RollingBaseline(size=self.size), RollingBaseline(size=self.size))
        above, power = found
        usual = (above.median, power.median) if above.ready() else None
        high = judge and usual is not None and further_above(offset, usual) >= PEER_HOT_C
        if not high:
            above.add(float(offset[0]))
            power.add(float(offset[1]))
        return high
