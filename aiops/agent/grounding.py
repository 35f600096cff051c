"""Grounded answers: every factual claim carries a citation (the SQL and the values it returned); before an
answer is shown each citation is re-run over the read-only store and compared.

A claim is `verified` when its SQL re-runs, every cited row is among the rows the re-run returns, and every
number in the claim's text is one of the cited values (to the precision the text states). `mismatch` when the
SQL runs but the values differ and the data it reads is what it was when the answer was made (`as_of`:
aiops/agent/asof.py); when that data has changed since, or the SQL's window follows the wall clock, the claim
is `unverifiable` and says why: a moving window never makes a right answer a mismatch. `unverifiable` too when
there is no citation or it cannot be re-run.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from aiops.agent.asof import follows_the_clock, moved, tables_of, versions
from aiops.agent.sqltool import ReadOnlySQL
from aiops.errors import SQLRejected
from aiops.models import Evidence
from aiops.text import plural

Status = Literal["verified", "mismatch", "unverifiable", "pending"]
# A number not glued to an identifier (node3, gpu5, INC-0001, policy:rule-2) or a clock (12:04); units may
# follow it (88°C, 3.5s).
_NUMBER = re.compile(r"(?<![\w/.#:-])-?\d+(?:\.\d+)?(?![\d:]|\.\d)")
_NUMERIC = re.compile(r"^-?\d+(?:\.\d+)?$")
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


class Citation(BaseModel):
    model_config = ConfigDict(extra="ignore")
    sql: str
    params: list[Any] = Field(default_factory=list)
    values: list[Any] = Field(default_factory=list)  # rows (dicts) the SQL returned, or scalar values


class Claim(BaseModel):
    model_config = ConfigDict(extra="ignore")
    text: str
    citation: Citation | None = None
    status: Status = "pending"
    note: str = ""
    check_numbers: bool = True  # the analyst's templated claims are checked by their rows only
    as_of: dict[str, str] = Field(default_factory=dict)  # the versions of the data when it was made (asof.py)

    def mark(self) -> str:
        return {"verified": "✓", "mismatch": "✗", "unverifiable": "?", "pending": "…"}[self.status]


def claims_from_evidence(evidence: list[Evidence], as_of: dict[str, str] | None = None) -> list[Claim]:
    """The analyst's evidence as claims; `as_of`: the versions of the tables it read, taken with its rows."""
    return [
        Claim(
            text=e.claim,
            citation=Citation(sql=e.sql, params=e.params, values=e.rows),
            check_numbers=False,
            as_of=dict(as_of or {}),
        )
        for e in evidence
    ]


def claims_from_draft(
    draft: dict[str, Any], tool_log: list[dict[str, Any]], as_of: dict[str, str] | None = None
) -> list[Claim]:
    """The model's claims, each citing the SQL of a successful `sql` tool call it names (or its own `sql`);
    `as_of`: the versions of the data before the model's first query."""
    sql_calls = {e["call_id"]: e for e in tool_log if e["name"] == "sql" and e["ok"]}
    out = []
    for item in draft.get("claims", []):
        if isinstance(item, str):
            out.append(Claim(text=item, as_of=dict(as_of or {})))
            continue
        if not isinstance(item, dict) or not isinstance(item.get("text"), str):
            out.append(Claim(text=json.dumps(item)[:200], status="unverifiable", note="malformed claim"))
            continue
        citation = None
        call = sql_calls.get(str(item.get("tool_call_id", "")))
        values = item.get("values")
        if call is not None:
            rows = call["result"]["rows"][:12]
            citation = Citation(
                sql=call["result"]["sql"], values=values if isinstance(values, list) else rows
            )
        elif isinstance(item.get("sql"), str):
            citation = Citation(
                sql=item["sql"],
                params=item.get("params") or [],
                values=values if isinstance(values, list) else [],
            )
        out.append(Claim(text=item["text"], citation=citation, as_of=dict(as_of or {})))
    return out


def numbers_in(text: str) -> list[tuple[float, int]]:
    """(value, decimals) for each stand-alone number in `text`."""
    out = []
    for match in _NUMBER.finditer(_THOUSANDS.sub("", text)):
        token = match.group(0)
        decimals = min(len(token.split(".")[1]) if "." in token else 0, 12)
        out.append((_number(token), decimals))
    return out


def _close(claimed: float, actual: float, decimals: int) -> bool:
    tolerance = max(0.5 * 10.0**-decimals, 1e-6 * abs(actual))
    return math.isfinite(actual) and abs(claimed - actual) <= tolerance + 1e-9


def _number(value: int | float | str) -> float:
    """A number as a float; one too large for a float (a 400-digit integer) is infinite, never an error."""
    try:
        return float(value)
    except OverflowError:
        return math.inf if not str(value).lstrip().startswith("-") else -math.inf


def _decimals(value: float) -> int:
    text = repr(value)
    return len(text.split(".")[1]) if "." in text and "e" not in text else 0


def values_equal(claimed: Any, actual: Any) -> bool:
    if isinstance(claimed, bool) or isinstance(actual, bool):
        return bool(claimed == actual)
    if isinstance(claimed, int | float) and isinstance(actual, int | float):
        return _close(
            _number(claimed), _number(actual), _decimals(float(claimed)) if isinstance(claimed, float) else 0
        )
    if isinstance(claimed, list) and isinstance(actual, list):
        return len(claimed) == len(actual) and all(
            values_equal(c, a) for c, a in zip(claimed, actual, strict=True)
        )
    return str(claimed) == str(actual)


def _row_matches(claimed: dict[str, Any], actual: dict[str, Any]) -> bool:
    return all(k in actual and values_equal(v, actual[k]) for k, v in claimed.items())


def _scalars(values: list[Any]) -> list[float]:
    out: list[float] = []
    for v in values:
        if isinstance(v, dict):
            out.extend(_scalars(list(v.values())))
        elif isinstance(v, list):
            out.extend(_scalars(v))
        elif (isinstance(v, int | float) and not isinstance(v, bool)) or (
            isinstance(v, str) and _NUMERIC.match(v.strip())
        ):
            out.append(_number(v))
    return out


def verify_claim(claim: Claim, sql: ReadOnlySQL) -> Claim:
    """A copy of `claim` with its status and a note saying what was checked (a mismatch whose data moved on
    since the answer is said as such: `_moved_on`)."""
    checked = _checked(claim, sql)
    if checked.status != "mismatch" or checked.citation is None:
        return checked
    why = _moved_on(checked, sql)
    if why is None:
        return checked
    return checked.model_copy(
        update={"status": "unverifiable", "note": f"not a mismatch: {why}; ask again for the current rows"}
    )


def _moved_on(claim: Claim, sql: ReadOnlySQL) -> str | None:
    """Why a re-run cannot return what the claim cites although the claim may have been right: the data it
    reads changed since the answer, or its window follows the wall clock. None: the data is as it was."""
    assert claim.citation is not None
    if follows_the_clock(claim.citation.sql):
        return "its window follows the wall clock (now(), today()), so a re-run reads other rows"
    tables = tables_of(claim.citation.sql)
    before = {t: v for t, v in claim.as_of.items() if t in tables}
    if not before:
        return None
    try:
        after = versions(lambda query: list(sql.run(query)["rows"]), before)
    except SQLRejected:
        return None
    changed = moved(before, after)
    return f"the data changed since the answer ({'; '.join(changed)})" if changed else None


def _checked(claim: Claim, sql: ReadOnlySQL) -> Claim:
    c = claim.citation
    if c is None:
        return claim.model_copy(update={"status": "unverifiable", "note": "no citation"})
    try:
        rerun = sql.run(c.sql, c.params)
    except SQLRejected as exc:
        return claim.model_copy(update={"status": "unverifiable", "note": f"citation does not re-run: {exc}"})
    rows: list[dict[str, Any]] = rerun["rows"]
    actual_scalars = _scalars(rows)
    for value in c.values:
        if isinstance(value, dict):
            if not any(_row_matches(value, r) for r in rows):
                return claim.model_copy(
                    update={"status": "mismatch", "note": f"cited row not returned: {value}"}
                )
        elif not any(values_equal(value, a) for r in rows for a in r.values()):
            return claim.model_copy(
                update={"status": "mismatch", "note": f"cited value not returned: {value!r}"}
            )
    if claim.check_numbers:
        # Numbers in the text must be what the SQL returned now, not only what the model said it returned.
        cited = [
            s for s in _scalars(c.values) if any(_close(s, a, 6) for a in actual_scalars)
        ] or actual_scalars
        for number, decimals in numbers_in(claim.text):
            if not any(_close(number, v, decimals) for v in cited):
                return claim.model_copy(
                    update={
                        "status": "mismatch",
                        "note": f"{number:g} in the text is not among the cited values",
                    }
                )
    if not c.values and not rows:
        return claim.model_copy(update={"status": "verified", "note": "re-ran: no rows, as cited"})
    return claim.model_copy(
        update={"status": "verified", "note": f"re-ran: {plural(len(rows), 'row')} match"}
    )


def verify_claims(
    claims: list[Claim],
    sql: ReadOnlySQL,
    *,
    max_claims: int = 12,
    budget_s: float = 15.0,
    clock: Callable[[], float] = time.monotonic,
) -> list[Claim]:
    """Each claim checked, within the answer's budget: at most `max_claims` re-runs, and none started after
    `budget_s` seconds of re-running; the claims past either limit are `unverifiable` and say which limit.
    (A re-run started inside the budget is bounded by the SQL time limit.)"""
    out: list[Claim] = []
    start_s, reruns = clock(), 0
    for claim in claims:
        if claim.citation is None:
            out.append(verify_claim(claim, sql))
            continue
        if reruns >= max_claims:
            note = f"not re-run: at most {max_claims} claims are checked per answer"
            out.append(claim.model_copy(update={"status": "unverifiable", "note": note}))
            continue
        if clock() - start_s >= budget_s:
            note = f"not re-run: the answer's {budget_s:g} s verification budget is spent"
            out.append(claim.model_copy(update={"status": "unverifiable", "note": note}))
            continue
        reruns += 1
        out.append(verify_claim(claim, sql))
    return out


def rated_claims(claims: list[Claim], source: str) -> list[Claim]:
    """The claims an answer's citation rate is about: the model's own when the model answered (the analyst's
    evidence shown beside them, `check_numbers=False`, is not the model's grounding), else all of them."""
    return [c for c in claims if c.check_numbers] if source == "llm" else list(claims)


def verified_citation_rate(claims: list[Claim]) -> float:
    """Verified claims over all claims (0.0 when there are none: an answer with no claims grounds nothing)."""
    if not claims:
        return 0.0
    return sum(1 for c in claims if c.status == "verified") / len(claims)
