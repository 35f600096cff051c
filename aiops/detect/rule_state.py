"""What the detection rules remember between windows, and the helpers every family of rules shares: a counter's
growth, a value against its own rolling baseline for several windows, and what the product itself set (intended
state, guardrails/intended.py). The rules themselves live by what they read: aiops/detect/gpu_rules.py,
network_rules.py, job_rules.py, facility_rules.py; aiops/detect/rules.py runs them window by window.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from aiops import labels
from aiops.detect import windows as w
from aiops.detect.baselines import Persistence, RollingBaseline
from aiops.detect.ended import JobEnds
from aiops.detect.heat import LoadedTemperature, PeerOffsets
from aiops.detect.limits import LimitSteps
from aiops.detect.restarts import ProductRestarts
from aiops.detect.stragglers import EXPECTED, StragglerRules
from aiops.store import Store
from guardrails.intended import Intended, IntendedCache

WARMUP_S = 30.0  # relative rules judge nothing before this much telemetry was seen


class RuleState:
    def __init__(self, store: Store, *, window_s: float = 10.0) -> None:
        self.store = store
        self.window_s = window_s
        self.start_ts_s: float | None = None
        self.job_of_gpu = w.job_gpus(store)
        self.job_home = w.job_homes(store)
        self.ends = JobEnds()  # a job killed or crashed is not stalled (aiops/detect/ended.py)
        self.reporting: set[str] = set()  # the nodes whose GPUs have a row in the window being judged
        self.persist = Persistence()
        self.baselines: dict[str, RollingBaseline] = defaultdict(lambda: RollingBaseline(size=30))
        self.counters: dict[str, float] = {}
        self.limits = LimitSteps()  # each GPU's power-limit steps (aiops/detect/limits.py)
        self.heat = LoadedTemperature(window_s)  # temperature per load level (aiops/detect/heat.py)
        self.peers = PeerOffsets()  # how far above its node's other GPUs each GPU usually runs (heat.py)
        self.rack_of: dict[str, str] = {}  # node -> rack (topology), read once it exists
        self.caps_kw: dict[str, float] = {}  # scope -> the DCIM cap in force in the current window
        self.last_step_ts_s: dict[str, float] = {}
        self.step_baseline: dict[str, RollingBaseline] = defaultdict(
            lambda: RollingBaseline(size=20, min_count=3)
        )
        self.intended_cache = IntendedCache()  # what the product set: expected, not a symptom (rules.py)
        self.intended: dict[tuple[str, str], Intended] = {}
        self.restarts = (
            ProductRestarts()
        )  # a job the product restarted waits by design (aiops/detect/restarts.py)
        self.stragglers = StragglerRules(
            store, self.set_slower
        )  # per-rank timing (aiops/detect/stragglers.py)

    def warm(self, ts_s: float) -> bool:
        """Telemetry was seen for the warm-up: relative rules may judge."""
        return self.start_ts_s is not None and ts_s - self.start_ts_s >= WARMUP_S

    def counter_delta(self, key: str, value: Any) -> float:
        """How much a counter grew since the last window (0 on its first reading, or when it reset)."""
        if value is None:
            return 0.0
        previous = self.counters.get(key)
        self.counters[key] = float(value)
        return 0.0 if previous is None else max(0.0, float(value) - previous)

    def relative(
        self, key: str, value: float | None, ts_s: float, *, ratio: float, floor: float, windows: int
    ) -> bool:
        """A relative rule: value above its baseline for `windows` consecutive windows."""
        if value is None:
            return False
        baseline = self.baselines[key]
        high = self.warm(ts_s) and baseline.exceeds(value, ratio=ratio, floor=floor)
        if not high:
            baseline.add(value)
        return self.persist.update(key, high, ts_s) >= windows

    def set_by_product(self, component: str, prop: str) -> Intended | None:
        """What the product set for this component's property, in force at the window's end."""
        return self.intended.get((component, prop))

    def drained(self, gpu: str) -> bool:
        node = labels.node_of(gpu)
        entry = self.set_by_product(node, "drained") if node else None
        return entry is not None and bool(entry.value)

    def set_slower(self, gpu: str) -> bool:
        """The product slowed this GPU (its limit or clocks, intended state) or drained its node."""
        return self.drained(gpu) or any(self.set_by_product(gpu, prop) is not None for prop in EXPECTED)
