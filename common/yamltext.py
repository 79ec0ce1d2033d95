"""YAML text to Python, where every way it can fail is one ValueError: the one reading of a user's YAML.

PyYAML's `safe_load` raises more than `YAMLError`: a timestamp that is not a date (`2024-13-45`) is a
plain ValueError from `datetime`, and deep nesting (`[[[[...`) a RecursionError. Config files, preset
files and ScaledObjects are user input; each caller wraps the one error with its key or file.
"""

from __future__ import annotations

from typing import Any

import yaml


class YAMLTextError(ValueError):
    """The text is not YAML this reads; the message is one line."""


def _why(err: BaseException) -> str:
    if isinstance(err, RecursionError):
        return "nested too deeply"
    mark = getattr(err, "problem_mark", None)
    problem = getattr(err, "problem", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    return " ".join(str(err).split())[:200]


def load(text: str | bytes) -> Any:
    """One YAML document (None when empty)."""
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError, RecursionError) as err:
        raise YAMLTextError(_why(err)) from None


def load_all(text: str | bytes) -> list[Any]:
    """Every document of a multi-document YAML text, empty ones left out."""
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except (yaml.YAMLError, ValueError, RecursionError) as err:
        raise YAMLTextError(_why(err)) from None
