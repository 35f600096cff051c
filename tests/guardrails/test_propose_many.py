"""`ProposalFiling.propose_many` (a plan step's targets: one action a GPU, 5,120 in a shard at a site cap) files
what `propose` once an action, in order, files: the same records, statuses, messages, audit entries (each action's
`proposal` then `validation`, chained as before) and witness heads, with open duplicates found as one by one
finds them (an earlier open proposal, the oldest of two; one earlier in the same batch; never an expired one, a
denied one or another class's), and a known id's verdict updated. It does so with a number of DuckDB statements
that does not grow with the batch, and so does `propose_step` (its ids drawn together, still unused ones)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from aiops.errors import GuardrailError
from aiops.models import Hypothesis, Incident
from aiops.plans import StepDraft, file_plan, lifecycle
from aiops.store import Store
from guardrails.actions import Action
from guardrails.audit import verify, verify_witness
from guardrails.policy import Context
from guardrails.proposal_desk import Guardrails
from guardrails.proposal_filing import DEFAULT_PROPOSAL_TTL_S, Filed
from guardrails.topology import Topology
from tests.guardrails_helpers import gpu_state

NOW = 1_800_000_000.0
TOPOLOGY = Topology.grid(1, 8, 8, 1)
GPUS = {g: gpu_state(g) for node in TOPOLOGY.node_gpus.values() for g in node}
TARGETS = sorted(GPUS)
FILED_AS = {"origin": "plan", "incident_id": "INC-1", "step_id": "PL-1.1"}


def _action(pid: str, target: str, limit_w: float = 560.0, *, by: str = "analyst", at: float = NOW) -> Action:
    return Action(
        proposal_id=pid,
        kind="set_power_limit",
        target=target,
        parameters={"power_limit_w": limit_w},
        proposed_by=by,
        created_ts_s=at,
    )


def _desk(db: Path) -> Guardrails:
    return Guardrails(Store(db), context_for=lambda now: Context(TOPOLOGY, GPUS, (), now), clock=lambda: NOW)


def _before(desk: Guardrails) -> None:
    """What the workspace holds before the step: an open proposal the step repeats, an expired one, two open
    copies of one action (the other tier's, stored without audit: the oldest stands for it), a denied one."""
    desk.propose(_action("P-earlier", TARGETS[0]))
    desk.propose(_action("P-stale", TARGETS[1], at=NOW - 2 * DEFAULT_PROPOSAL_TTL_S))  # expired by now
    for pid, at in (("P-copy-new", NOW - 10), ("P-copy-old", NOW - 20)):
        desk.records.save_proposal(
            _action(pid, TARGETS[2], at=at), status="pending", message="ok", physical=True, approvals_needed=1
        )
    denied = desk.propose(_action("P-denied", TARGETS[3], 50.0, at=NOW - 30))
    assert denied.status == "denied"


def _step(count: int) -> list[Action]:
    """`count` (32 to 60) actions of a step: distinct GPUs at 560 W, and among them every case filing tells apart."""
    actions = [_action(f"B-{i:02d}", TARGETS[4 + i]) for i in range(count)]
    actions[5] = _action("B-05", TARGETS[9], 50.0)  # below the GPU's floor: denied
    actions[12] = _action("B-12", TARGETS[11])  # repeats B-07 in the same batch: B-07 stands for it
    actions[13] = _action("B-13", TARGETS[9], 50.0)  # repeats the denied B-05: not open, filed (denied) again
    actions[14] = _action("B-14", TARGETS[11], by="policy:site-cap")  # B-07's action, another class: filed
    actions[15] = _action("B-15", TARGETS[11], by="policy:site-cap")  # repeats B-14 (its class)
    actions[20] = _action("B-20", TARGETS[0])  # repeats P-earlier, open before the step
    actions[21] = _action("B-21", TARGETS[1])  # repeats P-stale, expired: filed
    actions[22] = _action("B-22", TARGETS[2])  # two open copies: the oldest (P-copy-old) stands for it
    actions[23] = _action(
        "P-denied", TARGETS[3], 50.0
    )  # a known id, its action again: its verdict is updated
    actions[31] = _action("B-30", TARGETS[34], at=NOW + 1)  # B-30 again, later: the batch's own row updated
    return actions


def _one_by_one(desk: Guardrails, actions: list[Action], context: Context) -> list[Filed]:
    return [desk.propose(a, context=context, **FILED_AS) for a in actions]  # type: ignore[arg-type]


def _together(desk: Guardrails, actions: list[Action], context: Context) -> list[Filed]:
    return desk.propose_many(actions, context=context, **FILED_AS)  # type: ignore[arg-type]


def _file(db: Path, actions: list[Action], filing: Callable[..., list[Filed]], outer: bool) -> dict[str, Any]:
    """File `actions` on a fresh workspace holding `_before`'s proposals (in an audit batch with the plan's entry
    after them, as `propose_step` does, or alone); what it stored and said."""
    desk = _desk(db)
    _before(desk)
    context = desk.context(NOW)  # one for the step, as `propose_step` builds it
    if outer:
        with desk.audit.batch():
            filed = filing(desk, actions, context)
            desk.audit.append("plan", {"what": "proposed"}, proposal_id="PL-1", actor="analyst")
    else:
        filed = filing(desk, actions, context)
    witness = Path(f"{db}.witness")
    out = {
        "filed": [(f.proposal_id, f.status, f.existing, f.ok, f.message) for f in filed],
        "proposals": desk.store.conn.execute("SELECT * FROM proposals ORDER BY proposal_id").fetchall(),
        "audit": desk.store.conn.execute("SELECT * FROM audit_log ORDER BY seq").fetchall(),
        "witness": witness.read_text(),
        "verify": verify(desk.store).message,
        "witnessed": verify_witness(desk.store, witness).ok,
    }
    desk.store.close()
    return out


@pytest.mark.parametrize("outer", [True, False], ids=["in-a-step-batch", "alone"])
def test_propose_many_files_what_propose_one_by_one_files(tmp_path: Path, outer: bool) -> None:
    actions = _step(40)
    want = _file(tmp_path / "one" / "ws.duckdb", actions, _one_by_one, outer)
    got = _file(tmp_path / "many" / "ws.duckdb", actions, _together, outer)
    assert got["filed"] == want["filed"]
    assert got["proposals"] == want["proposals"]
    assert got["audit"] == want["audit"]
    assert got["witness"] == want["witness"]
    assert got["verify"].startswith("audit log ok") and got["witnessed"], got["verify"]
    # the cases are what the docstring says (so the comparison above covers each)
    by_id = {a.proposal_id: f for a, f in zip(actions, got["filed"], strict=True)}
    assert by_id["B-05"][1] == "denied" and by_id["B-13"][:3] == ("B-13", "denied", False)
    assert by_id["B-12"][:3] == ("B-07", "pending", True) and by_id["B-15"][:3] == ("B-14", "pending", True)
    assert by_id["B-20"][0] == "P-earlier" and by_id["B-22"][0] == "P-copy-old"
    assert by_id["B-21"][:3] == ("B-21", "pending", False) and by_id["B-14"][2] is False
    assert by_id["P-denied"][:3] == ("P-denied", "denied", False)
    events = [(r[2], r[3]) for r in got["audit"]]
    assert events.count(("proposal", "B-30")) == 2 and ("proposal", "B-12") not in events


def test_an_action_under_a_known_id_with_another_action_files_nothing(tmp_path: Path) -> None:
    desk = _desk(tmp_path / "ws.duckdb")
    _before(desk)
    proposals, rows = desk.store.scalar("SELECT count(*) FROM proposals"), len(desk.audit.rows())
    witnessed = Path(f"{desk.store.path}.witness").read_bytes()
    with pytest.raises(GuardrailError, match="P-earlier exists with a different action"):
        desk.propose_many([_action("B-00", TARGETS[20]), _action("P-earlier", TARGETS[21])])
    assert desk.store.scalar("SELECT count(*) FROM proposals") == proposals and len(desk.audit.rows()) == rows
    assert Path(f"{desk.store.path}.witness").read_bytes() == witnessed


class _Counted:
    """The store's connection, counting the statements run on it."""

    def __init__(self, conn: Any) -> None:
        self.conn, self.statements = conn, 0

    def execute(self, *args: Any, **kwargs: Any) -> Any:
        self.statements += 1
        return self.conn.execute(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.conn, name)


def _statements(db: Path, run: Callable[[Guardrails, Context], object]) -> int:
    """The statements `run` makes on a fresh workspace holding `_before`'s proposals (its context built before)."""
    desk = _desk(db)
    _before(desk)
    context = desk.context(NOW)
    counted = _Counted(desk.store.conn)
    desk.store.conn = counted  # type: ignore[assignment]
    try:
        run(desk, context)
    finally:
        desk.store.conn = counted.conn
        desk.store.close()
    return counted.statements


def _filing(
    count: int, filing: Callable[[Guardrails, list[Action], Context], list[Filed]]
) -> Callable[..., object]:
    return lambda desk, context: filing(desk, _step(count), context)


def test_the_statements_do_not_grow_with_the_batch(tmp_path: Path) -> None:
    # the witness's record read (twice), BEGIN, the stored proposals, the rows, P-denied's new verdict, the chain's
    # head, the audit rows, COMMIT
    many = {n: _statements(tmp_path / f"many{n}.duckdb", _filing(n, _together)) for n in (40, 60)}
    assert many[40] == many[60] == 9, many
    one = {n: _statements(tmp_path / f"one{n}.duckdb", _filing(n, _one_by_one)) for n in (40, 60)}
    assert one[60] > one[40], one  # what the count tells apart: one by one grows with the batch


INCIDENT = Incident(
    incident_id="INC-1", opened_ts_s=NOW - 300, last_ts_s=NOW, title="site cap", severity="warning",
    components=["fleet"], symptoms=[],
)  # fmt: skip
TOP = Hypothesis(root_cause="power_cap", component="fleet", confidence=0.9, summary="")


def _cap_step(count: int) -> StepDraft:
    actions = [_action("draft", g, at=0) for g in TARGETS[:count]]
    return StepDraft(1, "limit", "cap", "physical", actions, "effect", "cost", "rollback", 60.0, "x", "why")


def test_a_plan_steps_statements_do_not_grow_with_its_targets(tmp_path: Path) -> None:
    def plan_of(count: int) -> Callable[..., object]:
        return lambda desk, _: file_plan(desk, INCIDENT, TOP, [_cap_step(count)], "test")

    counts = {n: _statements(tmp_path / f"step{n}.duckdb", plan_of(n)) for n in (10, 64)}
    assert counts[10] == counts[64], counts


def _tokens(monkeypatch: pytest.MonkeyPatch, tokens: list[str]) -> None:
    """`secrets.token_hex` as the plans module sees it, drawing `tokens` in turn (then fresh counted ones)."""
    drawn: Iterator[str] = iter(tokens)
    fresh = iter(range(1 << 20, 1 << 21))
    monkeypatch.setattr(
        lifecycle, "secrets", SimpleNamespace(token_hex=lambda n: next(drawn, None) or f"{next(fresh):08x}")
    )


def test_a_steps_ids_are_drawn_together_unused_and_distinct(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    desk = _desk(tmp_path / "ws.duckdb")
    desk.propose(_action("P-0000000b", TARGETS[63]))  # filed earlier (a GPU outside the step)
    _tokens(monkeypatch, ["0000000a", "0000000b", "0000000a", "0000000c"])
    counted = _Counted(desk.store.conn)
    desk.store.conn = counted  # type: ignore[assignment]
    ids = lifecycle.new_proposal_ids(desk, 3)
    desk.store.conn = counted.conn
    # P-0000000b is stored and P-0000000a drawn twice: both redrawn, in one more query
    assert ids == ["P-0000000a", "P-0000000c", "P-00100000"] and counted.statements == 2
    _tokens(monkeypatch, [])
    _, filed = file_plan(desk, INCIDENT, TOP, [_cap_step(40)], "test")
    pids = [f.proposal_id for f in filed]
    assert len(set(pids)) == 40 and all(re.fullmatch(r"P-[0-9a-f]{8}", p) for p in pids), pids
    assert desk.store.scalar("SELECT count(*) FROM proposals") == 41
