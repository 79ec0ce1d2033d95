"""Opt-in: the exporter against real vLLM (CPU build) and real llama.cpp serving a real model.

    pytest -m real_engine -s        (engines set up by tests/real_engines/setup-*.sh)

Each engine is scraped THROUGH a recording proxy, so every number the exporter exports is checked
against the exact body it read (by a grep written here, not by our parser), and the token counters
are checked against the engines' own per-request `usage` answers. Selected without the engines set
up, the test fails: the marker is opt-in, so selecting it means you expect it to run.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from httpstub import HttpStub, Request, Response
from prometheus_client.parser import text_string_to_metric_families

from keda_llm.exporter.cli import build_collector
from keda_llm.exporter.config import parse_config

pytestmark = pytest.mark.real_engine

HERE = Path(__file__).parents[1] / "real_engines"
ENGINE_DIR = Path(os.environ.get("KEDA_LLM_ENGINE_DIR", Path(tempfile.gettempdir()) / "engine"))
VLLM_URL, LLAMA_URL = "http://127.0.0.1:8011", "http://127.0.0.1:8012"
N_REQUESTS, MAX_TOKENS = 16, 160


@dataclass
class Engine:
    name: str
    base: str
    proc_pid: int


def _wait_ready(base: str, pid: int, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        try:
            with urllib.request.urlopen(base + "/metrics", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if not Path(f"/proc/{pid}").exists():
            pytest.fail(f"engine at {base} exited during start; see its log under {ENGINE_DIR}")
        time.sleep(1)
    pytest.fail(f"engine at {base} not ready after {deadline_s:.0f}s")


def _start(script: str, *extra: str) -> int:
    out = subprocess.run(["bash", str(HERE / script), *extra], env={**os.environ, "W": str(ENGINE_DIR)},
                         capture_output=True, text=True, check=True)
    return int(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def engines() -> Iterator[dict[str, Engine]]:
    missing = [p for p in (ENGINE_DIR / "lcb/build/bin/llama-server", ENGINE_DIR / "venv-vllm/bin/python",
                           ENGINE_DIR / "smol/hf") if not p.exists()]
    if missing:
        pytest.fail(f"real engines are not set up in {ENGINE_DIR} (missing {missing[0]}): run "
                    "tests/real_engines/setup-llamacpp.sh and setup-vllm.sh with W set, or set KEDA_LLM_ENGINE_DIR")
    pids = [_start("run-llamacpp.sh"), _start("run-vllm.sh", "--enforce-eager", "--max-num-seqs", "4")]
    try:
        _wait_ready(LLAMA_URL, pids[0], 60)
        _wait_ready(VLLM_URL, pids[1], 300)
        yield {"llamacpp": Engine("llamacpp", LLAMA_URL, pids[0]), "vllm": Engine("vllm", VLLM_URL, pids[1])}
    finally:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 15)


class RecordingProxy:
    """Forwards GET /metrics to an engine and keeps the last body it passed on."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.last_body = ""
        self.stub = HttpStub(self._forward, protocol="HTTP/1.0")
        self.url = f"{self.stub.url}/metrics"

    def _forward(self, _: Request) -> Response:
        with urllib.request.urlopen(self.upstream + "/metrics", timeout=10) as r:
            body = r.read()
            ctype = r.headers.get("Content-Type", "text/plain")
        self.last_body = body.decode()
        return Response(200, body, ctype)


def grep_sum(body: str, name: str) -> float:
    """Sum every sample of one metric name in a body: an independent reading, a regex per line."""
    total, found = 0.0, False
    for line in body.splitlines():
        m = re.match(rf"^{re.escape(name)}(\{{[^}}]*\}})?\s+(\S+)", line)
        if m:
            total += float(m.group(2))
            found = True
    assert found, f"{name} not in the engine's body"
    return total


def exported(text: str) -> dict[tuple[str, str], float]:
    """(metric, engine label) -> value from the exporter's own /metrics text."""
    out: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if "engine" in s.labels and s.name.startswith("llm_") and "le" not in s.labels:
                out[(s.name, s.labels["engine"])] = s.value
    return out


def send_load(base: str, model: str, results: list[dict[str, int]]) -> list[threading.Thread]:
    def one(i: int) -> None:
        body = {"model": model, "prompt": f"Write a long story about the number {i}.", "max_tokens": MAX_TOKENS,
                "temperature": 0.7, "ignore_eos": True}
        req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=600) as r:
            results.append(json.loads(r.read())["usage"])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(N_REQUESTS)]
    for t in threads:
        t.start()
    return threads


def test_exporter_matches_real_engines(engines: dict[str, Engine]) -> None:
    proxies = {name: RecordingProxy(e.base) for name, e in engines.items()}
    cfg = parse_config({"interval": "10s", "timeout": "8s", "gpu": {"nvml": False}, "targets": [
        {"url": proxies["vllm"].url, "namespace": "real", "engine": "vllm"},
        {"url": proxies["llamacpp"].url, "namespace": "real", "model": "smollm2"},
    ]}, env={})
    collector = build_collector(cfg)

    def cycle() -> tuple[dict[tuple[str, str], float], dict[str, str]]:
        collector.run_cycle()
        text = collector.exposition().decode()
        return exported(text), {n: p.last_body for n, p in proxies.items()}

    before, _ = cycle()
    results: dict[str, list[dict[str, int]]] = {"vllm": [], "llamacpp": []}
    threads = [t for name, e in engines.items() for t in send_load(e.base, "smollm2", results[name])]

    # Under load: every cycle, the exported numbers equal the body the exporter read.
    peak = {"vllm": 0.0, "llamacpp": 0.0}
    checked = 0
    while any(t.is_alive() for t in threads):
        time.sleep(1.0)  # an exporter cycles every few seconds; hammering /metrics slows llama.cpp's loop
        values, bodies = cycle()
        vb, lb = bodies["vllm"], bodies["llamacpp"]
        expect = {
            ("llm_requests_running", "vllm"): grep_sum(vb, "vllm:num_requests_running"),
            ("llm_requests_waiting", "vllm"): grep_sum(vb, "vllm:num_requests_waiting"),
            ("llm_kv_cache_usage_ratio", "vllm"): grep_sum(vb, "vllm:kv_cache_usage_perc"),
            ("llm_generation_tokens_total", "vllm"): grep_sum(vb, "vllm:generation_tokens_total"),
            ("llm_requests_running", "llamacpp"): grep_sum(lb, "llamacpp:requests_processing"),
            ("llm_requests_waiting", "llamacpp"): grep_sum(lb, "llamacpp:requests_deferred"),
            ("llm_generation_tokens_total", "llamacpp"): grep_sum(lb, "llamacpp:tokens_predicted_total"),
        }
        for key, value in expect.items():
            assert values[key] == pytest.approx(value), key
        assert values[("llm_engine_up", "vllm")] == 1 and values[("llm_engine_up", "llamacpp")] == 1
        for name in peak:
            peak[name] = max(peak[name], values[("llm_requests_running", name)] +
                             values[("llm_requests_waiting", name)])
        checked += 1
        print(f"cycle {checked}: " + ", ".join(f"{k[1]} {k[0]}={v:g}" for k, v in sorted(expect.items())))
    for t in threads:
        t.join()
    assert checked >= 2, "load finished before two cycles ran: raise MAX_TOKENS"

    # vLLM's batch limit is 4 (--max-num-seqs), llama.cpp has 4 slots: both held all 16 at once.
    assert peak == {"vllm": N_REQUESTS, "llamacpp": N_REQUESTS}, peak

    # After: the token counters moved by exactly what the engines told each client it generated.
    after, bodies = cycle()
    for name in ("vllm", "llamacpp"):
        gen = sum(u["completion_tokens"] for u in results[name])
        prompt = sum(u["prompt_tokens"] for u in results[name])
        assert len(results[name]) == N_REQUESTS
        delta_gen = after[("llm_generation_tokens_total", name)] - before[("llm_generation_tokens_total", name)]
        delta_prompt = after[("llm_prompt_tokens_total", name)] - before[("llm_prompt_tokens_total", name)]
        print(f"{name}: generated {delta_gen:g} (clients saw {gen}), prompt {delta_prompt:g} (clients saw {prompt})")
        assert delta_gen == gen
        assert delta_prompt == prompt
        assert after[("llm_requests_running", name)] == 0 and after[("llm_requests_waiting", name)] == 0
    # vLLM's KV capacity comes from cache_config_info labels: num_gpu_blocks x block_size.
    info = re.search(r'vllm:cache_config_info\{[^}]*\}', bodies["vllm"])
    assert info is not None
    blocks = int(re.search(r'num_gpu_blocks="(\d+)"', info.group(0)).group(1))  # type: ignore[union-attr]
    size = int(re.search(r'[{,]block_size="(\d+)"', info.group(0)).group(1))  # type: ignore[union-attr]
    assert after[("llm_kv_cache_capacity_tokens", "vllm")] == blocks * size
    assert ("llm_kv_cache_usage_ratio", "llamacpp") not in after  # llama.cpp reports no KV: no series
    collector.stop()
