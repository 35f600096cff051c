"""A job the product restarted waits by design (issue 34 item 1, aiops/detect/restarts.py). Over hand-built
telemetry (2 nodes x 4 GPUs, one job) where the job stops at 200 s, its GPUs idle, and it steps again from
`back_s`: with no execution behind it, that is an incident (`gpu_idle_in_job`, `job_stalled`); with the product's
executed `restart_job` (or a peer tier's) at 200 s, nothing opens; a restart that never brought the job back is
a symptom again once its grace has passed."""

from __future__ import annotations

from typing import Any

from aiops.detect import detect
from aiops.detect.restarts import GRACE_S
from aiops.store import Store
from guardrails.actions import Action
from guardrails.policy import ExecutionRecord
from guardrails.records import GuardrailRecords

T0 = 1_767_225_600.0
GPUS = [f"node{n}/gpu{g}" for n in range(2) for g in range(4)]
STOP_S = 200


def _telemetry(store: Store, back_s: int, duration_s: int) -> None:
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
    names = ("ts_s", "gpu", "node", "temp_c", "power_w", "power_limit_w", "power_limit_max_w")
    cols: dict[str, list[Any]] = {k: [] for k in (*names, "clocks_event_reasons", "util_pct")}
    steps: dict[str, list[Any]] = {"ts_s": [], "job": [], "step": [], "step_time_s": []}
    for t in range(duration_s):
        down = STOP_S <= t < back_s
        for gpu in GPUS:
            values = (T0 + t, gpu, gpu.split("/")[0], 45.0 if down else 62.0, 80.0 if down else 600.0)
            for key, value in zip(names, (*values, 700.0, 700.0), strict=True):
                cols[key].append(value)
            cols["clocks_event_reasons"].append(0x1 if down else 0)  # GpuIdle
            cols["util_pct"].append(0.0 if down else 98.0)
        if t % 2 == 0 and not down:
            for key, value in (("ts_s", T0 + t), ("job", "train"), ("step", t // 2), ("step_time_s", 2.0)):
                steps[key].append(value)
    store.ingest("gpu_samples", cols)
    store.ingest("job_steps", steps)


def _restarted(store: Store, at_s: float) -> None:
    """The product's executed restart_job, as the guardrails ledger records it."""
    records = GuardrailRecords(store)
    action = Action(
        proposal_id="P-restart",
        kind="restart_job",
        target="job:train",
        parameters={"from_checkpoint": "latest"},
        proposed_by="analyst",
        created_ts_s=T0 + at_s - 30,
    )
    records.save_proposal(action, status="executed", message="ok", physical=True, approvals_needed=1)
    assert records.claim(ExecutionRecord("P-restart", "restart_job", "job:train", frozenset(GPUS), T0 + at_s))
    records.finish("P-restart", "executed", {"kind": "restart_job", "parameters": {}, "detail": {}})
    records.stamp_data_ts("P-restart", T0 + at_s)


def _kinds(store: Store) -> set[str]:
    return {s.kind for i in detect(store) for s in i.symptoms}


def test_a_stop_nobody_ordered_is_an_incident() -> None:
    """The baseline the others rely on: without an execution, the idle job is a symptom."""
    with Store(":memory:") as store:
        _telemetry(store, back_s=320, duration_s=400)
        assert _kinds(store) & {"gpu_idle_in_job", "job_stalled"}


def test_a_restart_the_product_ran_opens_nothing() -> None:
    with Store(":memory:") as store:
        _telemetry(store, back_s=320, duration_s=400)
        _restarted(store, STOP_S - 0.5)
        assert detect(store) == []


def test_a_restart_another_tier_ran_opens_nothing() -> None:
    """What the fleet dispatched (or a node agent exported) is in peer_executions: it counts too."""
    with Store(":memory:") as store:
        _telemetry(store, back_s=320, duration_s=400)
        store.ingest(
            "peer_executions",
            {
                "source": ["fleet:main"],
                "proposal_id": ["P-fleet"],
                "kind": ["restart_job"],
                "target": ["job:train"],
                "units": [GPUS],
                "ts_s": [T0 + STOP_S - 0.5],
                "parameters": ["{}"],
                "seen_ts_s": [T0 + STOP_S],
            },
        )
        assert detect(store) == []


def test_a_restart_that_never_brought_the_job_back_is_caught_after_its_grace() -> None:
    with Store(":memory:") as store:
        duration_s = STOP_S + int(GRACE_S) + 120
        _telemetry(store, back_s=duration_s, duration_s=duration_s)
        _restarted(store, STOP_S - 0.5)
        found = detect(store)
        assert found, "a job still down past the grace is a symptom again"
        assert min(i.opened_ts_s for i in found) > T0 + STOP_S + GRACE_S - 60
