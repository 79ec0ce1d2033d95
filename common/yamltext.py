"""YAML text to Python, where every way it can fail is one ValueError: the one reading of a user's YAML.

PyYAML's `safe_load` raises more than `YAMLError`: a timestamp that is not a date (`2024-13-45`) is a
plain ValueError from `datetime`, and deep nesting (`[[[[...`) a RecursionError. Config files, preset
files and ScaledObjects are user input; each caller wraps the one error with its key or file.
"""

from __future__ import annotations

from collections.abc import Callable
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


def _parse(read: Callable[[], list[Any]]) -> list[Any]:
    """The documents `read` returns, each checked; every failure one YAMLTextError."""
    try:
        docs = read()
        for d in docs:
            _check(d, "")
    except YAMLTextError:
        raise
    except (yaml.YAMLError, ValueError, RecursionError) as err:
        raise YAMLTextError(_why(err)) from None
    return docs


def load(text: str | bytes) -> Any:
    """One YAML document (None when empty)."""
    return _parse(lambda: [yaml.safe_load(text)])[0]


def load_all(text: str | bytes) -> list[Any]:
    """Every document of a multi-document YAML text, empty ones left out."""
    return [d for d in _parse(lambda: list(yaml.safe_load_all(text))) if d is not None]


def show(value: object, width: int) -> str:
    """A value read from YAML as an error shows it: its repr cut to `width` characters; an integer too wide
    to print (Python refuses past 4,300 digits), or a container holding one, by its size."""
    if isinstance(value, int) and value.bit_length() > 1000:
        return f"an integer of {value.bit_length()} bits"
    try:
        text = repr(value)
    except ValueError:
        return f"a {type(value).__name__} too large to show"
    return text if len(text) <= width else text[:width] + "..."
