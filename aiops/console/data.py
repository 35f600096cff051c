"""What the console's pages show, read from one open store: plain dicts and lists for the templates, every
telemetry string left as it is (the templates escape it; nothing here builds HTML)."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb

from aiops.console.oncall import detail_text, health, plots, value_text
from aiops.detect.recurrence import recurrence_of
from aiops.evidence.next_steps import steps_for
from aiops.pipeline import stored_diagnoses
from aiops.runtime.world import executors_here
from aiops.store import Store
from aiops.store.conditions import stated
from guardrails import witness
from guardrails.audit import chain_heads, read_rows, verify, verify_witness
from guardrails.decisions import problems
from guardrails.records import GuardrailRecords
from guardrails.routing import TICKET
from guardrails.signing import Verifier

# Each page shows times of one clock and says which (issue 27: the twin's clock and the wall clock side by side,
# unlabelled, read as one). Audit rows and report files carry the wall clock; everything else the data's clock.
WALL_CLOCK = "wall clock (when each was recorded), UTC"


@dataclass(frozen=True)
class DataClock:
    label: str  # what a page of data times says they are
    is_wall: bool  # the data's times are wall-clock times (a host's telemetry, the service's twin)


def data_clock(store: Store) -> DataClock:
    """The clock of the workspace's data: a simulated workspace's twin starts at the simulator's epoch
    (2026-01-01) unless the service ran it on wall time (`sim_runs.epoch_ts_s`); a host's telemetry and a
    fleet's are on the wall clock."""
    rows = store.query("SELECT epoch_ts_s FROM sim_runs ORDER BY ts_s DESC LIMIT 1")
    if rows and rows[0]["epoch_ts_s"] is None:
        return DataClock(
            "data time: the twin's simulated clock (from 2026-01-01), UTC; not the wall clock", False
        )
    if rows:
        return DataClock("data time: the twin's clock, on wall time, UTC", True)
    return DataClock("data time: the telemetry's clock, UTC", True)


MAX_AUDIT_ROWS = 500
MAX_EVIDENCE_ROWS = 12
SAMPLE_TABLES = (
    "gpu_samples",
    "nic_samples",
    "host_samples",
    "thermal_zone_samples",
    "collective_samples",
    "job_steps",
    "psi_samples",
    "netdev_samples",
    "ib_port_samples",
    "hwmon_samples",
    "kernel_events",
    "powercap_samples",
)


def paging_text(store: Store) -> dict[str, str]:
    """incident id -> this tier's paging decision for people: `paged`, `covered by INC-…`, `held: no diagnosis
    yet`, `maintenance M-…` (aiops/service/pager.py; absent for an incident no pager has seen)."""
    out: dict[str, str] = {}
    for r in store.query("SELECT * FROM incident_pages ORDER BY decided_ts_s"):
        if r["paged_ts_s"] is not None:
            text = "paged"
        elif r["reason"] == "covered":
            text = f"covered by {r['covered_by']}"
        elif r["reason"] in ("maintenance", "silence"):
            text = f"no page: {r['reason']} {r['window_id']}"
        elif r["reason"] == "held":
            text = "held: no diagnosis yet"
        else:
            text = str(r["reason"])
        out[str(r["incident_id"])] = text
    return out


def incidents(store: Store) -> list[dict[str, Any]]:
    out = []
    paging = paging_text(store)
    for d in reversed(stored_diagnoses(store)):
        top = d.hypotheses[0] if d.hypotheses else None
        out.append(
            {
                "id": d.incident.incident_id,
                "title": d.incident.title,
                "severity": d.incident.severity,
                "opened_ts_s": d.incident.opened_ts_s,
                "resolved": d.incident.resolved_ts_s is not None,
                "paging": paging.get(d.incident.incident_id, ""),
                "top": None
                if top is None
                else {"root_cause": top.root_cause, "component": top.component, "confidence": top.confidence},
            }
        )
    return out


def _proposal(record: Any, approvers: list[str], executors: dict[str, str] | None = None) -> dict[str, Any]:
    a = record.action
    backend = "the acting node's" if executors is None else executors.get(a.kind, TICKET)
    return {
        "backend": backend,
        "ticket": backend
        == TICKET,  # no executor on this host: shown as a ticket, never with an approve button
        "id": a.proposal_id,
        "kind": a.kind,
        "target": a.target,
        "parameters": json.dumps(a.parameters, sort_keys=True),
        "status": record.status,
        "physical": record.physical,
        "needed": record.approvals_needed,
        "approvers": approvers,
        "message": record.message,
        "reason": a.reason,
        "proposed_by": a.proposed_by,
        "created_ts_s": a.created_ts_s,
        "expected_effect": a.expected_effect,
        "open": record.status in ("pending", "approved"),
        "incident_id": record.incident_id or "",
        "step_id": record.step_id or "",
        "expires_ts_s": record.expires_ts_s,
    }


def incident(
    store: Store, incident_id: str, *, here: bool = True, grafana_url: str = ""
) -> dict[str, Any] | None:
    """`here`: this workspace's world executes its proposals (False in a fleet's console: no ticket marks, the
    node that acts routes each kind). `grafana_url`: the plots link to its panels."""
    found = [d for d in stored_diagnoses(store) if d.incident.incident_id == incident_id]
    if not found:
        return None
    d = found[0]
    book = GuardrailRecords(store)
    executors = executors_here(store) if here else None
    proposals = [
        _proposal(r, sorted({a.approver for a in book.approvals(r.proposal_id)}), executors)
        for r in book.proposals()
        if r.incident_id == incident_id
    ]
    timeline: list[dict[str, Any]] = [
        {"ts_s": d.incident.opened_ts_s, "what": "opened", "detail": d.incident.title}
    ]
    for s in d.incident.symptoms:
        detail = detail_text(s.detail)
        timeline.append({"ts_s": s.ts_s, "what": f"{s.kind} on {s.component}", "detail": detail})
    clock = data_clock(store)
    if clock.is_wall:  # else the audit's times are another clock's: the audit log page shows them
        for row in (r for p in proposals for r in read_rows(store, proposal_id=p["id"])):
            if row.event != "outcome":  # shown below, on the incident's own clock
                timeline.append(
                    {"ts_s": row.ts_s, "what": f"{row.event} {row.proposal_id}", "detail": row.actor}
                )
    for o in store.query(  # did each action work (aiops/runtime/outcomes.py), on the telemetry's clock
        "SELECT proposal_id, verdict, detail, checked_ts_s FROM action_outcomes WHERE incident_id = ?",
        [incident_id],
    ):
        what = f"outcome {o['proposal_id']}: {o['verdict']}"
        timeline.append({"ts_s": o["checked_ts_s"], "what": what, "detail": str(o["detail"])[:300]})
    earlier = recurrence_of(store, incident_id)
    if earlier is not None:
        timeline.append({"ts_s": d.incident.opened_ts_s, "what": f"recurrence of {earlier}", "detail": ""})
    if d.incident.resolved_ts_s is not None:
        timeline.append({"ts_s": d.incident.resolved_ts_s, "what": "resolved", "detail": ""})
    timeline.sort(key=lambda e: e["ts_s"])
    hypotheses = []
    for rank, h in enumerate(d.hypotheses, start=1):
        evidence = []
        for e in h.evidence:
            columns = list(e.rows[0].keys()) if e.rows else []
            rows = [[_cell(c, r.get(c)) for c in columns] for r in e.rows[:MAX_EVIDENCE_ROWS]]
            evidence.append(
                {
                    "claim": e.claim,
                    "sql": e.sql,
                    "params": json.dumps(e.params, default=str),
                    "columns": columns,
                    "rows": rows,
                    "supports": e.supports,
                }
            )
        hypotheses.append(
            {
                "rank": rank,
                "root_cause": h.root_cause,
                "component": h.component,
                "confidence": h.confidence,
                "summary": h.summary,
                "evidence": evidence,
            }
        )
    return {
        "id": d.incident.incident_id,
        "title": d.incident.title,
        "severity": d.incident.severity,
        "impact": d.incident.impact,
        "paging": paging_text(store).get(d.incident.incident_id, ""),
        "components": d.incident.components,
        "opened_ts_s": d.incident.opened_ts_s,
        "resolved_ts_s": d.incident.resolved_ts_s,
        "timeline": timeline,
        "hypotheses": hypotheses,
        "next_steps": steps_for([(h.root_cause, h.component) for h in d.hypotheses[:3]]),
        "plots": plots(
            store,
            (e.sql for h in d.hypotheses[:3] for e in h.evidence),
            [*d.incident.components, *(h.component for h in d.hypotheses[:3])],
            d.incident.opened_ts_s,
            d.incident.resolved_ts_s,
            grafana_url,
        ),
        "proposals": proposals,
        "clock": clock.label,
        "wall_times": clock.is_wall,  # proposals' and approvals' wall-clock times fit this page's clock
    }


def _cell(column: str, value: Any) -> str:
    """A cited value as text: times in ISO 8601 UTC, bitmasks decoded, numbers with their unit (oncall.py)."""
    return value_text(column, value)


def proposals(store: Store, *, here: bool = True) -> list[dict[str, Any]]:
    book = GuardrailRecords(store)
    executors = executors_here(store) if here else None
    return [
        _proposal(r, sorted({a.approver for a in book.approvals(r.proposal_id)}), executors)
        for r in book.proposals()
    ]


def proposal_incident(store: Store, proposal_id: str) -> str | None:
    record = GuardrailRecords(store).proposal(proposal_id)
    return None if record is None else record.incident_id


def audit(store: Store, verifier: Verifier) -> dict[str, Any]:
    """The newest rows, and the same checks as `aiops audit verify` (chain, signatures, witness)."""
    result = verify(store)
    found = [] if result.ok else [result.message]
    if chain_heads(store) is not None:
        found += problems(store, verifier)
    path = witness.store_path(store)
    witness_note = "no witness file"
    if path is not None and path.exists():
        try:
            agreed = verify_witness(store, path)
            witness_note = agreed.message
            if not agreed.ok:
                found.append(agreed.message)
        except Exception as exc:  # a witness that cannot be read is a finding, not a crash of the page
            found.append(str(exc)[:300])
    rows = read_rows(store)[-MAX_AUDIT_ROWS:]
    shown = [
        {
            "seq": r.seq,
            "ts_s": r.ts_s,
            "event": r.event,
            "proposal_id": r.proposal_id,
            "actor": r.actor,
            "hash": r.hash[:16],
            "payload": r.payload[:300],
        }
        for r in reversed(rows)
    ]
    return {
        "ok": not found,
        "message": result.message,
        "problems": found,
        "witness": witness_note,
        "rows": shown,
    }


def collectors(store: Store) -> dict[str, Any]:
    tables = []
    for table in SAMPLE_TABLES:
        try:
            newest, count = store.conn.execute(f"SELECT max(ts_s), count(*) FROM {table}").fetchone() or (
                None,
                0,
            )
        except duckdb.Error:
            continue
        tables.append({"table": table, "newest_ts_s": newest, "rows": int(count or 0)})
    errors = store.query(
        "SELECT collector, count(*) AS errors, max(ts_s) AS last_ts_s, arg_max(error || ': ' || "
        "coalesce(detail, ''), ts_s) AS last_error FROM collector_errors GROUP BY collector ORDER BY collector"
    )
    return {"tables": tables, "errors": errors}


def banner(store: Store) -> list[dict[str, Any]]:
    """The open conditions (a blind source, lost node agents, a blind collector): what every page says first."""
    return [{"title": s.title, "since_ts_s": s.since_ts_s, "reason": s.reason} for s in stated(store)]


def topology(store: Store) -> list[dict[str, Any]]:
    """Racks, each with its nodes, each with its GPUs and NICs (contract names), each with its health: the worst
    severity of the open incidents naming it or a part of it (`ok` when none)."""
    worst = health(store)
    rows = store.query("SELECT component, kind, parent FROM topology ORDER BY kind, parent, idx, component")
    children: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        children.setdefault(str(r["parent"]), []).append(r)
    racks = []
    for rack in [r for r in rows if r["kind"] == "rack"]:
        nodes = []
        for node in [n for n in children.get(rack["component"], []) if n["kind"] == "node"]:
            parts = children.get(node["component"], [])
            nodes.append(
                {
                    "name": node["component"],
                    "health": worst.get(str(node["component"]), "ok"),
                    "gpus": [
                        {"name": p["component"], "health": worst.get(str(p["component"]), "ok")}
                        for p in parts
                        if p["kind"] == "gpu"
                    ],
                    "nics": [
                        {"name": p["component"], "health": worst.get(str(p["component"]), "ok")}
                        for p in parts
                        if p["kind"] == "nic"
                    ],
                }
            )
        racks.append(
            {"name": rack["component"], "health": worst.get(str(rack["component"]), "ok"), "nodes": nodes}
        )
    return racks


REPORT_SUFFIXES = (".html", ".md", ".pdf")
MAX_REPORT_BYTES = 64 * 1024 * 1024


def report_files(folder: Path) -> list[dict[str, Any]]:
    """The reports in `folder`: regular files only, never a symlink (the service runs as root: a link in the
    folder must not make a viewer read /etc/shadow), newest first, at most 500."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return []
    found: list[dict[str, Any]] = []
    for entry in entries:
        try:
            if entry.name.endswith(REPORT_SUFFIXES) and entry.is_file(follow_symlinks=False):
                st = entry.stat(follow_symlinks=False)
                found.append({"name": entry.name, "bytes": st.st_size, "mtime_s": st.st_mtime})
        except OSError:
            continue
    found.sort(key=lambda f: f["mtime_s"], reverse=True)
    return found[:500]


def read_report(folder: Path, name: str) -> bytes | None:
    """A report's bytes: `name` opened inside `folder` without following a link (O_NOFOLLOW, relative to the
    folder's own descriptor), a regular file of at most `MAX_REPORT_BYTES`; None otherwise."""
    if "/" in name or name in ("", ".", "..") or not name.endswith(REPORT_SUFFIXES):
        return None
    try:
        folder_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return None
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
    except OSError:
        return None
    finally:
        os.close(folder_fd)
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(file.fileno())
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_REPORT_BYTES:
            return None
        data = file.read(MAX_REPORT_BYTES + 1)
    return data if len(data) <= MAX_REPORT_BYTES else None
