"""Power caps for a thermal fault, on the GPUs that are hot and nowhere else unless the job's own numbers say so
(issue 34: one hot node's fault used to cap all 8 nodes of its job, "same job: capped alike"). Pure apart from
its inputs (`ThermalInputs`, the thermal manager's `ThermalReport`).

- The hot GPUs of a node are capped (one action per GPU; the node, when all its GPUs are hot). The limit is
  worked out from the heat to shed: a GPU projected `horizon_s` ahead (its trend) at P °C should stay under
  slowdown - hot_headroom_c (82 °C on an H100); shedding (P - 82) / R_th watts (R_th 0.055 °C/W, die to
  coolant) gets it there. The limit is the GPU's draw (or its present limit, if lower) less that, inside the
  guardrails' envelope (40 % of TDP .. TDP, at most 150 W from the present limit per action:
  `clamp_limit_w`); when the envelope clamps it, the reason says so and that the next step follows.
- Another node of the job is capped only where the job's throughput favours it: it is warm enough to throttle
  by itself within `window_s` along its trend, and a limit no lower than the hot node's costs the job nothing
  more (a synchronous job runs at its slowest rank, which the hot node's cap already sets). A cool node is
  left alone, and the reason says what capping it would have saved and gained (watts, steps/s: nothing).
Every reason is in numbers an operator reads: °C, W, °C/s, and the fraction of its steps/s the job keeps
(the allocator's clock model, `power.expected_throughput`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from aiops.control.power import expected_throughput
from aiops.control.readings import ThermalInputs
from aiops.control.thermal import SLOWDOWN_C, GpuTemp, ThermalConfig, ThermalReport
from aiops.models import GpuPower
from guardrails.actions import Action
from guardrails.envelope import POWER_MAX_STEP_W, POWER_MIN_FRACTION_OF_TDP, power_range_w

PROPOSER = "analyst"
SLOWDOWN_NOTE = f"the {SLOWDOWN_C:.0f} °C slowdown threshold"
MIN_CUT_W = 10.0  # a cap that leaves the GPU within this of its draw now cuts no heat now: the reason says so
# a node that reaches the slowdown threshold within this, along its trend, is about to throttle
WARM_WINDOW_S = 180.0


def clamp_limit_w(wanted_w: float, gpus: Sequence[GpuPower]) -> tuple[float, str]:
    """The limit one action may set on all of `gpus` for a wanted value: whole watts, inside every GPU's
    envelope range (`guardrails.envelope.power_range_w`: 40-100 % of TDP inside NVML's constraints) and at most
    150 W from each one's present limit. Returns the value and why it differs from the wanted one ("" when it
    does not)."""
    ranges = [power_range_w(g) for g in gpus]
    floor_w = max(low for low, _ in ranges)
    ceiling_w = min(high for _, high in ranges)
    step_low_w = max(g.limit_w for g in gpus) - POWER_MAX_STEP_W
    step_high_w = min(g.limit_w for g in gpus) + POWER_MAX_STEP_W
    exact_w = min(max(wanted_w, floor_w, step_low_w), ceiling_w, step_high_w)
    value_w = float(math.floor(exact_w + 1e-9))
    if value_w < max(floor_w, step_low_w) - 1e-9:
        value_w = float(math.ceil(exact_w - 1e-9))
    why = ""
    if value_w > wanted_w + 1.0:  # more than whole-watt rounding
        if value_w <= floor_w + 1.0 and floor_w >= step_low_w:
            tdp_w = max(g.tdp_w for g in gpus)
            why = (
                f"clamped to the envelope floor {floor_w:.0f} W "
                f"({POWER_MIN_FRACTION_OF_TDP:.0%} of TDP {tdp_w:.0f} W or the NVML minimum)"
            )
        else:
            why = (
                f"clamped to {value_w:.0f} W: at most {POWER_MAX_STEP_W:.0f} W per action (guardrails "
                f"max_step); propose the next step once this one has settled"
            )
    elif value_w < wanted_w - 1.0:
        why = f"clamped to {value_w:.0f} W (TDP / NVML maximum, or at most {POWER_MAX_STEP_W:.0f} W up per action)"
    return value_w, why


@dataclass(frozen=True)
class _Cap:
    target: str
    gpus: list[GpuPower]
    hottest: GpuTemp
    limit_w: float  # the limit set
    base_w: float  # what the GPUs draw now (or their limit, if lower)
    note: str  # why the limit is not the wanted one ("" when it is)
    wanted_w: float = 0.0  # the limit that would keep it under slowdown - hot_headroom (0: not worked out)


def _projected_c(gpu: GpuTemp, horizon_s: float) -> float:
    return gpu.temp_c + max(gpu.trend_c_per_s, 0.0) * horizon_s


def _rising(gpu: GpuTemp) -> str:
    return f", rising {gpu.trend_c_per_s:.2f} °C/s" if gpu.trend_c_per_s >= 0.005 else ""


def _job_text(job: str | None) -> str:
    return f"job {job[:40]}" if job else "the node's work"


def _hot_caps(
    node: str, hot: set[str], inputs: ThermalInputs, cfg: ThermalConfig
) -> tuple[list[_Cap], list[str]]:
    here = sorted(inputs.node_gpus(node), key=lambda g: g.gpu)
    temps = {g.gpu: g for g in inputs.gpus}
    groups = [(node, here)] if {g.gpu for g in here} <= hot else [(g.gpu, [g]) for g in here if g.gpu in hot]
    caps, skipped = [], []
    goal_c = cfg.slowdown_c - cfg.hot_headroom_c
    for target, group in groups:
        hottest = max(
            (temps[g.gpu] for g in group if g.gpu in temps), key=lambda t: _projected_c(t, cfg.horizon_s)
        )
        shed_w = max(_projected_c(hottest, cfg.horizon_s) - goal_c, 0.0) / cfg.r_th_c_per_w
        base_w = min(max(g.limit_w for g in group), max(g.draw_w for g in group))
        value_w, note = clamp_limit_w(base_w - shed_w, group)
        if value_w >= min(g.limit_w for g in group) - 0.5:
            skipped.append(
                f"{target}: already at {min(g.limit_w for g in group):.0f} W, the envelope's floor"
            )
            continue
        caps.append(_Cap(target, group, hottest, value_w, base_w, note, max(base_w - shed_w, 0.0)))
    return caps, skipped


def _action(
    cap: _Cap, inputs: ThermalInputs, cfg: ThermalConfig, pid: str, why: str, evidence: list[str]
) -> Action:
    t = cap.hottest
    goal_c = cfg.slowdown_c - cfg.hot_headroom_c
    projected_c = _projected_c(t, cfg.horizon_s)
    cut_w = max(cap.base_w - cap.limit_w, 0.0)
    previous_w = max(g.limit_w for g in cap.gpus)
    each = "each of its GPUs" if len(cap.gpus) > 1 else "it"
    clamp = f"; {cap.note}" if cap.note else ""
    if cut_w < MIN_CUT_W and cap.wanted_w:  # throttled: it draws less than one guardrail step can cap it to
        steps = max(math.ceil((cap.limit_w - cap.wanted_w) / POWER_MAX_STEP_W), 1)
        clamp += (
            f"; it draws {cap.base_w:.0f} W throttled, below this limit: the cap binds only once it would draw "
            f"more, and staying under {goal_c:.0f} °C needs about {cap.wanted_w:.0f} W ({steps} more "
            f"{POWER_MAX_STEP_W:.0f} W step(s)); if it does not cool, the plan's next step moves the work"
        )
    return Action(
        proposal_id=pid,
        kind="set_power_limit",
        target=cap.target,
        parameters={"power_limit_w": cap.limit_w},
        reason=(
            f"{why}: {t.gpu} at {t.temp_c:.1f} °C{_rising(t)}, {projected_c:.1f} °C projected in "
            f"{cfg.horizon_s:.0f} s, {max(projected_c - goal_c, 0.0):.1f} °C above the {goal_c:.0f} °C it should "
            f"stay under ({cfg.slowdown_c:.0f} °C slowdown less {cfg.hot_headroom_c:.0f} °C); {cap.target} draws "
            f"{cap.base_w:.0f} W under a {previous_w:.0f} W limit: limit {cap.limit_w:.0f} W per GPU, "
            f"{cut_w:.0f} W less heat{clamp}"
        ),
        evidence=evidence,
        expected_effect=(
            f"{each} draws at most {cap.limit_w:.0f} W: about {cut_w:.0f} W less heat, "
            f"~{cut_w * cfg.r_th_c_per_w:.1f} °C cooler at {cfg.r_th_c_per_w:g} °C/W (towards "
            f"{projected_c - cut_w * cfg.r_th_c_per_w:.1f} °C); {t.gpu} stops thermal throttling below "
            f"{cfg.slowdown_c:.0f} °C; {_job_text(_job_of(inputs, cap.gpus))} keeps at least "
            f"{_kept(cap.gpus, cap.limit_w):.0%} of its steps/s"
            if cut_w >= MIN_CUT_W
            else f"{each} may draw at most {cap.limit_w:.0f} W; it draws {cap.base_w:.0f} W throttled now, so no "
            f"heat is cut until it would draw more; {t.gpu} cools below {cfg.slowdown_c:.0f} °C only if its "
            "cooling improves or a further cap follows"
        ),
        rollback={
            "kind": "set_power_limit",
            "target": cap.target,
            "parameters": {"power_limit_w": previous_w},
        },
        proposed_by=PROPOSER,
        created_ts_s=inputs.now_ts_s,
    )


def _kept(gpus: Iterable[GpuPower], limit_w: float) -> float:
    return min((expected_throughput(limit_w, g.want_w) for g in gpus), default=1.0)


def _job_of(inputs: ThermalInputs, gpus: list[GpuPower]) -> str | None:
    node = gpus[0].node if gpus else ""
    return next((n.job for n in inputs.nodes if n.node == node), None)


def _warm(node: str, inputs: ThermalInputs, cfg: ThermalConfig, window_s: float) -> GpuTemp | None:
    """The node's GPU that reaches the slowdown threshold within `window_s` along its trend, if any."""
    for gpu in sorted((g for g in inputs.gpus if g.node == node), key=lambda g: -g.temp_c):
        if gpu.temp_c + max(gpu.trend_c_per_s, 0.0) * window_s >= cfg.slowdown_c:
            return gpu
    return None


@dataclass(frozen=True)
class ThermalCaps:
    actions: list[Action]  # set_power_limit on the hot GPUs (and where the job's numbers favour it, more)
    notes: list[str]  # why a hot node gets no cap (none would cut heat now, or it is at the floor)


def thermal_caps(
    report: ThermalReport,
    inputs: ThermalInputs,
    nodes: Iterable[str],
    *,
    config: ThermalConfig | None = None,
    id_prefix: str = "cap",
    window_s: float = WARM_WINDOW_S,
) -> ThermalCaps:
    """`set_power_limit` for the hot GPUs of `nodes` (the thermal manager's GPU hotspots), one 150 W guardrail
    step at a time (a throttled GPU that draws less than the step's limit is told so, in watts), and for the
    other nodes of their jobs only where the job's throughput favours it (see the module's docstring)."""
    cfg = config or ThermalConfig()
    hot = {h.component for h in report.hotspots if h.level == "gpu"}
    out: list[Action] = []
    notes: list[str] = []
    done_nodes: set[str] = set()
    wanted = set(nodes)
    for node in sorted(wanted, key=lambda n: (len(n), n)):
        mine = {g for g in hot if g.startswith(node + "/")}
        if not mine:
            continue
        caps, skipped = _hot_caps(node, mine, inputs, cfg)
        notes += skipped
        if not caps:
            continue
        done_nodes.add(node)
        job = next((n.job for n in inputs.nodes if n.node == node), None)
        others = [  # the job's nodes outside this fault's scope (those inside get their own hot caps)
            n.node for n in inputs.nodes if job is not None and n.job == job and n.node not in wanted
        ]
        evidence, warm_caps = _others(caps, others, hot, inputs, cfg, window_s, job)
        evidence += skipped
        for cap in caps:
            why = f"hot {cap.target}, for {_job_text(job)}" if job else f"hot {cap.target}"
            out.append(_action(cap, inputs, cfg, f"{id_prefix}-{len(out)}", why, evidence))
        for cap, why in warm_caps:
            if cap.target not in done_nodes:  # once per node, whichever hot node's job it serves
                done_nodes.add(cap.target)
                out.append(_action(cap, inputs, cfg, f"{id_prefix}-{len(out)}", why, evidence))
    return ThermalCaps(out, notes)


def requeue_actions(
    report: ThermalReport, inputs: ThermalInputs, nodes: Iterable[str], *, id_prefix: str = "requeue"
) -> list[Action]:
    """`restart_job` from the last checkpoint without the hot node, for each hot node of `nodes` that runs a job
    the thermal manager found no idle node in a cool rack to move to (one per job and node); none when no idle
    node at all is left to requeue onto."""
    hot = {h.component for h in report.hotspots if h.level == "node"}
    moved = {m.from_node for m in report.moves}
    temps = {g.gpu: g for g in inputs.gpus}
    out: list[Action] = []
    if not any(n.job is None and n.node not in hot for n in inputs.nodes):
        return out  # no idle node to requeue onto: a requeue could not run (the plan says so)
    for node in sorted(set(nodes) & hot - moved, key=lambda n: (len(n), n)):
        job = next((n.job for n in inputs.nodes if n.node == node), None)
        if job is None:
            continue
        hottest = max((t for t in temps.values() if t.node == node), key=lambda t: t.temp_c, default=None)
        hot_text = f"{hottest.gpu} at {hottest.temp_c:.1f} °C{_rising(hottest)}; " if hottest else ""
        out.append(
            Action(
                proposal_id=f"{id_prefix}-{len(out)}",
                kind="restart_job",
                target=f"job:{job}",
                parameters={"from_checkpoint": "latest", "exclude": node},
                reason=(
                    f"requeue {_job_text(job)} from its last checkpoint without hot {node} ({hot_text}projected "
                    f"headroom {report.node_headroom_c.get(node, 0.0):.1f} °C to {SLOWDOWN_NOTE}); no idle node "
                    "in a cool rack to move its ranks to"
                ),
                expected_effect=(
                    f"{_job_text(job)} runs again from its last checkpoint without {node}, at its pace before the "
                    "fault; the hot GPUs idle and cool"
                ),
                rollback="let the job use the node again once its cooling is repaired (the scheduler's resume)",
                proposed_by=PROPOSER,
                created_ts_s=inputs.now_ts_s,
            )
        )
    return out


def _others(
    caps: list[_Cap],
    others: list[str],
    hot: set[str],
    inputs: ThermalInputs,
    cfg: ThermalConfig,
    window_s: float,
    job: str | None,
) -> tuple[list[str], list[tuple[_Cap, str]]]:
    """Evidence about the job's other nodes, and caps for those the job's throughput favours capping."""
    if not others:
        return [], []
    limit_w = min(c.limit_w for c in caps)
    warm: list[tuple[_Cap, str]] = []
    left_w = 0.0
    left: list[str] = []
    for node in others:
        gpus = inputs.node_gpus(node)
        if not gpus:
            continue  # no readings
        about = _warm(node, inputs, cfg, window_s)
        temps = [t for t in inputs.gpus if t.node == node and t.gpu in hot]
        value_w, note = clamp_limit_w(limit_w, gpus)  # no lower than the hot node's limit
        if (about is not None or temps) and value_w < min(g.limit_w for g in gpus) - 0.5:
            if about is not None:
                eta_s = (cfg.slowdown_c - about.temp_c) / max(about.trend_c_per_s, 1e-9)
                when = f"would reach {cfg.slowdown_c:.0f} °C in {max(eta_s, 0.0):.0f} s"
            else:
                about = max(temps, key=lambda t: t.temp_c)
                when = f"is hot too ({about.temp_c:.1f} °C)"
            why = (
                f"{node} of {_job_text(job)}: {about.gpu} {when} and would throttle the job again; at "
                f"{value_w:.0f} W, no lower than the hot node's limit, it costs the job no steps/s (the job runs "
                "at its slowest rank)"
            )
            base_w = min(max(g.limit_w for g in gpus), max(g.draw_w for g in gpus))
            warm.append((_Cap(node, gpus, about, value_w, base_w, note), why))
            continue
        left.append(node)
        left_w += sum(max(min(g.draw_w, g.limit_w) - limit_w, 0.0) for g in gpus)
    evidence = []
    if left:
        kept = _kept([g for c in caps for g in c.gpus], limit_w)
        evidence.append(
            f"{_job_text(job)}: its other {len(left)} node(s) are left alone: none reaches {cfg.slowdown_c:.0f} °C "
            f"within {window_s:.0f} s; capping them to {limit_w:.0f} W would save about {left_w / 1000:.1f} kW "
            f"and gain the job no steps/s (it runs at its slowest rank, {kept:.0%} of its steps/s at most with "
            "the hot GPUs capped)"
        )
    return evidence, warm
