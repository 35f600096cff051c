"""How often a chat question opens the workspace's file (each open is a new DuckDB instance: ~15 ms of CPU, and a
moment the file is locked): the guardrail, execute and verify nodes hold one open for all their proposals
(`Workspace.held`), the steps after them use what the node read in its open, the analyst's reads share one, and
the journal is written and the reply read in one. The hold itself: nested reads
and writes reuse it, a write inside a read-only hold and a loan to the SQL worker inside a writable one are refused
(the borrower would wait on our own lock), and it ends with the block."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path

import pytest

from aiops.agent.config import AgentConfig
from aiops.agent.session import open_session
from aiops.store import Store, Workspace
from aiops.store import workspace as workspace_module
from tests.agent_fakes import final, scripted_llm, tiny_demo_db, tool_call

# Five proposals of the model's answer, besides the analyst's: without the hold, one write open each in the
# guardrail node and, once each is approved, a read and a write each in the execute node.
PROPOSALS = [
    {"kind": "set_power_limit", "target": f"node{n // 2}/gpu{n % 2}", "parameters": {"power_limit_w": 600}}
    for n in range(4)
] + [{"kind": "drain_node", "target": "node1"}]


def _counting(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    opens: Counter[str] = Counter()
    real = workspace_module.Workspace._open

    def counted(self: Workspace, read_only: bool, own_instance: bool = False) -> Store:
        opens["read" if read_only else "write"] += 1
        return real(self, read_only, own_instance)

    monkeypatch.setattr(workspace_module.Workspace, "_open", counted)
    return opens


def test_a_question_with_five_proposals_opens_the_file_a_few_times(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db, _ = tiny_demo_db(tmp_path)
    script = [
        tool_call("sql", {"query": "SELECT gpu FROM gpu_samples LIMIT 1"}, "c1"),
        final("Cap four GPUs and drain node1.", proposals=[{**p, "reason": "test"} for p in PROPOSALS]),
    ]
    with scripted_llm(script) as llm:
        config = AgentConfig(base_url=llm.base_url, model="scripted", timeout_s=5.0)
        with open_session(db, config=config) as s:
            opens = _counting(monkeypatch)
            reply = s.ask("cap the hot GPUs", "alice")
            asked = sum(opens.values())
    mine = [p for p in reply.proposals if p["source"] == "llm"]
    assert len(mine) == len(PROPOSALS), reply.proposals
    # the staleness check before the graph, the analyst's reads, the guardrail node (one for all five proposals,
    # their statuses read in it for the approval step) and the journal with the reply's proposals: 4 (13 with
    # an open per read or write: one per proposal in the guardrail node)
    assert asked <= 4, opens


def test_nested_reads_and_writes_reuse_the_hold(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workspace = Workspace(tmp_path / "w.duckdb")
    with workspace.write() as store:
        store.conn.execute("CREATE TABLE t (x INTEGER)")
    opens = _counting(monkeypatch)
    with workspace.held():
        for n in range(3):
            with workspace.write() as store:
                store.conn.execute("INSERT INTO t VALUES (?)", [n])
            with workspace.read() as store:
                assert store.scalar("SELECT count(*) FROM t") == n + 1  # its own writes, at once
        with workspace.held(), workspace.read():  # nested: the outer hold serves
            pass
    assert opens == Counter(write=1)
    with workspace.read() as store:  # after the block: a new open, which sees every write
        assert store.scalar("SELECT count(*) FROM t") == 3
    assert opens == Counter(write=1, read=1)
    assert workspace.files() == [tmp_path / "w.duckdb"]  # checkpointed at the hold's end, no WAL left


def test_a_hold_refuses_what_would_wait_on_itself(tmp_path: Path) -> None:
    workspace = Workspace(tmp_path / "w.duckdb")
    with workspace.write():
        pass
    with workspace.held(writable=False):
        with workspace.read():
            pass
        with pytest.raises(RuntimeError, match="read-only hold"), workspace.write():
            pass
        with workspace.lend():  # a reader beside a read-only hold: fine
            pass
    with workspace.held(), pytest.raises(RuntimeError, match="lent while"), workspace.lend():
        pass


def test_a_hold_is_this_threads_alone(tmp_path: Path) -> None:
    """Another thread never gets our held store (a DuckDB connection is not for two threads at once): it opens
    its own (in this process DuckDB shares the database between the two connections)."""
    workspace = Workspace(tmp_path / "w.duckdb")
    with workspace.write() as store:
        store.conn.execute("CREATE TABLE t (x INTEGER)")
    theirs: list[Store] = []

    def other() -> None:
        with workspace.write() as store:
            store.conn.execute("INSERT INTO t VALUES (1)")
            theirs.append(store)

    with workspace.held(), workspace.read() as mine:
        thread = threading.Thread(target=other)
        thread.start()
        thread.join(30)
        assert len(theirs) == 1 and theirs[0] is not mine
        assert mine.scalar("SELECT count(*) FROM t") == 1
