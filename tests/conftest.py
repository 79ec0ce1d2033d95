"""Shared test helpers: paths to the bundled fixtures."""

from __future__ import annotations

from pathlib import Path

import pytest

TESTS = Path(__file__).parent
ENGINE_FIXTURES = TESTS / "fixtures" / "engines"


@pytest.fixture
def engine_fixture() -> "type[_Fixtures]":
    return _Fixtures


class _Fixtures:
    @staticmethod
    def text(name: str) -> str:
        return (ENGINE_FIXTURES / name).read_text()
