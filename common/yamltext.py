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


#: The widest integer a document may hold: past any float (1024 bits). YAML's hexadecimal `0xfff...` has no
#: digit limit, and Python cannot even print an integer past 4,300 decimal digits, so an error naming one failed.
MAX_INT_BITS = 1100


def _check(node: Any, at: str) -> None:
    if isinstance(node, int) and not isinstance(node, bool) and node.bit_length() > MAX_INT_BITS:
        raise YAMLTextError(f"{at or 'the document'}: an integer of {node.bit_length()} bits, past any number a "
                            "setting takes")
    if isinstance(node, dict):
        for key, value in node.items():
            _check(key, at)
            _check(value, f"{at}.{key}" if at else str(key)[:80])
    elif isinstance(node, list):
        for i, value in enumerate(node):
            _check(value, f"{at}[{i}]")


def load(text: str | bytes) -> Any:
    """One YAML document (None when empty)."""
    try:
        doc = yaml.safe_load(text)
        _check(doc, "")
    except (yaml.YAMLError, ValueError, RecursionError) as err:
        if isinstance(err, YAMLTextError):
            raise
        raise YAMLTextError(_why(err)) from None
    return doc


def load_all(text: str | bytes) -> list[Any]:
    """Every document of a multi-document YAML text, empty ones left out."""
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]
        for d in docs:
            _check(d, "")
    except (yaml.YAMLError, ValueError, RecursionError) as err:
        if isinstance(err, YAMLTextError):
            raise
        raise YAMLTextError(_why(err)) from None
    return docs
