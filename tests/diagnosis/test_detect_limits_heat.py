"""Issue 40, item 1, at the detector: a GPU's temperature judged against its own temperature at the same load
(a GPU back at work after a long stall is not hot), and power limits as steps, each dated by its own onset and
judged against a DCIM cap in force at the time of the drop (is it below what the cap asked?)."""

from __future__ import annotations

import math

from aiops.detect import detect
from aiops.detect.heat import LoadedTemperature, load_level
from aiops.detect.limits import LimitSteps, cap_levels
from aiops.store import Store
from tests.diagnosis.test_detect_rca_synthetic import GPUS, T0, topology

TAU_S = 30.0  # a die and cold plate's thermal time constant


def test_a_limit_lowered_again_is_a_step_of_its_own_judged_against_the_cap() -> None:
    steps = LimitSteps()
    assert steps.update("g", 700.0, 10.0) is None
    cap = ("rack0", 480.0)
    at = steps.update("g", 480.0, 120.0, cap)  # the cap brings the rack to 480 W
    assert at is not None and (at.since_ts_s, at.was_w, at.cap) == (120.0, 700.0, "at")
    same = steps.update("g", 480.0, 130.0, cap)
    assert same is not None and same.since_ts_s == 120.0  # the same step, seen again
    below = steps.update("g", 280.0, 330.0, cap)  # lowered again, well below what the cap asked
    assert below is not None and (below.since_ts_s, below.was_w, below.cap) == (330.0, 480.0, "below")
    back = steps.update("g", 480.0, 400.0, cap)  # put back to the cap's level: the cap's step, its onset kept
    assert back is not None and back.since_ts_s == 120.0
    assert steps.update("g", 700.0, 500.0) is None  # the cap lifted
    without = LimitSteps()
    without.update("h", 700.0, 10.0)
    lone = without.update("h", 280.0, 50.0)
    assert lone is not None and lone.cap is None and "cap" not in lone.detail()


def test_what_a_cap_asked_is_the_level_of_its_scope_not_of_the_gpus_lowered_further() -> None:
    limits = {f"node{n}/gpu{g}": 480.0 for n in range(4) for g in range(8)}
    limits.update({f"node1/gpu{g}": 280.0 for g in range(8)})  # a quarter of the rack lowered further
    limits["node5/gpu0"] = 700.0  # another rack, not capped
    rack_of = {g: ("rack0" if int(g[4]) < 4 else "rack1") for g in limits}
    levels = cap_levels(limits, ["rack0"], rack_of)
    assert levels["node1/gpu0"] == ("rack0", 480.0) and levels["node0/gpu3"] == ("rack0", 480.0)
    assert "node5/gpu0" not in levels
    # a GPU of unknown rack is under a fleet cap only
    assert cap_levels({"x/gpu0": 400.0}, ["rack0"], {"x/gpu0": None}) == {}
    assert cap_levels({"x/gpu0": 400.0}, ["fleet"], {"x/gpu0": None}) == {"x/gpu0": ("fleet", 400.0)}


def _temps(powers_w: list[float], start_c: float = 32.0, r_c_per_w: float = 0.05) -> list[float]:
    """First-order thermal response, one value per 10 s window."""
    out, temp = [], start_c
    for power in powers_w:
        target = 28.0 + power * r_c_per_w
        temp += (target - temp) * (1.0 - math.exp(-10.0 / TAU_S))
        out.append(temp)
    return out


def test_a_gpu_back_at_its_loaded_temperature_after_a_stall_is_not_hot_and_a_hot_one_is() -> None:
    busy, spin, idle = 620.0, 340.0, 80.0
    # idle until the job starts, five minutes at work, six standing still, back to work, and a second stall
    powers = [idle] * 12 + [busy] * 30 + [spin] * 36 + [busy] * 30 + [spin] * 12
    heat = LoadedTemperature(window_s=10.0)
    hot = [
        heat.hot("g", t, load_level(p, 700.0), judge=i >= 3)
        for i, (p, t) in enumerate(zip(powers, _temps(powers), strict=True))
    ]
    assert not any(hot)
    # one baseline over every load would have learnt the stall's temperature and flagged the return
    single = LoadedTemperature(window_s=10.0)
    flagged = [single.hot("g", t, None, judge=i >= 3) for i, t in enumerate(_temps(powers))]
    assert any(flagged[78:108])
    # a GPU whose cooling fails at work runs hot for its load
    loaded = _temps([busy] * 30, start_c=59.0)
    failing = loaded + _temps([busy] * 20, start_c=loaded[-1], r_c_per_w=0.08)
    judged = LoadedTemperature(window_s=10.0)
    verdicts = [judged.hot("g", t, load_level(busy, 700.0), judge=i >= 3) for i, t in enumerate(failing)]
    assert not any(verdicts[:30]) and all(verdicts[33:])


def _fill(
    store: Store,
    powers_w: dict[str, list[float]],
    r_c_per_w: dict[str, list[float]],
    inlet_c: dict[str, float] | None = None,
) -> None:
    """1 Hz GPU samples whose temperature follows power through a first-order model; `inlet_c` warms a GPU's air
    (its place in the node's airflow) by that much for the whole run."""
    topology(store)
    cols: dict[str, list[object]] = {
        k: [] for k in ("ts_s", "gpu", "node", "temp_c", "power_w", "power_limit_w", "power_limit_max_w")
    }
    for gpu in GPUS:
        temp = 60.0
        for t, (power, r) in enumerate(zip(powers_w[gpu], r_c_per_w[gpu], strict=True)):
            temp += (28.0 + (inlet_c or {}).get(gpu, 0.0) + power * r - temp) * (1.0 - math.exp(-1.0 / TAU_S))
            for key, value in (
                ("ts_s", T0 + t),
                ("gpu", gpu),
                ("node", gpu.split("/")[0]),
                ("temp_c", temp + 0.3 * math.sin(t * 1.7 + len(cols["ts_s"]))),
                ("power_w", power),
                ("power_limit_w", 700.0),
                ("power_limit_max_w", 700.0),
            ):
                cols[key].append(value)
    store.ingest("gpu_samples", cols)


def test_the_detector_sees_no_heat_in_a_return_to_work_and_sees_a_cooling_failure(store: Store) -> None:
    duration = 960
    stall = [340.0 if 200 <= t < 560 else 620.0 for t in range(duration)]  # six minutes spinning in NCCL
    powers = {g: stall for g in GPUS}
    # node1/gpu2's cold plate fails at 760 s
    r_c_per_w = {
        g: [0.08 if (g == "node1/gpu2" and t >= 760) else 0.05 for t in range(duration)] for g in GPUS
    }
    _fill(store, powers, r_c_per_w)
    incidents = detect(store)
    hot = {(s.component, round(s.ts_s - T0)) for i in incidents for s in i.symptoms if s.kind == "gpu_hot"}
    assert {gpu for gpu, _ in hot} == {"node1/gpu2"}, hot
    assert all(ts >= 760 for _, ts in hot)
