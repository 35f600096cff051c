"""Issue 11, item 4: every completion sets `max_tokens`; a failed endpoint is named with what failed (not
"set AIOPS_LLM_BASE_URL"), and the analyst's answer and proposals stand; the limits are config keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from aiops.agent.config import AgentConfig, Limits, agent_config_of
from aiops.agent.session import open_session
from aiops.config import load_config
from aiops.errors import ConfigError
from tests.agent_fakes import final, http_error, scripted_llm, stall, tiny_demo_db, tool_call


def test_every_completion_sets_max_tokens(tmp_path: Path) -> None:
    db, _ = tiny_demo_db(tmp_path)
    script = [tool_call("incidents", {}, "a"), tool_call("incidents", {}, "b"), final("done")]
    with scripted_llm(script) as llm:
        config = AgentConfig(
            base_url=llm.base_url, model="scripted", timeout_s=5.0, completion_max_tokens=777
        )
        with open_session(db, config=config) as session:
            session.ask("what is wrong?")
    assert len(llm.requests) == 3
    # 0.8 x 5 s x 30 tokens/s = 120 fits the timeout, under completion_max_tokens (issue 23)
    assert config.request_max_tokens == 120
    assert [r["body"].get("max_tokens") for r in llm.requests] == [120, 120, 120]


@pytest.mark.parametrize(
    ("script", "shown"),
    [([stall(3.0)], "timed out after 1 s"), ([http_error(500)], "HTTP 500 from http://127.0.0.1:")],
    ids=["timeout", "http_500"],
)
def test_the_fallback_says_what_failed(tmp_path: Path, script: list[dict[str, object]], shown: str) -> None:
    db, _ = tiny_demo_db(tmp_path)
    with scripted_llm(script) as llm:
        config = AgentConfig(base_url=llm.base_url, model="scripted", timeout_s=1.0, limits=Limits())
        with open_session(db, config=config) as session:
            reply = session.ask("Tell me a story about the cluster")  # free-form: needs the model
    assert reply.source == "analyst" and len(reply.failures) == 1
    assert shown in reply.failures[0] and "(model scripted)" in reply.failures[0]
    assert "AIOPS_LLM_BASE_URL" not in reply.answer and "AIOPS_LLM_BASE_URL" not in reply.failures[0]
    assert "free-form question" in reply.answer and "Top hypothesis" in reply.answer


def test_limits_are_config_keys(tmp_path: Path) -> None:
    path = tmp_path / "aiops.toml"
    path.write_text(
        "[llm]\ncompletion_max_tokens = 512\nverify_max_claims = 4\nverify_budget_s = 3.5\n"
        "sql_max_bytes = 8192\nrecord_max_bytes = 16384\n",
        encoding="utf-8",
    )
    config = agent_config_of(load_config(path, {}), {})
    assert config.completion_max_tokens == 512
    limits = config.limits
    assert (limits.verify_max_claims, limits.verify_budget_s) == (4, 3.5)
    assert (limits.sql_max_bytes, limits.record_max_bytes) == (8192, 16384)
    empty = tmp_path / "empty.toml"
    empty.write_text("", encoding="utf-8")
    defaults = agent_config_of(load_config(empty, {}), {})
    assert defaults.completion_max_tokens == 2048 and defaults.limits.verify_max_claims == 12
    path.write_text("[llm]\ncompletion_max_tokens = 0\n", encoding="utf-8")
    with pytest.raises(ConfigError, match="completion_max_tokens"):
        agent_config_of(load_config(path, {}), {})
