"""The lemon score: which GPUs and nodes to take out of service, from their own history (aiops.memory.history).

    score(c) = sum over c's faults i in the window   2^(-age_i / H) * (1 + repeat_i)
             + sum over c's actions j whose verified outcome was `failed`   0.5 * 2^(-age_j / H)

- a fault is an incident whose top hypothesis names c (a node: it or one of its GPUs/NICs) with a cause that is
  a fault of the component itself (`FAULT_LABELS`: ECC, off the bus, NVLink, PCIe, heat, power brake, link
  flaps, driver/firmware); configuration, facility, rack, workload and benign causes do not count: they say
  nothing about the hardware;
- `repeat_i` is 1 when the same cause had failed on the same component before and a repair (`gpu_reset`,
  `reboot_node`) ran between: the repair did not hold, the strongest sign that the part is bad (Meta's and
  NVIDIA's fleet practice: failures that come back after a reset or reboot go to RMA);
- a remedy the closed loop verified as `failed` is weaker evidence (0.5): it may have been the wrong remedy;
- `H`, the half-life, is 7 days and the window 30 days: a GPU that failed once a month ago and ran clean since
  is not a lemon; one that failed three times this week is.
One fresh fault scores 1; a fault back after a repair 1 + 2 = 3; three faults with two repairs between, 5.
`OUT_OF_SERVICE_SCORE` (4) is where the ranking says "take it out"; the plan builder's RMA choice is
`rma_verdict`: the same fault came back after repairs `RMA_AFTER_REPEATS` (2) times, i.e. the third
occurrence after two resets that did not hold (one repeat can be bad luck, a second row remap after a
reset; two are a lemon). Then the next step is the RMA ticket, not another reset.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiops.memory.history import DAY_S, DEFAULT_WINDOW_S, ComponentHistory, component_history, newest_ts_s
from aiops.store import Store

HALF_LIFE_S = 7 * DAY_S
FAILED_OUTCOME_WEIGHT = 0.5
OUT_OF_SERVICE_SCORE = 4.0
RMA_AFTER_REPEATS = 2


@dataclass(frozen=True)
class LemonScore:
    component: str
    score: float
    fault_count: int  # faults in the window (not `faults`: only the simulator and scorer read that name)
    repeats: int
    failed_outcomes: int
    last_fault_ts_s: float | None

    @property
    def take_out(self) -> bool:
        return self.score >= OUT_OF_SERVICE_SCORE

    def why(self) -> str:
        parts = [f"{self.fault_count} fault(s)"]
        if self.repeats:
            parts.append(f"{self.repeats} back after a repair")
        if self.failed_outcomes:
            parts.append(f"{self.failed_outcomes} remedy(ies) that did not work")
        return f"lemon score {self.score:.1f}: " + ", ".join(parts)


@dataclass(frozen=True)
class RmaVerdict:
    component: str
    root_cause: str
    due: bool
    occurrences: int  # of this cause on this component in the window
    repeats: int  # of them, back after a repair
    repairs: tuple[str, ...]  # the repairs that did not hold (proposal ids)
    reason: str


def _decay(age_s: float, half_life_s: float) -> float:
    return float(2.0 ** (-max(age_s, 0.0) / half_life_s))


def lemon_score(
    history: ComponentHistory, now_ts_s: float, *, half_life_s: float = HALF_LIFE_S
) -> LemonScore:
    faults = [f for f in history.failures if f.fault]
    repeats = {f.incident_id for f in history.repeats() if f.fault}
    failed = [a for a in history.actions if a.outcome == "failed"]
    score = sum(_decay(now_ts_s - f.ts_s, half_life_s) * (1 + (f.incident_id in repeats)) for f in faults)
    score += sum(FAILED_OUTCOME_WEIGHT * _decay(now_ts_s - a.ts_s, half_life_s) for a in failed)
    last = max((f.ts_s for f in faults), default=None)
    return LemonScore(history.component, round(score, 3), len(faults), len(repeats), len(failed), last)


def rma_verdict(
    store: Store,
    component: str,
    root_cause: str,
    *,
    now_ts_s: float | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    after_repeats: int = RMA_AFTER_REPEATS,
) -> RmaVerdict:
    """Whether `component` should go to RMA for `root_cause` now (the plan builder asks before offering another
    reset): the cause came back after a repair `after_repeats` times in the window."""
    history = component_history(store, component, now_ts_s=now_ts_s, window_s=window_s)
    same = [f for f in history.failures if f.root_cause == root_cause and f.component == component]
    back = [f for f in history.repeats() if f.root_cause == root_cause and f.component == component]
    repairs: list[str] = []
    if same:
        ends = same[-1].ts_s if len(same) > 1 else same[0].ts_s
        repairs = [a.proposal_id for a in history.repairs_between(same[0].ts_s, ends, component)]
    due = bool(same) and len(back) >= after_repeats
    span_d = (same[-1].ts_s - same[0].ts_s) / DAY_S if len(same) > 1 else 0.0
    score = lemon_score(history, now_ts_s if now_ts_s is not None else (newest_ts_s(store) or 0.0))
    if due:
        reason = (
            f"{component}: {root_cause} {len(same)} times in {span_d:.1f} days, back after {len(repairs)} "
            f"repair(s) ({', '.join(repairs[:4])}) that did not hold; {score.why()}: RMA, not another reset"
        )
    else:
        reason = (
            f"{component}: {root_cause} {len(same)} time(s) in the last {window_s / DAY_S:.0f} days, "
            f"{len(back)} back after a repair (RMA after {after_repeats}); {score.why()}"
        )
    return RmaVerdict(component, root_cause, due, len(same), len(back), tuple(repairs), reason)


def components_seen(store: Store, since_ts_s: float) -> list[str]:
    """GPUs and nodes named by a top hypothesis since `since_ts_s` (a GPU's node too)."""
    rows = store.query(
        "SELECT DISTINCT h.component FROM hypotheses h JOIN incidents i USING (incident_id) "
        "WHERE h.rank = 1 AND i.opened_ts_s >= ?",
        [since_ts_s],
    )
    names: set[str] = set()
    for r in rows:
        name = str(r["component"])
        if name == "fleet" or name.startswith(("job:", "policy:")):
            continue
        names.add(name)
        if "/" in name:
            names.add(name.split("/", 1)[0])
    return sorted(names)


def lemon_ranking(
    store: Store,
    *,
    now_ts_s: float | None = None,
    window_s: float = DEFAULT_WINDOW_S,
    limit: int = 50,
    racks: frozenset[str] = frozenset(),
) -> list[LemonScore]:
    """GPUs and nodes with a fault in the window, highest score first (ties: newest fault first)."""
    now = now_ts_s if now_ts_s is not None else (newest_ts_s(store) or 0.0)
    scores = []
    for component in components_seen(store, now - window_s):
        if component in racks:
            continue
        score = lemon_score(component_history(store, component, now_ts_s=now, window_s=window_s), now)
        if score.fault_count:
            scores.append(score)
    # ties: the newest fault first, then the part before the node that holds it (the GPU says more)
    scores.sort(key=lambda s: (-s.score, -(s.last_fault_ts_s or 0.0), "/" not in s.component, s.component))
    return scores[:limit]
