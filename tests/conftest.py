"""Shared fixtures: an isolated in-memory store per test and a clean environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aiops.store import Store


@pytest.fixture
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """An in-memory store; in a test that uses real keys (`signing`, `shared_signing`), opened under their
    `[guardrails]`, as a command passes its config down to the workspace it opens."""
    keys = next(
        (request.getfixturevalue(n) for n in ("signing", "shared_signing") if n in request.fixturenames), None
    )
    s = Store(":memory:", guardrails=None if keys is None else keys.guardrails)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(autouse=True)
def _clean_llm_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may reach an outside LLM endpoint by inheriting the developer's environment."""
    for name in ("AIOPS_LLM_BASE_URL", "AIOPS_LLM_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(name, raising=False)


from tests.signing_helpers import shared_signing, signing  # noqa: E402,F401  (fixtures: real SSH keys)
