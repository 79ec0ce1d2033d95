"""Exporter config: defaults, a full file, and errors that name the key and the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from keda_llm.exporter.config import (
    ConfigError,
    ExporterConfig,
    GpuConfig,
    KubernetesConfig,
    load_config,
    parse_config,
    parse_duration,
    parse_size,
    with_overrides,
)
from keda_llm.exporter.model import Target

FULL = """
listen: 127.0.0.1:9500
interval: 10s
timeout: 1500ms
max_body_bytes: 4MiB
node_name: gpu-node-7
targets:
  - url: http://10.0.0.5:8000/metrics
    model: meta-llama/Llama-3.1-8B-Instruct
    namespace: llm
    pod: llama-0
    engine: vllm
    role: decode
    max_running: 256
  - http://10.0.0.6:8080/metrics
kubernetes:
  enabled: true
  refresh_interval: 1m
  api_server: https://10.96.0.1:443
  token_file: /tmp/token
  ca_file: /tmp/ca.crt
gpu:
  nvml: false
  pod_resources_socket: ""
"""


def test_defaults_are_the_documented_ones() -> None:
    cfg = parse_config({}, env={})
    assert cfg == ExporterConfig()
    assert cfg.listen_address == ("", 9400)
    assert (cfg.interval, cfg.timeout, cfg.max_body_bytes) == (5.0, 2.0, 8 * 1024 * 1024)
    assert cfg.kubernetes == KubernetesConfig(
        enabled=False, refresh_interval=15.0, api_server="",
        token_file="/var/run/secrets/kubernetes.io/serviceaccount/token",
        ca_file="/var/run/secrets/kubernetes.io/serviceaccount/ca.crt")
    assert cfg.gpu == GpuConfig(nvml=True, pod_resources_socket="/var/lib/kubelet/pod-resources/kubelet.sock")
    assert parse_config(None, env={}) == ExporterConfig()  # an empty YAML file


def test_full_file(tmp_path: Path) -> None:
    path = tmp_path / "exporter.yaml"
    path.write_text(FULL)
    cfg = load_config(path, env={"NODE_NAME": "ignored-when-the-file-names-one"})
    assert cfg.listen_address == ("127.0.0.1", 9500)
    assert (cfg.interval, cfg.timeout, cfg.max_body_bytes, cfg.node_name) == (10.0, 1.5, 4 * 1024**2, "gpu-node-7")
    assert cfg.targets == (
        Target(url="http://10.0.0.5:8000/metrics", namespace="llm", pod="llama-0", node="gpu-node-7",
               model="meta-llama/Llama-3.1-8B-Instruct", engine="vllm", role="decode", max_running=256.0),
        # a bare URL; pod defaults to host:port so two static targets never share a series
        Target(url="http://10.0.0.6:8080/metrics", pod="10.0.0.6:8080", node="gpu-node-7"),
    )
    assert cfg.kubernetes == KubernetesConfig(True, 60.0, "https://10.96.0.1:443", "/tmp/token", "/tmp/ca.crt")
    assert cfg.gpu == GpuConfig(nvml=False, pod_resources_socket="")


def test_default_timeout_fits_a_short_interval() -> None:
    assert parse_config({"interval": "1s"}, env={}).timeout == 1.0
    assert parse_config({"interval": "1s", "timeout": "300ms"}, env={}).timeout == 0.3


def test_node_name_comes_from_the_downward_api_env() -> None:
    cfg = parse_config({"targets": ["http://a:1/metrics"]}, env={"NODE_NAME": "node-from-env"})
    assert cfg.node_name == "node-from-env"
    assert cfg.targets[0].node == "node-from-env"


@pytest.mark.parametrize(("data", "key", "value"), [
    ({"interval": "5 parsecs"}, "interval", "5 parsecs"),
    ({"interval": 0}, "interval", 0),
    ({"interval": -1}, "interval", -1),
    ({"interval": True}, "interval", True),
    ({"interval": "1ns"}, "interval", "1ns"),  # a loop that never sleeps: the floor is 100ms
    ({"interval": 0.05}, "interval", 0.05),
    ({"kubernetes": {"refresh_interval": "1us"}}, "kubernetes.refresh_interval", "1us"),
    ({"timeout": "10s"}, "timeout", "10s"),  # longer than the 5 s interval
    ({"listen": "9400"}, "listen", "9400"),
    ({"listen": ":http"}, "listen", ":http"),
    ({"listen": ":70000"}, "listen", ":70000"),
    ({"max_body_bytes": "lots"}, "max_body_bytes", "lots"),
    ({"max_body_bytes": 10}, "max_body_bytes", 10),
    ({"intervall": "5s"}, "intervall", "5s"),
    ({"targets": "http://a/metrics"}, "targets", "http://a/metrics"),
    ({"targets": [{"model": "m"}]}, "targets[0].url", None),
    ({"targets": [{"url": "ftp://a/metrics"}]}, "targets[0].url", "ftp://a/metrics"),
    ({"targets": [{"url": "http://a/m", "engine": "ollama"}]}, "targets[0].engine", "ollama"),
    ({"targets": [{"url": "http://a/m", "role": "both"}]}, "targets[0].role", "both"),
    ({"targets": [{"url": "http://a/m", "max_running": 0}]}, "targets[0].max_running", 0),
    ({"targets": [{"url": "http://a/m", "modle": "x"}]}, "targets[0].modle", "x"),
    ({"targets": ["http://a/m", "http://b/m", "http://a/m"]}, "targets[2].url", "http://a/m"),
    ({"kubernetes": {"enabled": "yes"}}, "kubernetes.enabled", "yes"),
    ({"kubernetes": {"enabled": True}}, "node_name", ""),  # discovery needs the node
    ({"kubernetes": {"refresh": "1m"}}, "kubernetes.refresh", "1m"),
    ({"kubernetes": []}, "kubernetes", []),
    ({"gpu": {"nvml": 1}}, "gpu.nvml", 1),
])
def test_errors_name_the_key_and_the_value(data: dict[str, object], key: str, value: object) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(data, env={})
    assert (err.value.key, err.value.value) == (key, value)
    assert str(err.value).startswith(f"exporter config: {key}: {value!r}: ")


@pytest.mark.parametrize(("text", "seconds"), [
    ("5s", 5.0), ("500ms", 0.5), ("2m", 120.0), ("1h", 3600.0), ("1.5", 1.5), (3, 3.0), (0.25, 0.25),
    ("1m30s", 90.0), (" 2h15m ", 8100.0),
])
def test_durations(text: str | float, seconds: float) -> None:
    assert parse_duration(text, "k") == seconds


@pytest.mark.parametrize(("text", "size"), [
    (2048, 2048), ("8MiB", 8 * 1024 * 1024), ("1MB", 1_000_000), ("4096", 4096), ("2 KiB", 2048),
])
def test_sizes(text: str | int, size: int) -> None:
    assert parse_size(text, "k") == size


def test_unreadable_and_invalid_files_are_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"--config: '.*missing.yaml': cannot read"):
        load_config(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("listen: [unclosed\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(bad)


def test_overrides_recheck_the_rules() -> None:
    cfg = parse_config({}, env={})
    assert with_overrides(cfg, interval=1.0, timeout=0.5).interval == 1.0
    with pytest.raises(ConfigError, match="timeout"):
        with_overrides(cfg, interval=1.0)  # the 2 s default timeout no longer fits


def test_the_node_name_flag_stands_for_the_files_node_name(tmp_path: Path) -> None:
    """`--node-name n --config file` with Kubernetes discovery on exited with "needs this node's name": the file
    was checked before the flag applied."""
    import argparse

    from keda_llm.exporter import cli as exporter_cli

    path = tmp_path / "k.yaml"
    path.write_text("kubernetes:\n  enabled: true\n  api_server: https://127.0.0.1:6443\n")
    parser = argparse.ArgumentParser()
    exporter_cli.add_arguments(parser)
    cfg = exporter_cli.build_config(parser.parse_args(["--config", str(path), "--node-name", "gpu-7"]), {})
    assert cfg.node_name == "gpu-7" and cfg.kubernetes.enabled
