"""Degradations that precede hard faults, for a scenario with `precursors:` (docs/SIMULATOR.md, "Precursors").

In life some hard failures announce themselves: correctable ECC errors cluster on a failing HBM stack before an
uncorrectable one; NVLink CRC and replay counts climb on a link before it is declared down; PCIe replays rise
before a GPU falls off the bus; an InfiniBand port's symbol errors and link recoveries rise on a failing cable or
transceiver before it flaps; a fan or pump that wears out lets a GPU run warmer and warmer before it throttles.
Most failures do not announce themselves: a share of each kind does (`MODELS`), over a lead time drawn per fault.

What the twin does, per warned fault: from `start_s - lead` until `start_s` the kind's counter rises at
`peak_per_s * p**2` (p: 0 → 1 over the lead; degradation accelerates as the part nears failure), or, for a fan,
the GPU's thermal resistance grows by `peak * p**2` (about 10 °C at full load at p = 1), and stays grown while the
fault lasts. The peaks stay under the per-window thresholds of the detection rules (aiops/detect/rules.py: five
replays per 10 s window), so a precursor is a trend, not a symptom. Benign noise on the same counters
(`background`): every GPU's NVLink and PCIe link and every HCA port has its own small error rate (some links are
noisier than others and never fail), and now and then a decoy: an episode that rises like a precursor and
fades without a fault (a CE storm that never became a UE). Corrected-ECC bursts and warm spots are the churn's
(aiops/sim/churn.py); steady corrected errors are the GPU model's (aiops/sim/gpu.py).

Everything is drawn at the world's start from its own random stream (`[seed, STREAM]`), so a scenario without
`precursors:` is unchanged, and one with it differs only by these counters and temperatures. Nothing here is
emitted as telemetry; the collectors read the counters as they read any other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from aiops.sim.rdma import C as HCA

if TYPE_CHECKING:
    from aiops.scenarios import PrecursorSpec
    from aiops.sim.faults import ActiveFault, Modifiers
    from aiops.sim.topology import F64, I64
    from aiops.sim.world import World

STREAM = 9
HOUR_S = 3600.0
DAY_S = 86_400.0
SIGNALS = ("ecc_corrected", "nvlink_errors", "pcie_replay", "ib_link_errors", "thermal")


@dataclass(frozen=True)
class Model:
    """`signal`: what degrades; `share`: of this kind's hard faults, the part that warns; `lead_median_s`: the
    median of its lognormal lead time; `peak`: the counter rate (per s) at the fault's start, or for `thermal`
    the fraction the GPU's thermal resistance has grown by then."""

    signal: str
    share: float
    lead_median_s: float
    peak: float


# Shares and lead times: the twin's choices within what the studies cited in docs/SIMULATOR.md report (most hard
# failures are not announced; about two in ten GPU failures are flagged before their Xid).
MODELS: dict[str, Model] = {
    "gpu_ecc_error": Model("ecc_corrected", 0.4, 3.0 * HOUR_S, 0.05),
    "nvlink_degraded": Model("nvlink_errors", 0.5, 1.0 * HOUR_S, 0.05),
    "gpu_fell_off_bus": Model("pcie_replay", 0.2, 0.5 * HOUR_S, 0.04),
    "pcie_degraded": Model("pcie_replay", 0.3, 1.0 * HOUR_S, 0.04),
    "nic_link_flap": Model("ib_link_errors", 0.4, 2.0 * HOUR_S, 0.05),
    "thermal_throttle": Model("thermal", 0.5, 2.0 * HOUR_S, 0.3),
}
LEAD_SIGMA = 0.8  # of ln(lead): a factor ~2.2 either way for one standard deviation
LEAD_MIN_S = 180.0
LEAD_MAX_S = 6.0 * HOUR_S
# benign background error rates: per link, lognormal around these medians (errors per hour)
BACKGROUND_PER_H = {"nvlink_errors": 0.5, "pcie_replay": 0.3, "ib_link_errors": 1.0}
BACKGROUND_SIGMA = 1.2


@dataclass
class Episode:
    """A rising counter (or a warming GPU) on `gpus` or one `nic`, from `start_s` to `end_s`; `fault`: the hard
    fault it precedes (None: a decoy that fades at `end_s`)."""

    signal: str
    gpus: I64
    nic: int | None
    start_s: float
    end_s: float
    peak: float
    fault: ActiveFault | None = None

    def progress(self, t_s: float) -> float:
        """0 → 1 over the lead; 1 while a fan's fault lasts (the fan stays worn); 0 outside."""
        if self.start_s <= t_s < self.end_s:
            return (t_s - self.start_s) / max(1.0, self.end_s - self.start_s)
        if self.signal == "thermal" and self.fault is not None and self.fault.active(t_s):
            return 1.0
        return 0.0


@dataclass
class Precursors:
    episodes: list[Episode]
    rng: np.random.Generator
    nvlink_per_s: F64  # per GPU: benign background rates
    pcie_per_s: F64
    ib_per_s: F64  # per NIC

    @classmethod
    def of(cls, w: World) -> Precursors | None:
        spec = w.scenario.precursors
        if spec is None:
            return None
        lay = w.layout
        rng = np.random.default_rng([w.scenario.seed, STREAM])
        episodes: list[Episode] = []
        for f in w.faults:
            model = MODELS.get(f.kind)
            share = model.share if model is not None and spec.share is None else spec.share
            warns = model is not None and rng.random() < (share or 0.0)
            lead_s = _lead(rng, model, spec) if model is not None else 0.0
            if model is None or not warns:
                continue
            if model.signal == "ib_link_errors" and f.nic is None:
                continue
            if model.signal != "ib_link_errors" and f.gpus.size == 0:
                continue
            start_s = max(0.0, f.spec.start_s - lead_s)
            episodes.append(Episode(model.signal, f.gpus, f.nic, start_s, f.spec.start_s, model.peak, f))
        episodes += _decoys(w, rng, spec)

        def rates(count: int, signal: str) -> F64:
            if not spec.background:
                return np.zeros(count)
            median = BACKGROUND_PER_H[signal] / HOUR_S
            return median * np.exp(rng.normal(0.0, BACKGROUND_SIGMA, count))

        return cls(
            episodes,
            rng,
            rates(lay.gpu_count, "nvlink_errors"),
            rates(lay.gpu_count, "pcie_replay"),
            rates(lay.nic_count, "ib_link_errors"),
        )

    def apply(self, w: World, mods: Modifiers, dt_s: float) -> None:
        """This step's errors and warming (after the faults, before the physics)."""
        rng, t = self.rng, w.elapsed_s
        w.nvlink_crc += rng.poisson(self.nvlink_per_s * dt_s)
        w.pcie_replay += rng.poisson(self.pcie_per_s * dt_s)
        w.hca.counters[:, HCA["symbol_error"]] += rng.poisson(self.ib_per_s * dt_s)
        for e in self.episodes:
            p = e.progress(t)
            if p <= 0.0:
                continue
            if e.signal == "thermal":
                mods.r_mult[e.gpus] *= 1.0 + e.peak * p * p
                continue
            mean = e.peak * p * p * dt_s
            if e.signal == "ib_link_errors" and e.nic is not None:
                w.hca.counters[e.nic, HCA["symbol_error"]] += int(rng.poisson(mean))
                w.hca.counters[e.nic, HCA["link_error_recovery"]] += int(rng.poisson(mean / 20.0))
                continue
            drawn = rng.poisson(mean, e.gpus.size)
            if e.signal == "ecc_corrected":
                w.ecc_sbe[e.gpus] += drawn
            elif e.signal == "nvlink_errors":
                w.nvlink_crc[e.gpus] += drawn
                w.nvlink_replay[e.gpus] += rng.poisson(mean / 8.0, e.gpus.size)
            elif e.signal == "pcie_replay":
                w.pcie_replay[e.gpus] += drawn


def _lead(rng: np.random.Generator, model: Model, spec: PrecursorSpec) -> float:
    drawn = model.lead_median_s * math.exp(float(rng.normal(0.0, LEAD_SIGMA)))
    return spec.lead_s if spec.lead_s is not None else float(np.clip(drawn, LEAD_MIN_S, LEAD_MAX_S))


def _decoys(w: World, rng: np.random.Generator, spec: PrecursorSpec) -> list[Episode]:
    """Benign episodes: a Poisson count over the run, each on a random GPU (or NIC) with a kind's shape."""
    lay, duration_s = w.layout, w.scenario.duration_s
    count = int(rng.poisson(spec.decoys_per_node_day * lay.nodes * duration_s / DAY_S))
    kinds = sorted(MODELS)
    out: list[Episode] = []
    for _ in range(count):
        model = MODELS[kinds[int(rng.integers(0, len(kinds)))]]
        lead_s = _lead(rng, model, spec)
        start_s = float(rng.uniform(0.0, duration_s))
        if model.signal == "ib_link_errors":
            nic = int(rng.integers(0, lay.nic_count))
            out.append(
                Episode(
                    model.signal, np.array([], dtype=np.int64), nic, start_s, start_s + lead_s, model.peak
                )
            )
        else:
            gpu = np.array([int(rng.integers(0, lay.gpu_count))], dtype=np.int64)
            out.append(Episode(model.signal, gpu, None, start_s, start_s + lead_s, model.peak))
    return out
