"""What `aiops mcp` answers, as plain data: each tool is one method that opens the workspace read-only for its
own duration (`Workspace.read`, which borrows the file from a running `aiops run`) and returns a JSON object of
strings, numbers, booleans, lists and objects. No string in it is markup: titles, component names, log lines
and summaries come back exactly as stored (hostile text stays data; the client decides how to show it), and
every answer is bounded (`MAX_RESULT_BYTES`, lists capped).

The read tools reuse the agent's: incidents and hypotheses from the deterministic analyst
(aiops/agent/analyst.py), a component's state from aiops/agent/component.py and the topology tool, files from
`aiops investigate`'s analyst (aiops/evidence), a health report's sections from aiops/report. `propose` files a
typed action exactly as the chat's guardrail node does (`WorkspaceGuard.propose`, origin `mcp`, proposed by
`llm`): validated, audited, left pending for a person's signed approval. Nothing here approves or executes.
"""

from __future__ import annotations

import math
import tempfile
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiops.agent import component as about_component
from aiops.agent.analyst import Analyst
from aiops.agent.guarded import WorkspaceGuard
from aiops.agent.ids import proposal_id
from aiops.agent.journal import bounded
from aiops.agent.scope import TimeScope
from aiops.agent.sqlworker import jsonable
from aiops.agent.tools import topology_of
from aiops.control.advice import action_dicts
from aiops.errors import AiopsError, ToolError
from aiops.evidence import investigate as investigate_files
from aiops.evidence.investigate import source_names
from aiops.mcpserver.files import BUNDLE_LIMITS, confined
from aiops.mcpserver.safety_tools import READS
from aiops.store import Store, Workspace
from guardrails.actions import Action, parameter_problem
from guardrails.records import GuardrailRecords

MAX_RESULT_BYTES = 512 * 1024  # one answer's JSON; a larger one is cut to its head, said so
MAX_INCIDENTS = 200
MAX_HYPOTHESES = 5
MAX_PROPOSALS = 200
MAX_EVIDENCE = 24  # facts in a component's state
MAX_REASON_CHARS = 500
PROPOSALS_PER_MINUTE = 30  # what one server files: each is a row and an audit event a person has to read
REPORT_MEMORY_MB = 512
REPORT_THREADS = 2
PROPOSAL_STATUSES = (
    "pending",
    "approved",
    "denied",
    "rejected",
    "executed",
    "failed",
    "expired",
    "superseded",
)


def answer(payload: dict[str, Any]) -> dict[str, Any]:
    """`payload` as JSON values (DuckDB's decimals, dates and the like made plain), cut to `MAX_RESULT_BYTES`."""
    plain: dict[str, Any] = jsonable(payload)
    return bounded(plain, MAX_RESULT_BYTES)


class McpTools:
    """The tools over one workspace. `files_roots`: where `investigate` may read (none: it refuses)."""

    def __init__(
        self,
        workspace: Workspace,
        files_roots: Sequence[Path] = (),
        clock: Callable[[], float] = time.time,
        proposals_per_minute: int = PROPOSALS_PER_MINUTE,
    ) -> None:
        self.workspace = workspace
        self.files_roots = tuple(files_roots)
        self.clock = clock
        self.proposals_per_minute = proposals_per_minute
        self._filed_s: deque[float] = deque()  # when this server filed its recent proposals (monotonic)
        self.guard = WorkspaceGuard(workspace, None, clock, origin="mcp")
        # One call at a time (the server runs each in a worker thread): DuckDB refuses a writable connection
        # to a file this process holds read-only, and the other way round, so a propose beside a read would fail.
        self.lock = threading.Lock()

    def _analyst(self, store: Store) -> Analyst:
        return Analyst.from_store(store)

    def incidents(self) -> dict[str, Any]:
        with self.workspace.read() as store:
            summary = self._analyst(store).incidents_summary()
        newest = summary[-MAX_INCIDENTS:]  # the analyst lists them oldest first
        return answer({"incidents": newest, "total": len(summary)})

    def hypotheses(self, incident_id: str) -> dict[str, Any]:
        with self.workspace.read() as store:
            analyst = self._analyst(store)
        d = analyst.get(incident_id)
        if d is None:
            known = [x.incident.incident_id for x in analyst.diagnoses][:50]
            raise ToolError(
                f"hypotheses: field 'incident_id': no incident {incident_id[:80]!r}"
                f" (known: {', '.join(known) or 'none'})"
            )
        return answer(
            {
                "incident": d.incident.model_dump(mode="json"),
                "hypotheses": [h.model_dump(mode="json") for h in d.hypotheses[:MAX_HYPOTHESES]],
                "remediation": action_dicts(analyst.remediation(d.incident.incident_id)),
            }
        )

    def component(
        self, component: str, start_ts_s: float | None = None, end_ts_s: float | None = None
    ) -> dict[str, Any]:
        for name, value in (("start_ts_s", start_ts_s), ("end_ts_s", end_ts_s)):
            if value is not None and not math.isfinite(value):
                raise ToolError(f"component: field '{name}': must be a finite number of Unix seconds")
        scope = None
        if start_ts_s is not None or end_ts_s is not None:
            scope = TimeScope(start_ts_s, end_ts_s, "")
        with self.workspace.read() as store:
            if about_component.kind_of(store, component) is None:
                raise ToolError(f"component: {Analyst._unknown(store, [component[:200]])}")
            analyst = self._analyst(store)
            found = about_component.about(store, component, scope, analyst.diagnoses)
            place = topology_of(store, component)
        return answer(
            {
                "component": component,
                "window": {"start_ts_s": start_ts_s, "end_ts_s": end_ts_s},
                "topology": place,
                "findings": found.lines,
                "evidence": [e.model_dump(mode="json") for e in found.evidence[:MAX_EVIDENCE]],
            }
        )

    def investigate(self, paths: Sequence[str]) -> dict[str, Any]:
        try:
            with confined(paths, self.files_roots) as files:
                result = investigate_files(
                    [f.path for f in files],
                    names=source_names([Path(p) for p in paths]),
                    limits=BUNDLE_LIMITS,
                )
        except ToolError:
            raise
        except AiopsError as exc:  # nothing could be read: the analyst's own words, naming the files
            raise ToolError(f"investigate: {exc}") from exc
        return answer(result)

    def report(
        self, since: str | None = None, start: str | None = None, end: str | None = None
    ) -> dict[str, Any]:
        from aiops.report import limits  # here: matplotlib loads only for a report
        from aiops.report.build import build_report
        from aiops.report.period import report_period

        with (
            tempfile.TemporaryDirectory(prefix="aiops-mcp-report-") as spill,
            self.workspace.read(own_instance=True) as store,
        ):
            limits.apply_report_limits(
                store, memory_limit_mb=REPORT_MEMORY_MB, threads=REPORT_THREADS, temp_dir=Path(spill)
            )
            latest = store.scalar("SELECT max(ts_s) FROM gpu_samples")
            period, note = report_period(
                since=since, start=start, end=end, now_ts_s=self.clock(), latest_ts_s=latest
            )
            report = build_report(store, period, now_ts_s=self.clock(), drawings=False)  # plots in words
        return answer(
            {
                "title": report.title,
                "start_ts_s": report.start_ts_s,
                "end_ts_s": report.end_ts_s,
                "generated_ts_s": report.generated_ts_s,
                "headline": report.headline,
                "has_telemetry": report.has_telemetry,
                "note": note,
                "sections": [
                    {
                        "key": s.key,
                        "title": s.title,
                        "lines": s.lines,
                        "tables": [
                            {
                                "caption": t.caption,
                                "headers": list(t.headers),
                                "rows": [list(r) for r in t.rows],
                            }
                            for t in s.tables
                        ],
                        # the drawings stay out (SVG documents): what each shows, in words
                        "plots": [{"key": p.key, "title": p.title, "alt": p.alt} for p in s.plots],
                    }
                    for s in report.sections
                ],
            }
        )

    def proposals(self, status: str | None = None) -> dict[str, Any]:
        if status is not None and status not in PROPOSAL_STATUSES:
            raise ToolError(
                f"proposals: field 'status': {status[:40]!r} is not one (allowed: {', '.join(PROPOSAL_STATUSES)})"
            )
        with self.workspace.read() as store:
            records = GuardrailRecords(store).proposals(status)
        newest = sorted(records, key=lambda r: r.action.created_ts_s, reverse=True)[:MAX_PROPOSALS]
        return answer(
            {
                "proposals": [
                    {
                        "proposal_id": r.proposal_id,
                        "status": r.status,
                        "message": r.message,
                        "physical": r.physical,
                        "approvals_needed": r.approvals_needed,
                        "origin": r.origin,
                        "incident_id": r.incident_id,
                        "action": r.action.model_dump(mode="json"),
                    }
                    for r in newest
                ],
                "total": len(records),
            }
        )

    def safety(self, what: str) -> dict[str, Any]:
        """rollbacks | breaker | lemons (aiops/mcpserver/safety_tools.py), read-only."""
        with self.workspace.read() as store:
            return answer(READS[what](store))

    def _take_proposal_turn(self) -> None:
        now_s = time.monotonic()
        while self._filed_s and now_s - self._filed_s[0] > 60.0:
            self._filed_s.popleft()
        if len(self._filed_s) >= self.proposals_per_minute:
            raise ToolError(
                f"propose: {self.proposals_per_minute} proposals in the last minute already: try again later"
            )
        self._filed_s.append(now_s)

    def propose(
        self,
        kind: str,
        target: str,
        parameters: dict[str, Any] | None = None,
        reason: str = "",
        incident_id: str | None = None,
    ) -> dict[str, Any]:
        params = parameters or {}
        problem = parameter_problem(params)
        if problem:
            raise ToolError(f"propose: field 'parameters': {problem}")
        if incident_id is not None:
            with self.workspace.read() as store:
                if self._analyst(store).get(incident_id) is None:
                    raise ToolError(f"propose: field 'incident_id': no incident {incident_id[:80]!r}")
        self._take_proposal_turn()
        wanted = {"kind": kind, "target": target, "parameters": params}
        try:
            action = Action(
                proposal_id=proposal_id(f"mcp-{uuid.uuid4().hex}", wanted),  # a new id; guardrails dedupe
                **wanted,
                reason=reason[:MAX_REASON_CHARS],
                proposed_by="llm",  # another agent: the same standing as this project's own LLM
                created_ts_s=self.clock(),
            )
        except ValueError as exc:
            raise ToolError(f"propose: {str(exc).splitlines()[0][:300]}") from None
        verdict = self.guard.propose(action, incident_id)
        record = self.guard.proposal(verdict.proposal_id)
        return answer(
            {
                "proposal_id": verdict.proposal_id,
                "status": record["status"] if record else "unknown",
                "allowed": verdict.allowed,
                "physical": verdict.physical,
                "approvals_needed": verdict.approvals_needed,
                "action_hash": verdict.action_hash,
                "reasons": verdict.reasons,
                "existing": verdict.existing,
                "executor": record["executor"] if record else "",
                "next": "a person approves or rejects it (aiops actions, the console); this server cannot",
            }
        )
