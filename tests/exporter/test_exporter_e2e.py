"""End to end: fake engines serving real bodies, the exporter running, its /metrics read over HTTP.

Expected values are read by hand from the fixture bodies:
- vllm-0.32.0-cpu-load.prom: num_requests_running 16, waiting 0, kv_cache_usage_perc 0.0440771349862259,
  cache_config_info kv_cache_size_tokens="46592", prompt_tokens_total 179, generation_tokens_total 97,
  time_to_first_token_seconds count 16, sum 5.477985382080078, le=0.25 -> 1, le=0.5 -> 16.
- llamacpp-b11434-load.prom: requests_processing 4, requests_deferred 12, prompt_tokens_total 20.
- composed-vllm-dp2.prom: running 48 + 51, waiting 3 + 6, num_gpu_blocks 26948 x 16 tokens (vLLM writes the
  sum over its DP engines under each engine label),
  KV use 0.6134 and 0.6672 at equal capacity, prompt tokens 2.657995e7 + 2.638275e7.
"""

from __future__ import annotations

import gzip
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import engine_body
from fakeengine import FakeEngine
from prometheus_client.parser import text_string_to_metric_families

from keda_llm.exporter.cli import build_collector
from keda_llm.exporter.config import parse_config
from keda_llm.exporter.server import create_server
from keda_llm.scaler.sources.clocks import date_seconds

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def parse(text: str) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value for f in text_string_to_metric_families(text)
            for s in f.samples}


def get(url: str, headers: dict[str, str] | None = None) -> tuple[int, dict[str, str], bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, dict(resp.headers.items()), resp.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers.items()), e.read()


def labels(pod: str, model: str, engine: str, **extra: str) -> frozenset[tuple[str, str]]:
    return frozenset({"model": model, "engine": engine, "role": "unified", "namespace": "llm", "pod": pod,
                      "node": "node-e2e", **extra}.items())


@pytest.fixture
def engines() -> Iterator[dict[str, FakeEngine]]:
    es = {
        "vllm": FakeEngine(engine_body("vllm-0.32.0-cpu-load.prom")),
        "llama": FakeEngine(engine_body("llamacpp-b11434-load.prom")),
        "dp2": FakeEngine(engine_body("composed-vllm-dp2.prom")),
    }
    yield es
    for e in es.values():
        e.stop()


def test_exporter_serves_the_normalized_values(engines: dict[str, FakeEngine]) -> None:
    cfg = parse_config({"listen": "127.0.0.1:0", "interval": "2s", "timeout": "2s", "node_name": "node-e2e",
                        "gpu": {"nvml": False}, "targets": [
                            {"url": engines["vllm"].url, "namespace": "llm", "pod": "vllm-0", "max_running": 256},
                            {"url": engines["llama"].url, "namespace": "llm", "pod": "llama-0",
                             "model": "SmolLM2-135M-GGUF"},
                            {"url": engines["dp2"].url, "namespace": "llm", "pod": "dp2-0"},
                        ]}, env={})
    collector = build_collector(cfg)
    server, port = create_server(cfg.listen_address, collector)
    server.start()
    base = f"http://127.0.0.1:{port}"
    try:
        assert get(f"{base}/healthz")[0] == 503  # no cycle yet
        collector.start()
        deadline = time.monotonic() + 10
        while get(f"{base}/healthz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.02)
        status, headers, body = get(f"{base}/metrics")
        gz_status, gz_headers, gz_body = get(f"{base}/metrics", {"Accept-Encoding": "gzip"})
        assert get(f"{base}/nope")[0] == 404
    finally:
        server.stop()
        collector.stop()

    assert status == 200
    assert headers["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    # the scaler reads a node's clock offset from it (scaler/sources/clocks.py)
    assert date_seconds(headers["Date"]) == pytest.approx(time.time(), abs=30)
    assert gz_status == 200 and gz_headers["Content-Encoding"] == "gzip"
    assert parse(gzip.decompress(gz_body).decode()).keys() == parse(body.decode()).keys()
    s = parse(body.decode())

    v = labels("vllm-0", "smollm2", "vllm")
    assert s[("llm_engine_up", v)] == 1
    assert s[("llm_requests_running", v)] == 16
    assert s[("llm_requests_waiting", v)] == 0
    assert s[("llm_requests_max_running", v)] == 256  # from config: vLLM does not export max_num_seqs
    assert s[("llm_kv_cache_usage_ratio", v)] == 0.0440771349862259
    assert s[("llm_kv_cache_capacity_tokens", v)] == 46592
    assert s[("llm_prompt_tokens_total", v)] == 179
    assert s[("llm_generation_tokens_total", v)] == 97
    assert s[("llm_time_to_first_token_seconds_count", v)] == 16
    assert s[("llm_time_to_first_token_seconds_sum", v)] == 5.477985382080078
    assert s[("llm_time_to_first_token_seconds_bucket", v | {("le", "0.25")})] == 1
    assert s[("llm_time_to_first_token_seconds_bucket", v | {("le", "0.5")})] == 16
    assert s[("llm_engine_info", v | {("version", "")})] == 1

    ll = labels("llama-0", "SmolLM2-135M-GGUF", "llamacpp")
    assert (s[("llm_requests_running", ll)], s[("llm_requests_waiting", ll)]) == (4, 12)
    assert s[("llm_prompt_tokens_total", ll)] == 20
    assert ("llm_kv_cache_usage_ratio", ll) not in s  # llama.cpp dropped its KV metrics: no made-up 0

    dp = labels("dp2-0", "meta-llama/Llama-3.1-8B-Instruct", "vllm")
    assert (s[("llm_requests_running", dp)], s[("llm_requests_waiting", dp)]) == (99, 9)
    assert s[("llm_kv_cache_capacity_tokens", dp)] == 26948 * 16  # num_gpu_blocks: the sum over the DP engines
    assert s[("llm_kv_cache_usage_ratio", dp)] == pytest.approx((0.6134 + 0.6672) / 2, rel=1e-12)
    assert s[("llm_prompt_tokens_total", dp)] == 2.657995e7 + 2.638275e7

    for pod in ("vllm-0", "llama-0", "dp2-0"):
        assert sum(v for k, v in s.items() if k[0] == "llm_exporter_scrape_errors_total"
                   and dict(k[1])["pod"] == pod) == 0


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-c", "import sys; from keda_llm.cli import main; sys.exit(main())", "exporter", *args]


def test_cli_once_prints_one_cycle(engines: dict[str, FakeEngine]) -> None:
    out = subprocess.run(_cli("--target", engines["vllm"].url, "--no-nvml", "--node-name", "n1", "--once"),
                         capture_output=True, text=True, timeout=60, env={**os.environ, "NODE_NAME": ""})
    assert out.returncode == 0, out.stderr
    s = parse(out.stdout)
    port = engines["vllm"].port
    key = frozenset({"model": "smollm2", "engine": "vllm", "role": "unified", "namespace": "",
                     "pod": f"127.0.0.1:{port}", "node": "n1"}.items())
    assert s[("llm_requests_running", key)] == 16


def test_cli_once_fails_when_a_target_fails(engines: dict[str, FakeEngine]) -> None:
    engines["vllm"].mode = "status"
    out = subprocess.run(_cli("--target", engines["vllm"].url, "--no-nvml", "--once"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1
    assert "llm_engine_up{" in out.stdout
    assert "HTTP 500" in out.stderr


def test_cli_bad_config_exits_2_naming_the_key(tmp_path: Path) -> None:
    path = tmp_path / "exporter.yaml"
    path.write_text("interval: fast\n")
    out = subprocess.run(_cli("--config", str(path), "--once"), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "interval: 'fast'" in out.stderr
    assert out.stderr.count("\n") == 1 and "; hint: " in out.stderr and "docs/exporter-config.md" in out.stderr


def test_cli_a_port_in_use_is_one_line_with_a_hint(tmp_path: Path) -> None:
    import socket

    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        out = subprocess.run(_cli("--listen", f"127.0.0.1:{port}", "--no-nvml"), capture_output=True, text=True,
                             timeout=60)
    assert out.returncode == 2
    last = out.stderr.strip().splitlines()[-1]  # a warning (no targets) may come first, never a traceback
    assert "Traceback" not in out.stderr
    assert last.startswith(f"keda-llm exporter: cannot listen on 127.0.0.1:{port}: ") and "hint: " in last


def test_cli_serves_until_sigterm(engines: dict[str, FakeEngine], tmp_path: Path) -> None:
    path = tmp_path / "exporter.yaml"
    path.write_text(f"listen: 127.0.0.1:0\ninterval: 1s\ngpu:\n  nvml: false\ntargets:\n"
                    f"  - url: {engines['llama'].url}\n    model: smol\n")
    proc = subprocess.Popen(_cli("--config", str(path)), stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        line = ""
        for line in proc.stderr:  # the log line names the bound port
            if "serving http://" in line:
                break
        port = int(line.split("serving http://127.0.0.1:")[1].split("/")[0])
        deadline = time.monotonic() + 10
        while get(f"http://127.0.0.1:{port}/healthz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        s = parse(get(f"http://127.0.0.1:{port}/metrics")[2].decode())
        assert [v for k, v in s.items() if k[0] == "llm_requests_waiting"] == [12]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_the_moment_it_serves_always_stops_it(sig: signal.Signals) -> None:
    """The signal sent the moment the log says it serves, as Kubernetes may and as a test did: the main thread
    is then entering its wait. A handler that set a threading.Event there deadlocked on the Event's lock
    when it landed inside wait() (seen once in CI, under load: past its 60 s); sigwait() has no lock to take."""
    for _ in range(8):
        proc = subprocess.Popen(_cli("--listen", "127.0.0.1:0", "--no-nvml", "--target", "http://127.0.0.1:9/metrics"),
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stderr is not None
            for line in proc.stderr:
                if "serving http://" in line:
                    break
            proc.send_signal(sig)
            assert proc.wait(timeout=10) == 0
            rest = proc.stderr.read()
            assert f"stopping ({sig.name})" in rest and "Traceback" not in rest, rest
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def test_metrics_handler_sends_without_nagle_delay() -> None:
    # Headers and body are two writes: with Nagle on, every scrape on a kept-alive connection (Prometheus
    # reuses them) waited ~40 ms for the peer's delayed ACK. The handler must turn Nagle off.
    from keda_llm.exporter.server import _Handler

    assert _Handler.disable_nagle_algorithm is True
    assert _Handler.protocol_version == "HTTP/1.1"
