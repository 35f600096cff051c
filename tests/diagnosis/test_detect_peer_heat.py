"""Probe 2026-12-07 at the detector: a GPU's cooling fails while its job stands (here idle after five minutes at
work; in the probe a link flapping past the IB retry window restarted the job every minute). Against its own
temperature at load it is not hot (44 °C against 59 °C at work), yet it runs 12 °C above its node's other GPUs at
their power: `gpu_hot` from the peer comparison (aiops/peer_heat.py), and the same GPUs without the failure stay
quiet. 1 Hz samples through the detector, as tests/diagnosis/test_detect_limits_heat.py writes them."""

from __future__ import annotations

from aiops.detect import detect
from aiops.store import Store
from tests.diagnosis.test_detect_limits_heat import _fill
from tests.diagnosis.test_detect_rca_synthetic import GPUS, T0

DURATION_S = 900
WORK = [620.0 if t < 300 else 80.0 for t in range(DURATION_S)]  # the job stands from 300 s


def _hot(failing: str | None, inlet_c: dict[str, float] | None = None, since_s: float = 400.0) -> set[str]:
    r_c_per_w = {g: [0.2 if (g == failing and t >= 400) else 0.05 for t in range(DURATION_S)] for g in GPUS}
    with Store(":memory:") as store:
        _fill(store, {g: WORK for g in GPUS}, r_c_per_w, inlet_c)
        incidents = detect(store)
    return {
        s.component for i in incidents for s in i.symptoms if s.kind == "gpu_hot" and s.ts_s >= T0 + since_s
    }


def test_a_gpu_far_above_its_node_peers_at_their_power_is_hot_while_its_job_stands() -> None:
    assert _hot("node1/gpu2") == {"node1/gpu2"}


def test_the_same_gpus_without_the_failure_are_not() -> None:
    assert _hot(None) == set()


def test_a_gpu_its_place_keeps_above_its_peers_is_not_hot_for_that() -> None:
    """An air-cooled node's GPU downstream in the airflow runs a fixed 16 °C above its peers, at work and at
    rest, for the whole run: its normal, learnt, never `gpu_hot`; its cooling failing on top of that still is."""
    assert _hot(None, {"node1/gpu2": 16.0}, since_s=0.0) == set()
    assert _hot("node1/gpu2", {"node1/gpu2": 16.0}) == {"node1/gpu2"}


def test_a_gpu_cooler_than_its_peers_at_work_is_not_hot_when_level_with_them_at_rest() -> None:
    """Seed 71207 through the fleet's 15 s samples: node7/gpu2 ran 3-5 °C below its node's other GPUs at work;
    when an ECC error on another node stopped the job it cooled with them and ran level with them at 80 W. Its
    thermal resistance scales with power, so that move is the peers' power falling, not heat: no `gpu_hot` (it
    had opened a second incident for the one fault). Here its cold plate is the better one (0.042 °C/W against
    0.05) and the job stands from 300 s on."""
    r_c_per_w = {g: [0.042 if g == "node1/gpu2" else 0.05] * DURATION_S for g in GPUS}
    with Store(":memory:") as store:
        _fill(store, {g: WORK for g in GPUS}, r_c_per_w)
        hot = {s.component for i in detect(store) for s in i.symptoms if s.kind == "gpu_hot"}
    assert hot == set()
