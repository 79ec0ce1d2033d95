"""The activator's config parser, fuzzed (seeded): any parsed YAML gives a config or a ConfigError, never another
exception (the CLI prints a ConfigError as one line)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
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


def test_files_that_are_not_text_and_a_bad_log_level_are_one_line(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Found by a review: each was a traceback (UnicodeDecodeError, logging's ValueError)."""
    from keda_llm.activator.config import load, read_token
    from keda_llm.cli import main

    binary = tmp_path / "bin"
    binary.write_bytes(b"\xff\xfe\x00")
    for call in (lambda: load(str(binary)), lambda: read_token(str(binary), "activation_token_file")):
        try:
            call()
        except ConfigError as err:
            assert "UTF-8" in str(err)
        else:
            raise AssertionError("a binary file was read")
    config = tmp_path / "a.yaml"
    config.write_text("models:\n  - name: m\n    endpoints: [http://127.0.0.1:1]\n")
    assert main(["activator", "--config", str(config), "--log-level", "FOO"]) == 2
    assert main(["activator", "--config", str(config), "--admin-listen", ":²"]) == 2
    assert main(["activator", "--config", str(config), "--listen", "192.0.2.1:8080",
                 "--admin-listen", "127.0.0.1:0"]) == 2  # not this machine's address: one line, exit 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("keda-llm activator: ") and "; hint: " in line for line in lines)
    assert "[v6]:port" in lines[1]  # a syntax error: how to write it
    assert "--listen (the proxy) and --admin-listen" in lines[-1]  # a bind failure: which flags move it
    assert main(["activator", "--config", str(config), "--listen", "[::1]"]) == 2
    assert "hint: write host:port" in capsys.readouterr().err
