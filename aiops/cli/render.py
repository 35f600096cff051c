"""Rich rendering of a run for the terminal, and its JSON form."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from aiops.models import Diagnosis
from aiops.pipeline import RunResult, headline
from aiops.plans import PlanRecord
from aiops.store import Store
from aiops.text import as_text, fields_text, markup, plain, plural, when
from guardrails.actions import Action
from guardrails.registry import DEFAULT_REGISTRY


def _proposal_json(result: RunResult, action: Action) -> dict[str, Any]:
    spec = DEFAULT_REGISTRY.get(action.kind)
    return {
        "proposal_id": action.proposal_id,
        "status": result.status_of(action.proposal_id),
        "action": action.kind,
        "target": action.target,
        "parameters": action.parameters,
        "reason": action.reason,
        "physical": spec.physical if spec else True,
    }


def result_json(result: RunResult) -> dict[str, Any]:
    primary = headline(result.diagnoses)
    remediation = result.remediations.get(primary.incident.incident_id, []) if primary else []
    return {
        "incidents": [d.incident.model_dump() for d in result.diagnoses],
        "hypotheses": [
            {
                "root_cause": h.root_cause,
                "component": h.component,
                "confidence": h.confidence,
                "summary": h.summary,
                "evidence": [e.model_dump() for e in h.evidence],
            }
            for h in (primary.hypotheses if primary else [])
        ],
        "proposals": [_proposal_json(result, a) for a in remediation],
        "plan": result.plans[primary.incident.incident_id].json()
        if primary and primary.incident.incident_id in result.plans
        else None,
    }


def cluster_panel(store: Store) -> Panel:
    counts = {
        r["kind"]: r["n"] for r in store.query("SELECT kind, count(*) AS n FROM topology GROUP BY kind")
    }
    jobs = store.query("SELECT job, nodes, ranks, checkpoint_every_s FROM jobs ORDER BY job")
    span = store.query("SELECT min(ts_s) AS lo, max(ts_s) AS hi, count(*) AS n FROM gpu_samples")[0]
    lines = [
        f"{plural(counts.get('rack', 0), 'rack')}, {plural(counts.get('node', 0), 'node')}, "
        f"{plural(counts.get('gpu', 0), 'GPU')}, {plural(counts.get('nic', 0), 'NIC')}",
        *(
            f"job {j['job']}: {plural(j['ranks'], 'rank')} on {plural(j['nodes'], 'node')}"
            + (f", checkpoint every {j['checkpoint_every_s']:g} s" if j["checkpoint_every_s"] else "")
            for j in jobs
        ),
    ]
    if span["lo"] is not None:
        lines.append(f"telemetry {when(span['lo'])} to {when(span['hi'])}")
        lines.append(plural(span["n"], "GPU sample"))
    return Panel(Text("\n".join(plain(line) for line in lines)), title="cluster", expand=False)


def render(console: Console, store: Store, result: RunResult) -> None:
    console.print(cluster_panel(store))
    if not result.diagnoses:
        console.print("[green]No incident: the cluster looks healthy.[/]")
        return
    timeline = Table(title="incident timeline", show_lines=False)
    timeline.add_column("id", no_wrap=True)
    timeline.add_column("opened", overflow="fold")
    for column in ("severity", "title", "symptoms"):
        timeline.add_column(column, overflow="fold")  # folded, never cut: times and names stay whole
    for d in result.diagnoses:
        kinds = sorted({s.kind for s in d.incident.symptoms})
        timeline.add_row(
            as_text(d.incident.incident_id),
            when(d.incident.opened_ts_s),
            as_text(d.incident.severity),
            as_text(d.incident.title),
            as_text(", ".join(kinds)),
        )
    console.print(timeline)
    for d in result.diagnoses:
        render_diagnosis(console, d)
        render_remediation(console, result, result.remediations.get(d.incident.incident_id, []))
        plan = result.plans.get(d.incident.incident_id)
        if plan is not None:
            render_plan(console, plan)


def render_remediation(console: Console, result: RunResult, actions: list[Action]) -> None:
    if not actions:
        return
    console.print("[bold]Proposed remediation (filed; physical actions wait for a person's approval):[/]")
    for a in actions:
        p = _proposal_json(result, a)
        kind = "[red]physical[/]" if p["physical"] else "digital"
        params = markup(f"({fields_text(a.parameters)})") if a.parameters else ""
        console.print(
            f"  • {markup(a.proposal_id)} {markup('[' + p['status'] + ']')} {markup(a.kind)} → {markup(a.target)} "
            f"{params} ({kind}): {markup(a.reason)}",
            highlight=False,
        )
    if any(result.status_of(a.proposal_id) == "pending" for a in actions):
        console.print("  [dim]approve one: aiops actions approve ID [--key FILE][/]")


def render_diagnosis(console: Console, d: Diagnosis, top: int = 3) -> None:
    table = Table(title=as_text(f"{d.incident.incident_id}: ranked root causes"), show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("root cause")
    table.add_column("component")
    table.add_column("confidence", justify="right")
    table.add_column("why")
    for rank, h in enumerate(d.hypotheses[:top], start=1):
        table.add_row(
            str(rank), as_text(h.root_cause), as_text(h.component), f"{h.confidence:.2f}", as_text(h.summary)
        )
    console.print(table)
    if d.hypotheses:
        best = d.hypotheses[0]
        console.print(f"[bold]Evidence for {markup(best.root_cause)} on {markup(best.component)}:[/]")
        for e in best.evidence[:4]:
            mark = "+" if e.supports else "−"
            console.print(
                f"  {mark} {markup(e.claim)}  [dim]({plural(len(e.rows), 'row')})[/]", highlight=False
            )
            if e.rows:
                console.print(f"    [dim]{markup(row_text(e.rows[0]))}[/]", highlight=False)


def row_text(row: dict[str, Any], limit: int = 8) -> str:
    """A cited row as `key=value` text: times (`*_ts_s`, `ts_s`) as ISO 8601, no value as `-`."""
    shown: dict[str, Any] = {}
    for key, value in list(row.items())[:limit]:
        is_time = (key == "ts_s" or key.endswith("_ts_s")) and isinstance(value, int | float)
        shown[key.removesuffix("_s") if is_time else key] = (
            when(float(value)) if is_time else ("-" if value is None else value)
        )
    return fields_text(shown)


def render_plan(console: Console, plan: PlanRecord) -> None:
    """The incident's plan, step by step: status, title, targets, effect, cost, rollback (aiops plans show)."""
    console.print(
        f"[bold]Plan {markup(plan.plan_id)}[/] ({markup(plan.status)}): one signature approves a whole step "
        f"(aiops actions approve STEP)"
    )
    for s in plan.steps:
        console.print(
            f"  {s.step_no}. {markup('[' + s.status + ']')} {markup(s.step_id)} {markup(s.title)} "
            f"({s.risk}{', ' + markup(', '.join(s.proposal_ids)) if s.proposal_ids else ''})",
            highlight=False,
        )
        if s.targets:
            console.print(f"     effect: {markup(s.effect)}", highlight=False)
            console.print(f"     cost: {markup(s.cost)}; rollback: {markup(s.rollback)}", highlight=False)
        if s.status in ("waiting", "skipped"):
            console.print(f"     {markup(s.note)}", highlight=False)
