"""Issue 25 item 5 in the console: a proposal whose kind no backend executes on this host is shown as a ticket,
never with an approve button, and approving it anyway (a forged POST, `aiops actions approve`) records nothing;
on the twin, where every kind executes, the same proposal keeps its approve button."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aiops.cli.main import main
from aiops.store import Workspace
from guardrails.audit import read_rows
from tests.console_helpers import client, demo_proposal, fresh_demo, make_demo, sign_in


@pytest.fixture(scope="module")
def demo_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_demo(tmp_path_factory.mktemp("console-tickets"))


@pytest.fixture
def demo(demo_source: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return fresh_demo(demo_source, tmp_path, monkeypatch)


def _as_a_real_host(db: Path) -> None:
    """The same workspace with no twin behind it (its run's record gone) and no scheduler configured: a host
    where nothing executes the demo's physical proposal (set_power_limit: its plan's first physical step)."""
    with Workspace(db).write() as store:
        store.conn.execute("DELETE FROM sim_runs")


def _section(page: str, pid: str) -> str:
    start = page.index(f'id="proposal-{pid}"')
    return page[start : page.index("</section>", start)]


def test_on_the_twin_the_proposal_has_its_approve_button(demo: Path) -> None:
    pid = demo_proposal(demo)
    c = client(demo)
    sign_in(c, "alice")
    section = _section(c.get("/incidents/INC-0001").text, pid)
    assert "Approve as alice" in section and "Ticket:" not in section


def test_a_ticket_only_kind_renders_without_an_approve_button_and_cannot_be_approved(demo: Path) -> None:
    pid = demo_proposal(demo)
    _as_a_real_host(demo)
    c = client(demo)
    csrf = sign_in(c, "alice")
    page = c.get("/incidents/INC-0001").text
    section = _section(page, pid)
    assert "Ticket: no backend on this host executes set_power_limit" in section
    assert "Approve" not in section and "/approve" not in section and "<button" not in section
    assert "ticket (no executor here)" in c.get("/").text  # the incidents list says so too
    before = [(r.seq, r.event) for r in _rows(demo)]
    response = c.post(f"/proposals/{pid}/approve", data={"csrf_token": csrf})  # a forged POST
    assert response.status_code == 200 and "stands as a ticket" in response.text
    assert [(r.seq, r.event) for r in _rows(demo)] == before  # no approval recorded


def test_aiops_actions_lists_it_as_a_ticket_and_refuses_to_approve(
    demo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pid = demo_proposal(demo)
    _as_a_real_host(demo)
    assert main(["actions", "list", "--db", str(demo), "--json"]) == 0
    rows = {r["proposal_id"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[pid]["executor"] == "ticket"
    assert main(["actions", "list", "--db", str(demo)]) == 0
    assert "ticket" in capsys.readouterr().out


def _rows(db: Path) -> list[object]:
    with Workspace(db).read() as store:
        return list(read_rows(store))
