"""Shared test helpers: paths to the bundled fixtures."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).parent
ENGINE_FIXTURES = TESTS / "fixtures" / "engines"


def engine_body(name: str) -> str:
    """The exact bytes of a bundled engine /metrics body, as text."""
    return (ENGINE_FIXTURES / name).read_text()
