"""The activator's config parser, fuzzed (seeded): any parsed YAML gives a config or a ConfigError, never another
exception (the CLI prints a ConfigError as one line)."""

from __future__ import annotations

import random

from fuzzing import ODD_VALUES, mutate_tree

from keda_llm.activator.config import ActivatorConfig, ConfigError, parse

BASE = {"listen": ":8080", "scaler": "http://keda-llm-scaler.keda-llm:8080", "max_body_bytes": "1MiB",
        "body_timeout": "30s", "priority_classes": ["interactive", "batch"], "routing": {},
        "models": [{"name": "m", "endpoints": ["http://127.0.0.1:1", {"url": "http://127.0.0.1:2", "pod": "p"}],
                    "max_held": 10, "max_wait": "60s", "aliases": ["x"], "path_prefix": "/m"}]}


def test_any_config_gives_a_config_or_a_config_error() -> None:
    assert isinstance(parse(BASE), ActivatorConfig)
    rng = random.Random(20261130)
    parsed = refused = 0
    for _ in range(10_000):
        tree = mutate_tree(rng, BASE, ("zz", "models", "routing")) if rng.random() > 0.02 else rng.choice(ODD_VALUES)
        try:
            parse(tree)
            parsed += 1
        except ConfigError:
            refused += 1
    assert parsed > 500 and refused > 5000
