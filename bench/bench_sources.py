"""Cost of the scaler's `exporters` source at the issue's scale: 1,000 models x 3 replicas.

Bodies are rendered by the exporter's own renderer (exporter/render.py), 5 exporters (nodes) of
600 pods each, with both latency histograms and 8 GPUs per node, so the reader must skip what it
does not use. Compared in the same run, CPU time (time.process_time):

- the scaler's reader (scaler/sources/exposition.py: parse_exposition) per body,
- baseline 1: prometheus_client's text parser over the same body,
- baseline 2: the exporter's fast parser (exporter/parse.py) keeping only the llm_* engine names,
- a whole ExportersSource cycle (5 concurrent HTTP scrapes + parse + merge + 1,000 Observations),
  the exporters served by a separate process.

Run: .venv/bin/python bench/bench_sources.py   (writes bench/results/sources.md)
"""

from __future__ import annotations

import multiprocessing
import statistics
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from keda_llm.exporter.collect import Snapshot, TargetState
from keda_llm.exporter.model import EngineMetrics, GpuMetrics, Histogram, Target
from keda_llm.exporter.parse import parse
from keda_llm.exporter.render import render
from keda_llm.scaler.sources.exporters import ExportersSource, static_targets
from keda_llm.scaler.sources.exposition import FIELD_OF, parse_exposition

MODELS, REPLICAS, NODES = 1000, 3, 5
NOW = 1_800_000_000.0
BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, float("inf"))


def _hist() -> Histogram:
    return Histogram(tuple((b, float(i * 10)) for i, b in enumerate(BUCKETS, 1)), 12.5, 130.0)


def bodies() -> list[str]:
    per_node: list[list[TargetState]] = [[] for _ in range(NODES)]
    i = 0
    for m in range(MODELS):
        model = f"org/model-{m:04d}"
        for r in range(REPLICAS):
            em = EngineMetrics(engine="vllm", model=model, requests_running=float(r + 3), requests_waiting=1.0,
                               kv_cache_usage_ratio=0.42, kv_cache_capacity_tokens=262144.0,
                               prompt_tokens_total=1e6 + m, generation_tokens_total=4e5, requests_finished_total=900.0,
                               prefix_cache_queried_tokens_total=5e5, prefix_cache_hit_tokens_total=2e5,
                               preemptions_total=0.0, time_to_first_token_seconds=_hist(),
                               inter_token_latency_seconds=_hist())
            target = Target(url=f"http://10.0.{i // 250}.{i % 250}:8000/metrics", namespace=f"team-{m % 20}",
                            pod=f"{model.split('/')[1]}-{r}", node=f"node-{i % NODES}")
            per_node[i % NODES].append(TargetState(target=target, up=True, metrics=(em,), last_success=NOW - 1,
                                                   identities=((model, "vllm", "unified"),), startup_seconds=80.0))
            i += 1
    gpus = tuple(GpuMetrics(index=str(g), uuid=f"GPU-{g}", gpu_model="H100", utilization_ratio=0.5,
                            memory_used_bytes=7e10, memory_total_bytes=8e10, power_watts=500.0) for g in range(8))
    return [render(Snapshot(node=f"node-{n}", targets=tuple(ts), gpus=gpus, cycle_seconds=0.1, discovery_errors=0,
                            at=NOW)) for n, ts in enumerate(per_node)]


def cpu(fn: object, reps: int) -> float:
    """Median CPU seconds of `fn()` over `reps` runs."""
    samples = []
    for _ in range(reps):
        t0 = time.process_time()
        fn()  # type: ignore[operator]
        samples.append(time.process_time() - t0)
    return statistics.median(samples)


def serve(texts: list[str], ports: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    """The exporters, in their own process: one HTTP server per body."""
    servers = []
    for text in texts:
        payload = text.encode()

        class Handler(BaseHTTPRequestHandler):
            body = payload

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(self.body)))
                self.end_headers()
                self.wfile.write(self.body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        servers.append(server)
        ports.put(server.server_address[1])
    import threading
    for s in servers[1:]:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    servers[0].serve_forever()


def main() -> None:
    texts = bodies()
    lines = sum(t.count("\n") for t in texts)
    size = sum(len(t) for t in texts)
    body = texts[0]
    ours = cpu(lambda: parse_exposition(body), 5)
    names = set(FIELD_OF)
    fast = cpu(lambda: parse(body, lambda n: n in names), 5)
    client = cpu(lambda: list(text_string_to_metric_families(body)), 3)

    ports: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    proc = multiprocessing.Process(target=serve, args=(texts, ports), daemon=True)
    proc.start()
    urls = [f"http://127.0.0.1:{ports.get(timeout=30)}/metrics" for _ in texts]
    source = ExportersSource(static_targets(urls), clock=lambda: NOW)
    first = source.collect_once()
    assert len(first) == MODELS and all(len(o.replicas) == REPLICAS for o in first)
    cycle_cpu = cpu(source.collect_once, 5)
    walls = []
    for _ in range(5):
        t0 = time.perf_counter()
        source.collect_once()
        walls.append(time.perf_counter() - t0)
    source.stop()
    proc.terminate()

    per_body = len(texts)
    out = f"""# Scaler `exporters` source: cost at 1,000 models x 3 replicas

`bench/bench_sources.py`; bodies rendered by exporter/render.py: {NODES} exporters, {MODELS * REPLICAS} pods,
two latency histograms per pod, 8 GPUs per node: {lines:,} lines, {size / 1e6:.1f} MB in all
(one body: {body.count(chr(10)):,} lines). CPU time (process_time), median; same run, same machine.

| reading one body | CPU ms | vs prometheus_client |
|---|---:|---:|
| scaler reader (`parse_exposition`, every line checked) | {ours * 1e3:.1f} | {ours / client:.2f}x |
| exporter fast parser, llm_* engine names only (`exporter.parse.parse`) | {fast * 1e3:.1f} | {fast / client:.2f}x |
| prometheus_client `text_string_to_metric_families` (baseline) | {client * 1e3:.1f} | 1.00x |

Whole cycle (`ExportersSource.collect_once`: {per_body} concurrent HTTP scrapes from a separate server
process, parse, merge, {MODELS:,} Observations): **{cycle_cpu * 1e3:.0f} ms CPU**,
{statistics.median(walls) * 1e3:.0f} ms wall (median of 5).
At a 2 s interval that is {cycle_cpu / 2 * 100:.0f}% of one core; at 5 s, {cycle_cpu / 5 * 100:.0f}%.
"""
    Path(__file__).with_name("results").mkdir(exist_ok=True)
    Path(__file__).with_name("results").joinpath("sources.md").write_text(out)
    print(out)


if __name__ == "__main__":
    main()
