"""Rich rendering of a run for the terminal, and its JSON form."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.panel import Panel
from rich.table import Table

from aiops.models import Diagnosis
from aiops.pipeline import RunResult
from aiops.store import Store


def clock(ts_s: float) -> str:
    return datetime.fromtimestamp(ts_s, tz=UTC).strftime("%H:%M:%S")


def result_json(result: RunResult) -> dict[str, Any]:
    primary = result.diagnoses[0] if result.diagnoses else None
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
        "proposals": [p.model_dump() for p in (primary.proposals if primary else [])],
    }


def cluster_panel(store: Store) -> Panel:
    counts = {
        r["kind"]: r["n"] for r in store.query("SELECT kind, count(*) AS n FROM topology GROUP BY kind")
    }
    jobs = store.query("SELECT job, nodes, ranks, checkpoint_every_s FROM jobs ORDER BY job")
    span = store.query("SELECT min(ts_s) AS lo, max(ts_s) AS hi, count(*) AS n FROM gpu_samples")[0]
    lines = [
        f"{counts.get('rack', 0)} racks, {counts.get('node', 0)} nodes, {counts.get('gpu', 0)} GPUs, "
        f"{counts.get('nic', 0)} NICs",
        *(
            f"job {j['job']}: {j['ranks']} ranks on {j['nodes']} nodes"
            + (f", checkpoint every {j['checkpoint_every_s']:g} s" if j["checkpoint_every_s"] else "")
            for j in jobs
        ),
    ]
    if span["lo"] is not None:
        lines.append(f"telemetry {clock(span['lo'])}–{clock(span['hi'])} UTC, {span['n']:,} GPU samples")
    return Panel("\n".join(lines), title="cluster", expand=False)


def render(console: Console, store: Store, result: RunResult) -> None:
    console.print(cluster_panel(store))
    if not result.diagnoses:
        console.print("[green]No incident: the cluster looks healthy.[/]")
        return
    timeline = Table(title="incident timeline", show_lines=False)
    for column in ("id", "opened", "severity", "title", "symptoms"):
        timeline.add_column(column)
    for d in result.diagnoses:
        kinds = sorted({s.kind for s in d.incident.symptoms})
        timeline.add_row(
            d.incident.incident_id,
            clock(d.incident.opened_ts_s),
            d.incident.severity,
            d.incident.title,
            ", ".join(kinds),
        )
    console.print(timeline)
    for d in result.diagnoses:
        render_diagnosis(console, d)


def render_diagnosis(console: Console, d: Diagnosis, top: int = 3) -> None:
    table = Table(title=f"{d.incident.incident_id}: ranked root causes", show_lines=True)
    table.add_column("#", justify="right")
    table.add_column("root cause")
    table.add_column("component")
    table.add_column("confidence", justify="right")
    table.add_column("why")
    for rank, h in enumerate(d.hypotheses[:top], start=1):
        table.add_row(str(rank), h.root_cause, h.component, f"{h.confidence:.2f}", h.summary)
    console.print(table)
    if d.hypotheses:
        best = d.hypotheses[0]
        console.print(f"[bold]Evidence for {best.root_cause} on {best.component}:[/]")
        for e in best.evidence[:4]:
            mark = "+" if e.supports else "−"
            console.print(f"  {mark} {e.claim}  [dim]({len(e.rows)} rows)[/]", highlight=False)
            if e.rows:
                console.print(f"    [dim]{_row_text(e.rows[0])}[/]", highlight=False)
    if d.proposals:
        console.print("[bold]Proposed remediation (needs approval where physical; nothing was executed):[/]")
        for p in d.proposals:
            kind = "[red]physical[/]" if p.physical else "digital"
            console.print(
                f"  • {p.action} → {p.target} {p.parameters or ''} ({kind}): {p.reason}", highlight=False
            )


def _row_text(row: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in list(row.items())[:8])
