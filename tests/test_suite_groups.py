"""The suite's xdist groups (tests/conftest.py `_shared_fixture_group`): a test using a fixture built once for
several tests runs on the worker that built it, so that `make test`'s five workers do not build it five times."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import _shared_fixture_group


@pytest.fixture(scope="session")
def built_once_for_the_run() -> Iterator[str]:
    yield "session"


@pytest.fixture(scope="module")
def built_once_for_the_module() -> Iterator[str]:
    yield "module"


def test_a_session_fixture_of_the_suite_groups_its_tests_by_the_fixture(
    request: pytest.FixtureRequest, built_once_for_the_run: str
) -> None:
    assert _shared_fixture_group(request.node) == "fixture-built_once_for_the_run"


def test_a_module_fixture_groups_its_tests_by_module(
    request: pytest.FixtureRequest, built_once_for_the_module: str
) -> None:
    assert _shared_fixture_group(request.node) == "tests/test_suite_groups.py"


def test_pytests_own_session_fixtures_group_nothing(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    assert _shared_fixture_group(request.node) is None
