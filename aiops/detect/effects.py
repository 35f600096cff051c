"""Did an executed action work? The checks that judge an action's effect from telemetry once its verify window
has passed (issue 34 item 2; contract 3: `verify: {within_s, expect}`, `expect` one of `CHECKS`).

Each check reads the window's last part, the *settled* part (`settle_s`: the last third of the window, 30 to 120
s), where the effect should show, against the minute before the action ran: never the twin, only what the
collectors stored (this is the analyst's layer). A check answers `worked`, `failed` or `unknown` (no telemetry
to judge by: a gap, a GPU gone) with a one-line detail in numbers.

| check | worked when, in the settled part of the window |
| --- | --- |
| `temp_below_slowdown` | every target GPU below its slowdown temperature and no thermal slowdown reason (the GPU cooled) |
| `throttle_gone` | no throttle reason on the target GPUs, SwPowerCap at a limit the product set (or the GPU's maximum) aside |
| `step_time_recovered` | the target's jobs step within `STEP_SLACK` of their reference (the median before the incident) |
| `flap_stopped` | no carrier change on the target NICs and every link up |
| `lanes_clean` | no collective traffic in a low lane (nor bulk in the VIP lane) on the target NICs |
| `ecn_marking` | the target NICs lose (drops + retransmits) at most a tenth of the minute before, or mark CE |
| `gpu_healthy` | the target GPUs answer NVML and raise no XID |
| `symptom_gone` | none of the incident's symptoms seen again (those on a node the action took out of service aside) |
| `check_ran` | the check ran (a digital re-run: its execution is the effect) |
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiops.models import Incident
from aiops.nvml_bits import SW_POWER_CAP, THERMAL, THROTTLE
from aiops.store import Store
from guardrails.intended import Intended

STEP_SLACK = 0.10  # step time back within 10 % of the reference counts as recovered
REFERENCE_S = 600.0  # the reference step time: the median over this long before the incident (or the action)
BEFORE_S = 60.0  # "before": the minute before the action ran
OUT_OF_SERVICE = ("drain_node", "reboot_node", "gpu_reset")


@dataclass(frozen=True)
class Verdict:
    verdict: str  # worked | failed | unknown
    detail: str


@dataclass(frozen=True)
class Judged:
    """What a check looks at: the action's targets expanded, its window, the incident it remedies."""

    kind: str
    target: str
    gpus: Sequence[str]
    nics: Sequence[str]
    nodes: Sequence[str]
    jobs: Sequence[str]
    set_ts_s: float
    within_s: float
    incident: Incident | None = None
    intended: dict[tuple[str, str], Intended] = field(default_factory=dict)

    @property
    def end_s(self) -> float:
        return self.set_ts_s + self.within_s

    @property
    def settle_s(self) -> float:
        return min(120.0, max(30.0, self.within_s / 3))

    @property
    def settled_from_s(self) -> float:
        return max(self.set_ts_s, self.end_s - self.settle_s)


Check = Callable[[Store, Judged], Verdict]


def _settled(j: Judged) -> list[Any]:
    return [j.settled_from_s, j.end_s]


def temp_below_slowdown(store: Store, j: Judged) -> Verdict:
    if not j.gpus:
        return Verdict("unknown", f"{j.target} has no GPU to judge")
    rows = store.query(
        f"""SELECT gpu, max(temp_c) AS temp_c, max(slowdown_temp_c) AS slowdown_c,
                   count(*) FILTER (WHERE coalesce(clocks_event_reasons, 0) & {THERMAL} <> 0) AS hot, count(*) AS n
            FROM gpu_samples WHERE ts_s > ? AND ts_s <= ? AND list_contains(?, gpu) AND temp_c IS NOT NULL
            GROUP BY gpu ORDER BY gpu""",
        [*_settled(j), list(j.gpus)],
    )
    if not rows:
        return Verdict("unknown", f"no temperature of {j.target} in the settled window")
    hot = [r for r in rows if r["hot"] or (r["slowdown_c"] is not None and r["temp_c"] >= r["slowdown_c"])]
    peak = max(rows, key=lambda r: float(r["temp_c"]))
    seen = f"{len(rows)} GPUs, peak {float(peak['temp_c']):.0f} °C on {peak['gpu']}"
    if hot:
        return Verdict(
            "failed", f"{len(hot)} of {seen}: still at or above the slowdown temperature or slowed"
        )
    return Verdict("worked", f"{seen}: below the slowdown temperature, no thermal slowdown")


def throttle_gone(store: Store, j: Judged) -> Verdict:
    if not j.gpus:
        return Verdict("unknown", f"{j.target} has no GPU to judge")
    rows = store.query(
        f"""SELECT gpu, count(*) AS n,
                   count(*) FILTER (WHERE coalesce(clocks_event_reasons, 0) & {THROTTLE & ~SW_POWER_CAP} <> 0) AS hard,
                   count(*) FILTER (WHERE coalesce(clocks_event_reasons, 0) & {THROTTLE} = {SW_POWER_CAP}
                                    AND power_limit_w < power_limit_max_w) AS capped,
                   min(power_limit_w) AS limit_w
            FROM gpu_samples WHERE ts_s > ? AND ts_s <= ? AND list_contains(?, gpu) GROUP BY gpu""",
        [*_settled(j), list(j.gpus)],
    )
    if not rows:
        return Verdict("unknown", f"no samples of {j.target} in the settled window")
    throttled = []
    for r in rows:
        limit_set = j.intended.get((str(r["gpu"]), "power_limit_w"))
        capped_by_us = limit_set is not None and limit_set.matches(r["limit_w"])
        if r["hard"] or (r["capped"] and not capped_by_us):
            throttled.append(str(r["gpu"]))
    if throttled:
        return Verdict(
            "failed", f"{len(throttled)} of {len(rows)} GPUs still throttled: {', '.join(throttled[:4])}"
        )
    return Verdict("worked", f"{len(rows)} GPUs without a throttle reason")


def _jobs_of(store: Store, j: Judged) -> list[str]:
    if j.jobs:
        return list(j.jobs)
    rows = store.query(
        "SELECT DISTINCT job FROM job_ranks WHERE list_contains(?, gpu) OR list_contains(?, node) ORDER BY job",
        [list(j.gpus), list(j.nodes)],
    )
    return [str(r["job"]) for r in rows]


def step_time_recovered(store: Store, j: Judged) -> Verdict:
    jobs = _jobs_of(store, j)
    if not jobs:
        return Verdict("unknown", f"no job runs on {j.target}")
    before = j.incident.opened_ts_s if j.incident is not None else j.set_ts_s
    out: list[str] = []
    slow: list[str] = []
    for job in jobs:
        ref = store.scalar(
            "SELECT median(step_time_s) FROM job_steps WHERE job = ? AND ts_s >= ? AND ts_s < ?",
            [job, before - REFERENCE_S, before],
        )
        now = store.scalar(
            "SELECT median(step_time_s) FROM job_steps WHERE job = ? AND ts_s > ? AND ts_s <= ?",
            [job, *_settled(j)],
        )
        if ref is None:
            continue
        if now is None:
            slow.append(f"job:{job} made no step (reference {float(ref):.2f} s)")
            continue
        ratio = float(now) / float(ref)
        text = (
            f"job:{job} {float(now):.2f} s/step vs {float(ref):.2f} s reference ({100 * (ratio - 1):+.0f} %)"
        )
        (slow if ratio > 1 + STEP_SLACK else out).append(text)
    if not out and not slow:
        return Verdict("unknown", f"no reference step time for {', '.join(jobs[:3])}")
    if slow:
        return Verdict("failed", "; ".join([*slow, *out])[:300])
    return Verdict("worked", "; ".join(out)[:300])


def _nics(store: Store, j: Judged) -> list[str]:
    if j.nics:
        return list(j.nics)
    rows = store.query(
        "SELECT component FROM topology WHERE kind = 'nic' AND list_contains(?, node)", [j.nodes]
    )
    return [str(r["component"]) for r in rows]


def flap_stopped(store: Store, j: Judged) -> Verdict:
    nics = _nics(store, j)
    row = store.query(
        """SELECT count(*) AS n, coalesce(sum(carrier_changes), 0) AS changes,
                  bool_and(coalesce(link_up, true)) AS up
           FROM nic_samples WHERE ts_s > ? AND ts_s <= ? AND list_contains(?, nic)""",
        [*_settled(j), nics],
    )[0]
    if not row["n"]:
        return Verdict("unknown", f"no NIC samples of {j.target} in the settled window")
    if row["changes"] or not row["up"]:
        return Verdict("failed", f"{int(row['changes'])} carrier changes, links up: {bool(row['up'])}")
    return Verdict("worked", f"{len(nics)} NICs: no carrier change, links up")


def lanes_clean(store: Store, j: Judged) -> Verdict:
    nics = _nics(store, j)
    rows = store.query(
        """WITH f AS (SELECT nic, traffic_class, lane, sum(tx_bytes) AS b FROM flow_class_samples
                      WHERE ts_s > ? AND ts_s <= ? AND list_contains(?, nic) GROUP BY ALL),
                t AS (SELECT nic, sum(b) AS total FROM f GROUP BY nic)
           SELECT f.nic, f.traffic_class, f.lane, f.b / nullif(t.total, 0) AS share FROM f JOIN t USING (nic)""",
        [*_settled(j), nics],
    )
    if not rows:
        return Verdict("unknown", f"no traffic classes of {j.target} in the settled window")
    wrong = [
        f"{r['traffic_class']} in {r['lane']} on {r['nic']}"
        for r in rows
        if (r["share"] or 0) >= 0.01
        and (
            (r["traffic_class"] == "collective" and r["lane"] in ("bulk", "standard"))
            or (r["traffic_class"] == "bulk" and r["lane"] == "vip")
        )
    ]
    if wrong:
        return Verdict("failed", "; ".join(wrong[:4]))
    return Verdict("worked", f"{len({r['nic'] for r in rows})} NICs: every class in its lane")


def ecn_marking(store: Store, j: Judged) -> Verdict:
    nics = _nics(store, j)

    def loss(start: float, end: float) -> dict[str, Any]:
        return store.query(
            """SELECT count(*) AS n, coalesce(sum(drops), 0) + coalesce(sum(retransmits), 0) AS lost,
                      coalesce(sum(ce_marks), 0) AS ce
               FROM nic_samples WHERE ts_s > ? AND ts_s <= ? AND list_contains(?, nic)""",
            [start, end, nics],
        )[0]

    before, after = loss(j.set_ts_s - BEFORE_S, j.set_ts_s), loss(*_settled(j))
    if not after["n"]:
        return Verdict("unknown", f"no NIC samples of {j.target} in the settled window")
    seconds = max(j.end_s - j.settled_from_s, 1.0)
    rate, was = float(after["lost"]) / seconds, float(before["lost"]) / BEFORE_S
    text = f"{rate:.1f} lost/s (before: {was:.1f}/s), {int(after['ce'])} CE marks"
    if after["ce"] > 0 or rate <= max(20.0 / seconds, 0.1 * was):
        return Verdict("worked", text)
    return Verdict("failed", text)


def gpu_healthy(store: Store, j: Judged) -> Verdict:
    if not j.gpus:
        return Verdict("unknown", f"{j.target} has no GPU to judge")
    row = store.query(
        """SELECT count(*) AS n, count(nvml_error) AS errors, count(DISTINCT gpu) AS gpus
           FROM gpu_samples WHERE ts_s > ? AND ts_s <= ? AND list_contains(?, gpu)""",
        [*_settled(j), list(j.gpus)],
    )[0]
    xids = store.scalar(
        "SELECT count(*) FROM gpu_events WHERE kind = 'xid' AND ts_s > ? AND ts_s <= ? AND list_contains(?, gpu)",
        [*_settled(j), list(j.gpus)],
    )
    if not row["n"]:
        return Verdict("unknown", f"no samples of {j.target} in the settled window")
    if row["errors"] or xids:
        return Verdict("failed", f"{int(row['errors'])} NVML errors, {int(xids or 0)} XIDs on {j.target}")
    return Verdict("worked", f"{int(row['gpus'])} GPUs answer NVML, no XID")


def symptom_gone(store: Store, j: Judged) -> Verdict:
    incident = j.incident
    if incident is None:
        return Verdict("unknown", "no incident to judge by")
    out_of_service = set(j.nodes) if j.kind in OUT_OF_SERVICE else set()
    seen = []
    for s in incident.symptoms:
        node = s.component.split("/", 1)[0]
        if node in out_of_service:
            continue  # a node taken out of service may stay faulty: what it carried moved away
        last = float(s.detail.get("last_ts_s", s.ts_s))
        if last > j.settled_from_s:
            seen.append(f"{s.kind} on {s.component}")
    if seen:
        return Verdict("failed", f"still seen: {', '.join(seen[:4])}")
    if incident.resolved_ts_s is not None:
        return Verdict("worked", f"{incident.incident_id} resolved; no symptom seen again")
    return Verdict("worked", f"no symptom of {incident.incident_id} seen in the settled window")


def check_ran(store: Store, j: Judged) -> Verdict:
    return Verdict("worked", f"{j.kind} ran on {j.target}")


CHECKS: dict[str, Check] = {
    "temp_below_slowdown": temp_below_slowdown,
    "throttle_gone": throttle_gone,
    "step_time_recovered": step_time_recovered,
    "flap_stopped": flap_stopped,
    "lanes_clean": lanes_clean,
    "ecn_marking": ecn_marking,
    "gpu_healthy": gpu_healthy,
    "symptom_gone": symptom_gone,
    "check_ran": check_ran,
}

# The window and check of each kind when neither a plan step nor the playbook says: how long the effect takes
# to show (a GPU's thermal time constant is tens of seconds; a job restarts from its checkpoint in minutes).
# Tickets and acknowledgements are not judged.
DEFAULTS: dict[str, tuple[float, str]] = {
    "set_power_limit": (180.0, "temp_below_slowdown"),
    "set_clock_limit": (180.0, "temp_below_slowdown"),
    "set_cooling_state": (300.0, "temp_below_slowdown"),
    "set_fan_speed": (300.0, "temp_below_slowdown"),
    "reset_power_limit": (120.0, "throttle_gone"),
    "migrate_job": (600.0, "step_time_recovered"),
    "restart_job": (600.0, "step_time_recovered"),
    "drain_node": (600.0, "symptom_gone"),
    "gpu_reset": (300.0, "gpu_healthy"),
    "reboot_node": (1200.0, "gpu_healthy"),
    "enable_lanes": (120.0, "lanes_clean"),
    "update_lane_rule": (120.0, "lanes_clean"),
    "set_lane_rate": (180.0, "step_time_recovered"),
    "enable_ecn": (120.0, "ecn_marking"),
    "rerun_check": (60.0, "check_ran"),
}


def judge(store: Store, expect: str, judged: Judged) -> Verdict:
    """The verdict of check `expect` (one of `CHECKS`; an unknown name is `unknown`, said in the detail)."""
    check = CHECKS.get(expect)
    if check is None:
        return Verdict("unknown", f"no check named {expect[:40]!r} (checks: {', '.join(CHECKS)})")
    return check(store, judged)
