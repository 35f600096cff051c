"""Issue 14, item 4: the model's hypotheses count only when verified. Through the real `openai` client and the
scripted OpenAI-protocol server on loopback, over a tiny demo workspace (thermal fault on node1/gpu1) to which a
second cause the analyst's stored diagnosis missed is added: node0/gpu0 fell off the bus (XID 79 rows).

- a model that finds that second cause with a real citation: verified, merged, stored; recall@3 of the
  expected causes goes from 1/2 to 2/2;
- a wrong cause citing `SELECT 1`, a literal row, or rows about another GPU: unverified, nothing changes;
- a label outside the set, a component not in the topology: refused with the reason."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import duckdb
import pytest

from aiops.agent.config import AgentConfig, Limits
from aiops.agent.session import Reply, open_session
from aiops.agent.verify import MAX_HYPOTHESES
from aiops.sim import SIM_EPOCH_TS_S
from tests.agent_fakes import final, scripted_llm, tiny_demo_db, tool_call

EXPECTED = [("thermal_throttle", "node1/gpu1"), ("gpu_fell_off_bus", "node0/gpu0")]
XID_SQL = "SELECT ts_s, gpu, node, xid, message FROM gpu_events WHERE kind = 'xid' ORDER BY ts_s"


def _config(base_url: str) -> AgentConfig:
    return AgentConfig(base_url=base_url, model="scripted", api_key="k", timeout_s=5.0, limits=Limits())


def _two_cause_db(tmp_path: Path) -> Path:
    """The tiny demo, plus XID 79 on node0/gpu0 that the stored analysis never saw."""
    db, _ = tiny_demo_db(tmp_path)
    with duckdb.connect(str(db)) as conn:
        for k in range(3):
            conn.execute(
                "INSERT INTO gpu_events VALUES (?, 'node0/gpu0', 'node0', 'xid', 79, ?)",
                [SIM_EPOCH_TS_S + 120 + k, "GPU has fallen off the bus"],
            )
    return db


def recall_at_3(hypotheses: list[dict[str, Any]]) -> float:
    top = {(h["root_cause"], h["component"]) for h in hypotheses[:3]}
    return sum(1 for e in EXPECTED if e in top) / len(EXPECTED)


def _hypothesis(
    label: str, component: str, *claims: dict[str, Any], confidence: float = 0.8
) -> dict[str, Any]:
    return {
        "root_cause": label,
        "component": component,
        "confidence": confidence,
        "summary": "s",
        "claims": list(claims),
    }


def _ask(db: Path, hypotheses: list[dict[str, Any]], pre: list[dict[str, Any]] | None = None) -> Reply:
    body = final("see hypotheses")
    doc = json.loads(body["message"]["content"])
    doc["hypotheses"] = hypotheses
    body["message"]["content"] = json.dumps(doc)
    with scripted_llm([*(pre or []), body]) as llm, open_session(db, config=_config(llm.base_url)) as session:
        reply = session.ask("What is the root cause of the incident?", "alice")
        reply.note = str(len(session.journal.entries(kind="llm_hypotheses")))
    return reply


def _analyst_only(db: Path) -> list[dict[str, Any]]:
    with open_session(db, config=AgentConfig()) as session:
        return session.ask("What is the root cause of the incident?").hypotheses


@pytest.fixture(scope="module")
def before(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """The analyst's ranking on the two-cause workspace without a model, once for the module (every test
    below asks its model on a fresh copy of the same workspace and compares with it)."""
    return _analyst_only(_two_cause_db(tmp_path_factory.mktemp("before")))


def test_a_verified_second_cause_is_merged_and_raises_the_score(
    tmp_path: Path, before: list[dict[str, Any]]
) -> None:
    db = _two_cause_db(tmp_path)
    assert before and before[0]["root_cause"] == "thermal_throttle" and before[0]["component"] == "node1/gpu1"
    assert recall_at_3(before) == pytest.approx(0.5)  # the analyst missed the second cause
    reply = _ask(
        db,
        [
            _hypothesis(
                "gpu_fell_off_bus", "node0/gpu0", {"text": "XID 79 on node0/gpu0", "tool_call_id": "c1"}
            )
        ],
        pre=[tool_call("sql", {"query": XID_SQL}, "c1")],
    )
    assert [h["status"] for h in reply.llm_hypotheses] == ["verified"], reply.llm_hypotheses
    assert reply.hypotheses[0] == {**before[0], "source": "analyst"}  # the analyst's first stays first
    merged = [(h["root_cause"], h["component"], h["source"]) for h in reply.hypotheses]
    assert ("gpu_fell_off_bus", "node0/gpu0", "llm") in merged[:3]
    assert recall_at_3(reply.hypotheses) == pytest.approx(1.0)
    assert reply.note == "1"  # stored in the agent's journal


# The wrong, refused and forged cases below are each one model reply carrying all of a group's hypotheses (at most
# MAX_HYPOTHESES, citations within the re-run budget): each hypothesis is judged on its own (aiops/agent/verify.py
# `check_hypotheses`), and one session a group instead of one a case spares a session's start (its SQL worker
# process, the twin rebuilt from the workspace) per case. Each case's status and reason are asserted by name.
WRONG_CITATIONS = [
    ("SELECT 1", "no telemetry table"),
    ("SELECT 'node1/gpu0' AS gpu, 'node1' AS node, 79 AS xid FROM gpu_events", "constant"),
    ("SELECT * FROM (VALUES ('node1/gpu0', 'node1', 79)) v(gpu, node, xid), gpu_events", "constant"),
    (XID_SQL, "mention node1/gpu0"),  # real XID 79 rows, but about node0/gpu0
    ("SELECT gpu, node, max(temp_c) AS t FROM gpu_samples WHERE gpu = 'node1/gpu0' GROUP BY ALL", "shows"),
]
OUTSIDE = [
    ("cosmic_rays", "node0/gpu0", "is not a label"),
    ("gpu_fell_off_bus", "node6/gpu2", "not in the workspace's topology"),
    ("gpu_fell_off_bus", "node0/gpu0; DROP TABLE x", "not in the workspace's topology"),
    ("gpu_fell_off_bus", "rack0", "targets gpu, not a rack"),
]
FORGED = [
    "SELECT gpu, node, xid * 0 + 79 AS xid FROM gpu_events WHERE gpu = 'node1/gpu0' OR true",
    "SELECT gpu, node, message AS nvml_error FROM gpu_samples, gpu_events",
    "SELECT replace(gpu, 'node0/gpu0', 'node1/gpu0') AS gpu, 'x' || node AS node, xid FROM gpu_events",
    "SELECT g.gpu, g.node, e.xid FROM gpu_samples g, gpu_events e WHERE g.gpu = 'node1/gpu0'",
    "WITH f AS (SELECT gpu, node, count(xid) + 78 AS xid FROM gpu_events GROUP BY ALL) "
    "SELECT 'node1/gpu0' || '' AS gpu, node, xid FROM f",
    "SELECT s.gpu, s.node, (SELECT max(xid) FROM gpu_events) AS xid FROM gpu_samples s",
]


def _judged(reply: Reply, cases: list[Any]) -> list[dict[str, Any]]:
    """The reply's judgement of each case's hypothesis, in the order they were given."""
    assert len(reply.llm_hypotheses) == len(cases) <= MAX_HYPOTHESES, reply.llm_hypotheses
    return reply.llm_hypotheses


def test_a_wrong_cause_with_a_trivial_citation_changes_nothing(
    tmp_path: Path, before: list[dict[str, Any]]
) -> None:
    db = _two_cause_db(tmp_path)
    reply = _ask(
        db,
        [
            _hypothesis(
                "gpu_fell_off_bus", "node1/gpu0", {"text": "node1/gpu0 is gone", "sql": sql}, confidence=0.99
            )
            for sql, _ in WRONG_CITATIONS
        ],
    )
    for (sql, why), h in zip(WRONG_CITATIONS, _judged(reply, WRONG_CITATIONS), strict=True):
        assert h["status"] == "unverified" and why in h["reason"], (sql, h)
    assert reply.hypotheses == [{**b, "source": "analyst"} for b in before]
    assert recall_at_3(reply.hypotheses) == recall_at_3(before)


def test_labels_outside_the_set_and_unknown_components_are_refused(tmp_path: Path) -> None:
    db = _two_cause_db(tmp_path)
    reply = _ask(
        db, [_hypothesis(label, component, {"text": "x", "sql": XID_SQL}) for label, component, _ in OUTSIDE]
    )
    for (label, component, why), h in zip(OUTSIDE, _judged(reply, OUTSIDE), strict=True):
        assert h["status"] == "refused" and why in h["reason"], (label, component, h)
    assert all(m["source"] == "analyst" for m in reply.hypotheses)


def test_forged_columns_and_joins_verify_nothing(tmp_path: Path) -> None:
    db = _two_cause_db(tmp_path)
    reply = _ask(
        db, [_hypothesis("gpu_fell_off_bus", "node1/gpu0", {"text": "forged", "sql": sql}) for sql in FORGED]
    )
    for sql, h in zip(FORGED, _judged(reply, FORGED), strict=True):
        assert h["status"] == "unverified", (sql, h)
    assert all(m["source"] == "analyst" for m in reply.hypotheses)
