"""The exporter's config parser, fuzzed (seeded): any parsed YAML gives a config or a ConfigError, never another
exception (the CLI prints a ConfigError as one line). It found a target URL with an unclosed IPv6 bracket
(`http://[::1`), which escaped as urllib's ValueError."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from fuzzing import ODD_VALUES, mutate_tree

from keda_llm.exporter.config import ConfigError, ExporterConfig, parse_config

BASE = {"listen": ":9400", "interval": "5s", "timeout": "2s", "max_body_bytes": "8MiB", "node_name": "n1",
        "targets": [{"url": "http://127.0.0.1:8000/metrics", "namespace": "llm", "pod": "p"},
                    "http://[::1]:8001/metrics"],
        "gpu": {}, "warm": {"directories": ["/models"], "token_file": "/var/run/token"}}


def test_any_config_gives_a_config_or_a_config_error() -> None:
    assert isinstance(parse_config(BASE, env={}), ExporterConfig)
    rng = random.Random(20261130)
    parsed = refused = 0
    for _ in range(10_000):
        tree = mutate_tree(rng, BASE, ("zz", "Listen", "targets")) if rng.random() > 0.02 else rng.choice(ODD_VALUES)
        try:
            parse_config(tree, env={})
            parsed += 1
        except ConfigError:
            refused += 1
    assert parsed > 500 and refused > 5000


@pytest.mark.parametrize("url", ["http://[::1", "http://h:99999/metrics", "http://h:port/metrics"])
def test_a_target_url_that_does_not_parse_is_a_config_error(url: str) -> None:
    with pytest.raises(ConfigError, match="targets"):
        parse_config({**BASE, "targets": [url]}, env={})


@pytest.mark.parametrize(("key", "value", "says"), [
    ("interval", 1.0e308, "Go's limit"),  # a YAML number: it passed, and the collection loop died on its timer
    ("listen", ":²", "the port must be a number"),
    ("listen", ":" + "9" * 5000, "the port must be a number"),
])
def test_what_a_review_found_is_a_config_error(key: str, value: object, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        parse_config({**BASE, key: value}, env={})
    with pytest.raises(ConfigError, match="Go's limit"):
        parse_config({**BASE, "kubernetes": {"refresh_interval": 1.0e308}}, env={})


def test_a_config_file_that_is_not_utf8_is_a_config_error(tmp_path: Path) -> None:
    from keda_llm.exporter.config import load_config

    path = tmp_path / "bin.yaml"
    path.write_bytes(b"\xff\xfe listen")
    with pytest.raises(ConfigError, match="not UTF-8"):
        load_config(path)
