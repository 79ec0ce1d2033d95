"""Seeded mutation for fuzzing: parsed-YAML trees for the config parsers (`mutate_tree`), text for the file
readers (`mutate_text`)."""

from __future__ import annotations

import random
from typing import Any

#: Values a mutation puts in place of a key's: wrong types, edge numbers, absurd durations, bad URLs.
ODD_VALUES: list[Any] = [
    None, True, False, 0, -1, 1, 1.5, float("nan"), float("inf"), -float("inf"), 10**30, "", "x", "-1s", "1e308s",
    "99999999h", "0s", "nan", ":0", ":99999", "[::1]:80", "http://", "://x", "/", [], {}, [None], {"a": None},
    "a" * 5000, "\x00", "1KiB", "1e3", "http://[::1", "http://h:99999", "http://h:port", 10**400, -(10**400),
    int("f" * 4000, 16),  # YAML's hexadecimal has no digit limit: past 4,300 decimal digits Python cannot print it
]


def mutate_tree(rng: random.Random, tree: Any, extra_keys: tuple[str, ...] = ("zz",)) -> Any:
    """A copy of `tree` with some keys dropped, some values replaced by ODD_VALUES, some unknown keys added."""
    if isinstance(tree, dict):
        out = dict(tree)
        r = rng.random()
        if out and r < 0.2:
            del out[rng.choice(list(out))]
        elif out and r < 0.5:
            out[rng.choice(list(out))] = rng.choice(ODD_VALUES)
        elif r < 0.55:
            out[rng.choice(extra_keys)] = rng.choice(ODD_VALUES)
        return {k: (mutate_tree(rng, v, extra_keys) if rng.random() < 0.4 else v) for k, v in out.items()}
    if isinstance(tree, list):
        items = list(tree)
        if items and rng.random() < 0.3:
            items[rng.randrange(len(items))] = rng.choice(ODD_VALUES)
        if rng.random() < 0.2:
            items.append(rng.choice(ODD_VALUES))
        return [mutate_tree(rng, x, extra_keys) if rng.random() < 0.4 else x for x in items]
    return rng.choice(ODD_VALUES) if rng.random() < 0.3 else tree


#: What a text mutation inserts or puts in place of a character: syntax, numbers at their edges, odd bytes.
TEXT_PIECES = [*",\n\r\"'{}[]:.-+eE0123456789 \t#\x00\ufeffabcxyz", "NaN", "Inf", "\u00e9", "1e999", "9" * 400, "null",
               "true", "[" * 3000, "-0", "2026-13-45T99:99:99Z", "1" * 30, "2023-11-16 18:17:03.9799600", "+00:00",
               "9999-12-31 23:59:59"]


def mutate_text(rng: random.Random, text: str) -> str:
    """`text` with one to six characters inserted, deleted or replaced by TEXT_PIECES."""
    chars = list(text)
    for _ in range(rng.randint(1, 6)):
        i = rng.randrange(len(chars) + 1)
        op = rng.random()
        if op < 0.4 or not chars:
            chars.insert(i, rng.choice(TEXT_PIECES))
        elif op < 0.7:
            del chars[min(i, len(chars) - 1)]
        else:
            chars[min(i, len(chars) - 1)] = rng.choice(TEXT_PIECES)
    return "".join(chars)
