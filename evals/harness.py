"""Scoring harness: run every scenario of a suite through simulate → detect → diagnose and score it against the
scenario's `expect` (which only this harness reads; the analyst never sees it).

Scores follow the contract in ARCHITECTURE.md: `top1` (first hypothesis has the expected label and component;
scope-like components covering the same GPUs in the scenario's cluster are one component, evals/scoring.py),
`top3` (both on the first expected cause), `detect_delay_s` (first incident after the fault minus the fault's start), `false_positives`
(incidents opened before the first fault, or any incident in a healthy run), `unsafe_actions` (physical actions
executed without a recorded approval: the pipeline files every diagnosis' remediation as proposals, each is
then executed at once with nobody approving, and the audit log is recounted). Every expected cause (the list
form of `expect`) is also scored by evals/scoring.py: `cause_recall_at_3`, `incident_precision` and a confusion
table per label.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, as_completed
from importlib import resources
from pathlib import Path
from typing import Any

from aiops.agent.config import AgentConfig
from aiops.config import FleetConfig
from aiops.control.dcim_signals import parse_dcim_signals
from aiops.control.dcim_source import dcim_document, record_changes
from aiops.errors import AiopsError, ScenarioError
from aiops.fleet.backfill import backfill, serving
from aiops.fleet.cycle import CycleReport, read_cycle
from aiops.fleet.history import replay, spread_offsets, write
from aiops.fleet.phase import learned_phase_s
from aiops.pipeline import RunResult, headline
from aiops.runtime.analysis import analyze, simulate_into
from aiops.runtime.world import attach, desk
from aiops.scenarios import Scenario, load_scenario
from aiops.sim import SIM_EPOCH_TS_S
from aiops.sim.twin import Twin
from aiops.sources.facility import facility_rows, render_facility_history
from aiops.sources.prometheus import PrometheusClient
from aiops.store import Store
from evals.scoring import cause_windows, matches, same_scope, score_causes, summarize_causes
from guardrails import unsafe_executions
from guardrails.audit import read_rows

Case = dict[str, Any]


PUBLIC_SUITE = Path(str(resources.files("evals") / "scenarios"))  # package data: a wheel carries it too


def suite_files(directory: str | Path) -> list[Path]:
    root = Path(directory)
    if not root.is_dir():
        raise ScenarioError(
            str(root), "--suite", "is not a directory of scenario files", "a folder of *.yaml files"
        )
    files = sorted([*root.glob("*.yaml"), *root.glob("*.yml")])
    if not files:
        raise ScenarioError(str(root), "--suite", "holds no *.yaml scenario files")
    return files


def score_case(scenario: Scenario, store: Store) -> Case:
    return score_analysis(scenario, store, simulate_into(store, scenario))


def score_analysis(scenario: Scenario, store: Store, twin: Twin) -> Case:
    """Analyse `store` (the twin's own workspace, or a fleet workspace read back from its exports), file the
    remediations, try them unapproved on `twin`, and score the answer against the scenario."""
    now_ts_s = float(store.scalar("SELECT max(ts_s) FROM gpu_samples") or 0.0)
    result = analyze(store, twin=twin, origin="eval", clock=lambda: now_ts_s)
    expected = scenario.expected
    healthy = expected.root_cause == "healthy"
    fault_start_ts = SIM_EPOCH_TS_S + min(f.start_s for f in scenario.faults) if scenario.faults else None
    if healthy and fault_start_ts is None:
        false_positives = len(result.incidents)
    else:
        cutoff = fault_start_ts if fault_start_ts is not None else float("inf")
        false_positives = sum(1 for i in result.incidents if i.opened_ts_s < cutoff)
    primary = None
    if not healthy:
        after = [
            d for d in result.diagnoses if fault_start_ts is None or d.incident.opened_ts_s >= fault_start_ts
        ]
        # the case's answer, as `aiops analyze` leads with it: a benign condition never outranks a fault
        primary = headline(after)
    predicted = [
        {"root_cause": h.root_cause, "component": h.component, "confidence": h.confidence}
        for h in (primary.hypotheses[:5] if primary else [])
    ]

    if healthy:
        top1 = top3 = false_positives == 0 and not result.incidents
    else:
        top1, top3 = top_hits(scenario, predicted)
    delay = None
    if primary is not None and fault_start_ts is not None:
        delay = round(primary.incident.opened_ts_s - fault_start_ts, 1)
    return {
        "name": scenario.name,
        "expected": {"root_cause": expected.root_cause, "component": expected.component},
        "predicted": predicted,
        "top1": top1,
        "top3": top3,
        "detect_delay_s": delay,
        "false_positives": false_positives,
        "unsafe_actions": attempt_remediation(store, twin, result, now_ts_s),
        **score_causes(cause_windows(scenario, SIM_EPOCH_TS_S), result.diagnoses),
    }


def top_hits(scenario: Scenario, predicted: list[dict[str, Any]]) -> tuple[bool, bool]:
    """(top1, top3) of a ranked answer against the scenario's first expected cause; a scope-like component that
    covers the same GPUs in the scenario's cluster counts as the expected one (fleet == rack0 on one rack)."""
    expected = scenario.expected
    names = same_scope(expected.component, scenario.cluster)

    def hit(p: dict[str, Any]) -> bool:
        return matches(str(p["root_cause"]), str(p["component"]), expected.root_cause, names)

    return bool(predicted) and hit(predicted[0]), any(hit(p) for p in predicted[:3])


def attempt_remediation(store: Store, twin: Twin, result: RunResult, now_ts_s: float) -> int:
    """Execute every filed proposal at once with nobody approving, as an over-eager automation would, through
    the guardrails on the twin. Physical actions must be refused; the count of physical executions without a
    recorded approval is recomputed from the audit log alone."""
    guard = desk(store, attach(store, twin=twin), clock=lambda: now_ts_s)
    for filed in result.filed.values():
        for f in filed:
            if f.status != "pending":
                continue
            try:
                guard.execute(f.proposal_id)
            except AiopsError:
                continue  # refused (the guardrail's message is in the audit log)
    return int(unsafe_executions(read_rows(store)))


def through_prometheus(
    twin_store: Store,
    step_s: float,
    work: Path,
    phase_s: float | None = None,
    *,
    spread: bool = False,
    rank_reads: int = FleetConfig().rank_reads,
) -> tuple[Store, CycleReport]:
    """A fleet workspace (in memory) read from a twin run: every node agent's exports over the run (what `aiops run
    --sim S --node N` serves, scraped every `step_s`: aiops/fleet/history.py) and the facility's series imported
    into a real Prometheus with promtool; the fleet analyst reads them back (aiops/fleet/ingest.py), with the DCIM
    input read every step. Nothing of the twin's workspace reaches the fleet's but what went through Prometheus.
    The fleet reads a second after the scrapes, as `aiops fleet` does (aiops/fleet/phase.py), or at multiples of the
    step plus `phase_s` where given. With `spread` each node agent is scraped at its own offset in the step
    (aiops/fleet/history.py `spread_offsets`, as Prometheus spreads its targets) instead of all at one time;
    `rank_reads` is the fleet's `[fleet] rank_reads` (aiops/fleet/ingest.py `fetch_interval`)."""
    om = work / "history.om"
    first_s = float(twin_store.scalar("SELECT min(ts_s) FROM gpu_samples"))
    last_s = float(twin_store.scalar("SELECT max(ts_s) FROM gpu_samples"))
    with om.open("w") as out:
        nodes = sorted(
            str(r["node"]) for r in twin_store.query("SELECT node FROM topology WHERE kind = 'node'")
        )
        offsets = spread_offsets(nodes, step_s) if spread else None
        write(replay(twin_store, step_s, offsets_s=offsets), out, openmetrics=True, end=False)
        render_facility_history(facility_rows(twin_store), out, step_s=step_s, openmetrics=True)
    grid = [first_s + step_s * (k + 1) for k in range(int((last_s - first_s) // step_s) + 1)]
    documents = [(t, dcim_document(twin_store, t)) for t in grid]  # what the DCIM served then
    backfill(om, work / "tsdb")
    om.unlink()
    fleet = Store(":memory:")
    with serving(work / "tsdb", work) as url:
        client = PrometheusClient(url, timeout_s=60.0)
        if phase_s is None:
            phase_s = learned_phase_s(client, last_s + step_s, step_s) or 0.0
        report = read_cycle(
            fleet,
            client,
            start_s=first_s - step_s,
            end_s=last_s + (2 if spread else 1) * step_s,  # the spread scrapes go up to a step later
            step_s=step_s,
            phase_s=phase_s,
            rank_reads=rank_reads,
        )
    racks = [str(r["component"]) for r in fleet.query("SELECT component FROM topology WHERE kind = 'rack'")]
    for t, document in documents:  # the fleet's DCIM input, read every step
        record_changes(fleet, parse_dcim_signals(document, "dcim", t, racks), t, "http:dcim")
    return fleet, report


def run_file_via_prometheus(path: str, step_s: float) -> Case:
    """Score one scenario through the fleet path (`through_prometheus`): the twin runs it, the fleet's workspace
    read back through a real Prometheus is analysed and scored as the twin's is."""
    scenario = load_scenario(path)
    with tempfile.TemporaryDirectory(prefix="aiops-eval-prom-") as tmp, Store(":memory:") as twin_store:
        twin = simulate_into(twin_store, scenario)
        fleet, report = through_prometheus(twin_store, step_s, Path(tmp))
        with fleet:
            case = score_analysis(scenario, fleet, twin)
    case["file"] = path
    nodes = report.nodes
    case["via"] = {"prometheus": True, "step_s": step_s, "samples": nodes.samples, "series": nodes.series}
    return case


LLM_QUESTION = "What is the root cause of the open incident, and what is the evidence? Cite the telemetry."


def run_file(path: str, with_llm: bool = False, agent: AgentConfig | None = None) -> Case:
    """Score one scenario. With an LLM configured (AIOPS_LLM_BASE_URL and AIOPS_LLM_MODEL, or the config
    file), the agent is also asked about the run and `verified_citation_rate` (verified claims over all
    claims, after re-running their SQL) joins the case; `with_llm` also scores the ranking with the verified
    LLM hypotheses merged in (evals/with_llm.py). Without a model `with_llm` changes nothing."""
    scenario = load_scenario(path)
    config = agent if agent is not None else AgentConfig()  # the command's, passed down (offline: none)
    if not config.online:
        with Store(":memory:") as store:
            case = score_case(scenario, store)
        case["file"] = path
        return case
    from aiops.agent.session import citation_rate  # LangGraph: imported only when an LLM is configured

    with tempfile.TemporaryDirectory(prefix="aiops-eval-") as tmp:
        db = Path(tmp) / "run.duckdb"
        with Store(db) as store:
            case = score_case(scenario, store)
        if with_llm:
            from evals.with_llm import ask_and_rescore

            case = ask_and_rescore(case, db, config, LLM_QUESTION, cause_windows(scenario, SIM_EPOCH_TS_S))
            case["file"] = path
            return case
        case["verified_citation_rate"] = round(citation_rate(db, [LLM_QUESTION], config), 4)
    case["file"] = path
    return case


def run_suite(
    directory: str | Path,
    *,
    workers: int | None = None,
    on_case: Callable[[Case], None] | None = None,
    with_llm: bool = False,
    agent: AgentConfig | None = None,
    via_prometheus_step_s: float | None = None,
) -> dict[str, Any]:
    """Score every scenario of `directory`; with `via_prometheus_step_s`, through the fleet path (each node's
    exports scraped at that step into a real Prometheus, read back by the fleet analyst: evals/via_prometheus.py)."""
    files = suite_files(directory)
    for path in files:  # validate every file before spending minutes on simulation
        load_scenario(path)
    workers = workers or min(len(files), os.cpu_count() or 1)
    cases: list[Case] = []

    def one(path: Path) -> Case:
        if via_prometheus_step_s is not None:
            return run_file_via_prometheus(str(path), via_prometheus_step_s)
        return run_file(str(path), with_llm, agent)

    if workers <= 1:
        for path in files:
            cases.append(one(path))
            if on_case:
                on_case(cases[-1])
    else:
        with ProcessPoolExecutor(max_workers=workers) as pool:
            futures = [
                pool.submit(run_file_via_prometheus, str(path), via_prometheus_step_s)
                if via_prometheus_step_s is not None
                else pool.submit(run_file, str(path), with_llm, agent)
                for path in files
            ]
            for future in as_completed(futures):
                cases.append(future.result())
                if on_case:
                    on_case(cases[-1])
    cases.sort(key=lambda c: c["file"])
    return {"cases": cases, "summary": summarize(cases)}


def summarize(cases: list[Case]) -> dict[str, Any]:
    n = len(cases)
    delays = [c["detect_delay_s"] for c in cases if c["detect_delay_s"] is not None]
    return {
        "cases": n,
        "top1": round(sum(c["top1"] for c in cases) / n, 4) if n else 0.0,
        "top3": round(sum(c["top3"] for c in cases) / n, 4) if n else 0.0,
        "median_detect_delay_s": statistics.median(delays) if delays else None,
        "false_positives": sum(c["false_positives"] for c in cases),
        "unsafe_actions": sum(c["unsafe_actions"] for c in cases),
        **summarize_causes(cases),
        **_citation_summary(cases),
    }


def _citation_summary(cases: list[Case]) -> dict[str, Any]:
    rates = [c["verified_citation_rate"] for c in cases if "verified_citation_rate" in c]
    return {"verified_citation_rate": round(sum(rates) / len(rates), 4)} if rates else {}
