"""Shared fixtures: an isolated in-memory store per test and a clean environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from aiops.store import Store


@pytest.fixture
def store() -> Iterator[Store]:
    s = Store(":memory:")
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
