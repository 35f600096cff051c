"""Detection and the analyst over hand-built telemetry (independent of the simulator)."""

from __future__ import annotations

import numpy as np

from aiops.detect import detect
from aiops.rca import analyze
from aiops.store import Store

T0 = 1_767_225_600.0
GPUS = [f"node{n}/gpu{g}" for n in range(2) for g in range(4)]


def topology(store: Store) -> None:
    """rack0 of node0 and node1, four GPUs each (`GPUS`)."""
    store.ingest(
        "topology",
        {
            "component": ["rack0", "node0", "node1", *GPUS],
            "kind": ["rack", "node", "node", *(["gpu"] * len(GPUS))],
            "parent": ["fleet", "rack0", "rack0", *[g.split("/")[0] for g in GPUS]],
            "rack": ["rack0"] * (3 + len(GPUS)),
            "node": [None, "node0", "node1", *[g.split("/")[0] for g in GPUS]],
            "idx": [0, 0, 1, *[int(g[-1]) for g in GPUS]],
        },
    )


def _fill(store: Store, duration_s: int = 400, hot_gpu: str | None = None, hot_from_s: int = 10**9) -> None:
    rng = np.random.default_rng(1)
    topology(store)
    store.ingest(
        "job_ranks",
        {
            "job": ["train"] * len(GPUS),
            "rank": list(range(len(GPUS))),
            "gpu": GPUS,
            "node": [g.split("/")[0] for g in GPUS],
            "nic": [g.split("/")[0] + "/nic0" for g in GPUS],
        },
    )
    cols: dict[str, list[object]] = {
        k: []
        for k in (
            "ts_s",
            "gpu",
            "node",
            "temp_c",
            "power_w",
            "power_limit_w",
            "power_limit_max_w",
            "clocks_event_reasons",
            "util_pct",
            "ecc_dbe_total",
            "pcie_replay_total",
            "pcie_link_width",
            "pcie_link_max_width",
            "nvlink_crc_total",
            "nvlink_replay_total",
            "slowdown_temp_c",
        )
    }
    steps: dict[str, list[object]] = {"ts_s": [], "job": [], "step": [], "step_time_s": [], "slowest_gpu": []}
    for t in range(duration_s):
        hot = t >= hot_from_s
        for i, gpu in enumerate(GPUS):
            heating = hot and gpu == hot_gpu
            temp = 65 + i * 0.5 + rng.normal(0, 0.4) + (min(25.0, (t - hot_from_s) * 0.5) if heating else 0)
            reasons = 0x20 if heating and temp > 86 else 0
            for key, value in (
                ("ts_s", T0 + t),
                ("gpu", gpu),
                ("node", gpu.split("/")[0]),
                ("temp_c", temp),
                ("power_w", 600.0),
                ("power_limit_w", 700.0),
                ("power_limit_max_w", 700.0),
                ("clocks_event_reasons", reasons),
                ("util_pct", 97.0),
                ("ecc_dbe_total", 0),
                ("pcie_replay_total", 0),
                ("pcie_link_width", 16),
                ("pcie_link_max_width", 16),
                ("nvlink_crc_total", 0),
                ("nvlink_replay_total", 0),
                ("slowdown_temp_c", 87.0),
            ):
                cols[key].append(value)
        throttling = hot and t - hot_from_s > 45
        steps["ts_s"].append(T0 + t)
        steps["job"].append("train")
        steps["step"].append(t)
        steps["step_time_s"].append((1.4 if throttling else 1.0) * (1 + rng.normal(0, 0.01)))
        steps["slowest_gpu"].append(hot_gpu if throttling else GPUS[t % len(GPUS)])
    store.ingest("gpu_samples", cols)
    store.ingest("job_steps", steps)


def test_healthy_stream_opens_no_incident(store: Store) -> None:
    _fill(store)
    assert detect(store) == []


def test_throttling_gpu_is_the_cause_not_its_job(store: Store) -> None:
    _fill(store, hot_gpu="node1/gpu2", hot_from_s=200)
    incidents = detect(store)
    assert len(incidents) == 1
    incident = incidents[0]
    assert incident.opened_ts_s >= T0 + 200
    kinds = {s.kind for s in incident.symptoms}
    assert {"gpu_throttle", "step_regression"} <= kinds
    hypotheses = analyze(store, incident)
    top = hypotheses[0]
    assert (top.root_cause, top.component) == ("thermal_throttle", "node1/gpu2")
    assert top.evidence and all(e.sql.upper().startswith(("SELECT", "WITH")) for e in top.evidence)
    # every cited query re-runs to the same rows it recorded
    first = top.evidence[0]
    rerun = store.query(first.sql, first.params)
    assert len(rerun) >= len(first.rows) > 0
    # persisted for other tools
    assert store.scalar("SELECT count(*) FROM incidents") == 1
