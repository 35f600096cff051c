"""The model's hypotheses, checked before they count (issue 14, item 4).

A hypothesis from the model's final answer is `refused` when its label is not a diagnosis label
(`aiops.labels.DIAGNOSIS_LABELS`), its component is not in the workspace's topology (or a lane rule, for
`policy:` names), or the label cannot target that kind of component (`TARGET_KINDS`). Otherwise it is
`verified` only when at least one of its claims cites a SELECT that, re-run read-only through the agent's SQL
tool (same limits), returns a row that both

- mentions the claimed component: a column value equal to its name, or (for a GPU or NIC) a `node` value equal
  to its node and a `gpu`/`nic` value equal to its name or its local part (`gpu2`); a rack's rows mention
  `fleet`; and
- supports the label: the row passes the label's check in `SUPPORT` (aiops/agent/verify_checks.py: derived
  from the analyst's own facts and thresholds in aiops/rca), e.g. `gpu_fell_off_bus` needs an XID 79 or an NVML error.

A citation must read exactly one table, a telemetry one; no column of its select list may be a constant
expression (a literal with no column in it), nor may it read a VALUES list: `SELECT 1`, `SELECT 'node6/gpu2' AS
gpu, 79 AS xid FROM gpu_events` verify nothing. Only output columns that pass a stored column on unchanged are
read: the column itself or one value-keeping aggregate of it (min, max, avg, any_value, ...; sum of a counter),
named as the column, `max_`/`min_`/`avg_`/`ref_`/`first_` + the column, or one of the analyst's names (`ALIASES`).
So `xid * 0 + 79 AS xid`, `count(xid) AS xid`, `message AS nvml_error` or `replace(gpu, ...) AS gpu` are ignored,
and a join cannot pair one GPU's name with another's XID.
Everything else is `unverified`, shown as such and never merged.

`merge` adds verified hypotheses to the analyst's ranking without ever displacing the analyst's first
hypothesis or an analyst hypothesis on the same component; one the analyst already has is not repeated.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Literal

import duckdb

from aiops.agent.sqltool import ReadOnlySQL, check_select
from aiops.agent.verify_checks import ECC_XIDS, SUPPORT
from aiops.errors import SQLRejected
from aiops.labels import DIAGNOSIS_LABELS, TARGET_KINDS, component_kind, node_of
from aiops.text import plural

Status = Literal["verified", "unverified", "refused"]
Row = dict[str, Any]

MAX_HYPOTHESES = 8
MAX_CLAIMS_PER_HYPOTHESIS = 4
MAX_TEXT_CHARS = 500
TELEMETRY_TABLES = frozenset(
    {
        "gpu_samples",
        "gpu_events",
        "nic_samples",
        "flow_class_samples",
        "lane_rules",
        "collective_samples",
        "job_steps",
        "rack_samples",
        "host_samples",
        "job_ranks",
        "jobs",
        "gpu_processes",
        "rank_timing_samples",
        "node_placement",
    }
)


@dataclass
class LLMClaim:
    text: str
    sql: str = ""
    params: list[Any] = field(default_factory=list)
    status: Status = "unverified"
    note: str = ""


@dataclass
class LLMHypothesis:
    root_cause: str
    component: str
    confidence: float
    summary: str = ""
    claims: list[LLMClaim] = field(default_factory=list)
    status: Status = "unverified"
    reason: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "root_cause": self.root_cause,
            "component": self.component,
            "confidence": self.confidence,
            "summary": self.summary,
            "status": self.status,
            "reason": self.reason,
            "source": "llm",
            "claims": [c.__dict__ for c in self.claims],
        }


def _text(value: Any, limit: int = MAX_TEXT_CHARS) -> str:
    return value[:limit] if isinstance(value, str) else ""


def _confidence(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0.0
    try:
        number = float(value)
    except OverflowError:  # an integer past a float's range
        return 0.0
    return round(min(max(number, 0.0), 1.0), 3) if math.isfinite(number) else 0.0


def parse_hypotheses(draft: dict[str, Any], tool_log: list[dict[str, Any]]) -> list[LLMHypothesis]:
    """The model's hypotheses (at most MAX_HYPOTHESES, each with at most MAX_CLAIMS_PER_HYPOTHESIS claims).
    A claim's citation is its `sql` (and `params`), or the SQL of the successful `sql` tool call it names."""
    calls = {str(e["call_id"]): e for e in tool_log if e.get("name") == "sql" and e.get("ok")}
    out: list[LLMHypothesis] = []
    for item in list(draft.get("hypotheses") or [])[:MAX_HYPOTHESES]:
        if not isinstance(item, dict):
            out.append(LLMHypothesis("?", "?", 0.0, status="refused", reason="not an object"))
            continue
        label = _text(item.get("root_cause") or item.get("label"), 64)
        claims = []
        for raw in list(item.get("claims") or [])[:MAX_CLAIMS_PER_HYPOTHESIS]:
            if not isinstance(raw, dict):
                continue
            call = calls.get(str(raw.get("tool_call_id", "")))
            sql = str(call["result"]["sql"]) if call else _text(raw.get("sql"), 4000)
            params = raw.get("params") if isinstance(raw.get("params"), list) and not call else []
            claims.append(LLMClaim(text=_text(raw.get("text")), sql=sql, params=list(params or [])))
        out.append(
            LLMHypothesis(
                root_cause=label,
                component=_text(item.get("component"), 200),
                confidence=_confidence(item.get("confidence")),
                summary=_text(item.get("summary")),
                claims=claims,
            )
        )
    return out


def refusal(h: LLMHypothesis, components: frozenset[str], racks: frozenset[str] = frozenset()) -> str | None:
    """Why the hypothesis is refused outright (label or component), or None. `racks`: the topology's racks
    (a configured rack's name is told from a host's by them)."""
    if h.root_cause not in DIAGNOSIS_LABELS:
        return f"root_cause {h.root_cause[:64]!r} is not a label (allowed: {', '.join(DIAGNOSIS_LABELS)})"
    kind = component_kind(h.component, racks)
    if kind is None or h.component not in components:
        return f"component {h.component[:200]!r} is not in the workspace's topology"
    if kind not in TARGET_KINDS[h.root_cause]:
        return f"{h.root_cause} targets {'/'.join(TARGET_KINDS[h.root_cause])}, not a {kind}"
    return None


def mentions(row: Row, component: str) -> bool:
    """Whether the row is about `component` (see the module docstring)."""
    values = {v for v in row.values() if isinstance(v, str)}
    if component in values:
        return True
    kind = component_kind(component)
    if kind == "fleet":
        return any(re.fullmatch(r"rack\d+", v) for v in values) or bool(row.get("rack"))
    if kind == "policy":
        return row.get("rule_id") == component.split(":", 1)[1]
    if kind in ("gpu", "nic", "accel") and row.get("node") == node_of(component):
        local = component.split("/", 1)[1]
        return row.get(kind) in (component, local)
    return False


# Output names a column may take besides its own (the analyst's facts' names); `max_x`, `min_x`, `avg_x`, `ref_x`,
# `first_x` and `x` itself are always allowed.
ALIASES = {
    "limit_w": "power_limit_w",
    "max_limit_w": "power_limit_max_w",
    "dbe": "ecc_dbe_total",
    "width": "pcie_link_width",
    "max_width": "pcie_link_max_width",
    "replay": "pcie_replay_total",
    "reasons": "clocks_event_reasons",
    "min_flow_lpm": "coolant_flow_lpm",
    "inlet_c": "inlet_temp_c",
    "max_inlet_c": "inlet_temp_c",
    "loader_ms": "loader_wait_ms",
    "queue_ms": "queue_delay_ms",
    "nvml_errors": "nvml_error",
}
VALUE_AGGREGATES = frozenset(
    {"min", "max", "any_value", "first", "last", "arg_max", "median", "avg", "bit_or"}
)
COUNTERS = frozenset(
    {"drops", "retransmits", "ce_marks", "carrier_changes", "tx_bytes"}
)  # sum() keeps the kind


def _fits(out: str, column: str) -> bool:
    prefixed = {f"{p}_{column}" for p in ("max", "min", "avg", "ref", "first")}
    return out == column or out in prefixed or ALIASES.get(out) == column


def _passes_on(expr: dict[str, Any]) -> tuple[str | None, bool]:
    """(the output name, whether the column passes a stored column on unchanged under a name that fits it)."""
    alias = str(expr.get("alias") or "").casefold()
    if expr.get("type") == "COLUMN_REF":
        column = str((expr.get("column_names") or [""])[-1]).casefold()
        return alias or column, _fits(alias or column, column)
    args = expr.get("arguments") or [] if expr.get("type") == "FUNCTION" else []
    inner = args[0].get("expression", {}) if len(args) == 1 and isinstance(args[0], dict) else {}
    if not alias or inner.get("type") != "COLUMN_REF":
        return alias or None, False
    column = str((inner.get("column_names") or [""])[-1]).casefold()
    function = str(expr.get("function_name", "")).casefold()
    kept = function in VALUE_AGGREGATES or (function == "sum" and column in COUNTERS)
    kept = kept or (function == "count" and alias == "nvml_errors" and column == "nvml_error")
    return alias, kept and _fits(alias, column)


@dataclass
class _Shape:
    tables: set[str] = field(default_factory=set)
    constant: bool = False  # a select-list column with a literal and no column, or a VALUES list
    derived: set[str] = field(default_factory=set)  # output names some SELECT computes rather than passes on


def _shape(sql: str) -> _Shape:
    """What the SELECT reads and which of its output names carry stored values unchanged (every SELECT of
    the statement, CTEs and subqueries included: a name computed anywhere is not trusted anywhere)."""
    with duckdb.connect() as conn:
        row = conn.execute("SELECT json_serialize_sql(?)", [sql]).fetchone()
    tree = json.loads(str(row[0])) if row else {"error": True}
    if tree.get("error"):
        raise SQLRejected("not valid SQL")
    shape = _Shape()

    def has(node: Any, wanted: str) -> bool:
        if isinstance(node, dict):
            return node.get("type") == wanted or any(has(v, wanted) for v in node.values())
        return isinstance(node, list) and any(has(v, wanted) for v in node)

    stack: list[Any] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("type") == "BASE_TABLE":
                shape.tables.add(str(node.get("table_name", "")).casefold())
            shape.constant = shape.constant or node.get("type") == "EXPRESSION_LIST"  # VALUES (...)
            for column in node.get("select_list") or [] if node.get("type") == "SELECT_NODE" else []:
                if has(column, "VALUE_CONSTANT") and not has(column, "COLUMN_REF"):
                    shape.constant = True
                if isinstance(column, dict) and column.get("type") != "STAR":
                    name, kept = _passes_on(column)
                    if name and not kept:
                        shape.derived.add(name)
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    return shape


def check_claim(claim: LLMClaim, h: LLMHypothesis, sql: ReadOnlySQL) -> LLMClaim:
    """The claim with its status: verified only when a re-run row mentions the component and supports the label."""

    def unverified(note: str) -> LLMClaim:
        return LLMClaim(claim.text, claim.sql, claim.params, "unverified", note[:300])

    if not claim.sql:
        return unverified("no citation")
    try:
        check_select(claim.sql)
        shape = _shape(claim.sql)
        if not shape.tables & TELEMETRY_TABLES:
            return unverified("the citation reads no telemetry table")
        if len(shape.tables) > 1:
            return unverified(f"the citation joins {len(shape.tables)} tables: cite one table's rows")
        if shape.constant:
            return unverified("the citation selects a constant: a literal is not telemetry")
        ran: list[Row] = sql.run(claim.sql, claim.params)["rows"]
    except (SQLRejected, duckdb.Error) as exc:
        return unverified(f"citation does not run: {exc}")
    # only the columns that carry stored values unchanged, under names that fit them, are read
    rows = [{k: v for k, v in r.items() if k.casefold() not in shape.derived} for r in ran]
    about = [r for r in rows if mentions(r, h.component)]
    if not about:
        return unverified(f"none of the {plural(len(rows), 'row')} mention {h.component}")
    what, supports = SUPPORT[h.root_cause]
    if not any(supports(r) for r in about):
        return unverified(f"no row about {h.component} shows {h.root_cause} ({what})")
    return LLMClaim(
        claim.text, claim.sql, claim.params, "verified", f"{plural(len(about), 'row')} about it support it"
    )


def check_hypotheses(
    hypotheses: list[LLMHypothesis],
    components: frozenset[str],
    sql: ReadOnlySQL,
    *,
    max_reruns: int = 12,
    racks: frozenset[str] = frozenset(),
) -> list[LLMHypothesis]:
    """Each hypothesis refused, unverified or verified (at most `max_reruns` citations are run in all)."""
    reruns = 0
    for h in hypotheses:
        if h.status == "refused":
            continue
        why = refusal(h, components, racks)
        if why:
            h.status, h.reason = "refused", why
            continue
        checked = []
        for claim in h.claims:
            if reruns >= max_reruns:
                checked.append(
                    LLMClaim(claim.text, claim.sql, claim.params, "unverified", "re-run budget spent")
                )
                continue
            reruns += 1 if claim.sql else 0
            checked.append(check_claim(claim, h, sql))
        h.claims = checked
        good = [c for c in checked if c.status == "verified"]
        h.status = "verified" if good else "unverified"
        h.reason = good[0].note if good else ("; ".join(c.note for c in checked) or "no claim cites evidence")
    return hypotheses


def merge(analyst: list[dict[str, Any]], llm: list[LLMHypothesis]) -> list[dict[str, Any]]:
    """The analyst's ranking with the verified LLM hypotheses added: never above the analyst's first hypothesis
    nor above an analyst hypothesis on the same component, else by confidence; duplicates are not added."""
    merged = [{**h, "source": h.get("source", "analyst")} for h in analyst]
    have = {(h["root_cause"], h["component"]) for h in merged}
    for h in sorted((h for h in llm if h.status == "verified"), key=lambda h: -h.confidence):
        if (h.root_cause, h.component) in have:
            continue
        floor = max(
            [1 if merged else 0] + [i + 1 for i, a in enumerate(merged) if a["component"] == h.component]
        )
        at = next(
            (i for i in range(floor, len(merged)) if float(merged[i]["confidence"]) < h.confidence),
            len(merged),
        )
        entry = {
            "root_cause": h.root_cause,
            "component": h.component,
            "confidence": h.confidence,
            "summary": h.summary,
            "source": "llm",
        }
        merged.insert(at, entry)
        have.add((h.root_cause, h.component))
    return merged


def topology_components(sql: ReadOnlySQL) -> frozenset[str]:
    """Every component of the workspace's topology and every lane rule as `policy:{rule_id}`."""
    with sql.workspace.read() as store:
        names = {str(r[0]) for r in store.conn.execute("SELECT component FROM topology").fetchall()}
        names |= {
            f"policy:{r[0]}" for r in store.conn.execute("SELECT DISTINCT rule_id FROM lane_rules").fetchall()
        }
    return frozenset(names)


def topology_racks(sql: ReadOnlySQL) -> frozenset[str]:
    """The racks of the workspace's topology (any configured name)."""
    with sql.workspace.read() as store:
        rows = store.conn.execute("SELECT component FROM topology WHERE kind = 'rack'").fetchall()
    return frozenset(str(r[0]) for r in rows)


__all__ = [
    "ECC_XIDS",
    "SUPPORT",
    "LLMHypothesis",
    "check_hypotheses",
    "merge",
    "parse_hypotheses",
    "topology_components",
    "topology_racks",
]
