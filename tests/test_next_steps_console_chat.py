"""Issue 26 item 4 beyond `aiops investigate`: the console's incident page and the chat's explanation of an
incident carry the same one to three next steps (from the playbooks) for the analyst's top hypotheses."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.agent.analyst import Analyst
from aiops.store import Workspace
from tests.agent_fakes import tiny_demo_db
from tests.console_helpers import client, fresh_demo, make_demo, sign_in


def test_chat_explanation_lists_next_steps(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    with Workspace(db).read() as store:
        analyst = Analyst.from_store(store)
    diagnosis = analyst.get("INC-0001")
    assert diagnosis is not None and diagnosis.hypotheses
    text = analyst.explain(diagnosis).text
    assert "Next steps (checks that confirm or rule out the top hypotheses):" in text
    top = diagnosis.hypotheses[0]
    assert f"  $ nvidia-smi -q -d PERFORMANCE,TEMPERATURE -i {top.component.split('gpu')[-1]}" in text, text


def test_console_incident_page_lists_next_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    db = fresh_demo(make_demo(tmp_path / "src"), tmp_path, monkeypatch)
    c = client(db)
    sign_in(c, "alice")
    page = c.get("/incidents/INC-0001").text
    assert "<h2>Next steps</h2>" in page and 'id="next-steps"' in page
    assert '<pre class="command">' in page.split('id="next-steps"')[1].split("</ul>")[0]
