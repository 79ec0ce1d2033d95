"""The activator's config: YAML and flags, Go durations, one error line naming the key."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from keda_llm.activator.config import ConfigError, parse, with_flags

GOOD: dict[str, Any] = {"models": [{"name": "llama", "namespace": "llm", "scaled_object": "llama",
                                    "service": "llama", "max_wait": "90s"}]}


def test_a_full_config_parses_with_go_durations() -> None:
    cfg = parse({**GOOD, "max_held": 50, "activation_interval": "1m30s", "max_body_bytes": "2MiB",
                 "priority_classes": ["premium"], "routing": {"kv_saturation": 0.9, "max_outstanding": 64}})
    m = cfg.models[0]
    assert (m.max_wait, m.max_held, cfg.activation_interval, cfg.max_body_bytes) == (90, 50, 90, 2 * 1024**2)
    assert cfg.routing.kv_saturation == 0.9 and cfg.routing.max_outstanding == 64


@pytest.mark.parametrize(("raw", "key"), [
    ({**GOOD, "max_wait": "5 minutes"}, "max_wait"),
    ({**GOOD, "max_wait": "9" * 400}, "max_wait"),
    ({**GOOD, "activation_interval": "-1s"}, "activation_interval"),
    ({**GOOD, "probe_interval": "1ns"}, "probe_interval"),  # a loop that never sleeps: the floor is 100ms
    ({**GOOD, "exporters_interval": "99ms"}, "exporters_interval"),
    ({**GOOD, "activation_interval": "50ms"}, "activation_interval"),
    ({**GOOD, "max_held": "lots"}, "max_held"),
    ({**GOOD, "routing": {"kv_saturation": 1.5}}, "routing.kv_saturation"),
    ({**GOOD, "routing": {"weight": 1}}, "routing.weight"),
    ({**GOOD, "scaler": "ftp://x"}, "scaler"),
    ({**GOOD, "listen": "8080"}, "listen"),
    ({**GOOD, "max_body_bytes": "1TiB"}, "max_body_bytes"),
    ({**GOOD, "default_model": "nope"}, "default_model"),
    ({"models": [{"name": "a", "endpoints": ["http://x:1"], "max_wait": "soon"}]}, "models[0].max_wait"),
    ({"models": [{"name": "a"}]}, "models[0].endpoints"),
    ({"models": [{"name": "a", "service": "s"}]}, "models[0].namespace"),
    ({"models": [{"name": "a", "endpoints": ["http://x:1"]}, {"name": "a", "endpoints": ["http://y:1"]}]},
     "models[1].name"),
    ({"models": [{"name": "a", "endpoints": [{"url": "http://x:99999"}]}]}, "models[0].endpoints"),
    ({}, "models"),
    ({**GOOD, "colour": "red"}, "colour"),
])
def test_every_bad_value_is_one_error_naming_its_key(raw: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse(raw)
    assert err.value.key == key
    assert "\n" not in str(err.value) and str(err.value).startswith(key + ": ")


def test_flags_make_a_single_model_and_override_the_file() -> None:
    cfg = with_flags(None, {"model": "m", "upstream": ["http://10.0.0.1:8000"], "scaled_object": "llm/m",
                            "max_wait": "2m", "listen": ":9000"})
    assert cfg.models[0].max_wait == 120 and cfg.models[0].scaled_object == "m" and cfg.listen == ":9000"
    with pytest.raises(ConfigError, match=r"^--max-wait: "):
        with_flags(None, {"model": "m", "upstream": ["http://x:1"], "max_wait": "later"})


def test_the_command_exits_2_with_one_line_naming_the_key(tmp_path: Path) -> None:
    f = tmp_path / "a.yaml"
    f.write_text("models:\n  - name: m\n    endpoints: [http://127.0.0.1:9]\n    max_wait: forever\n")
    proc = subprocess.run([sys.executable, "-m", "keda_llm.cli", "activator", "--config", str(f)],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]
    assert "models[0].max_wait: " in proc.stderr
    assert "; hint: " in proc.stderr and "docs/activator.md" in proc.stderr
