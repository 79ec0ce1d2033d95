"""CPU cost of one exporter collection cycle: 8 engines serving the real vLLM body, 8 fake GPUs.

A cycle is what the exporter does every interval: fetch each engine's /metrics over loopback
HTTP, parse + normalize it, read the GPUs through the NVML collector (over exporter.fake_nvml), and
render the exposition once. The engines run in a SEPARATE process so their CPU is not counted;
what is measured is `time.process_time()` of the exporter process around `Collector.run_cycle()`
(all its threads: the scrape pool included).

It also compares the two ways to render in the same run: the exporter's direct text renderer
against prometheus_client custom collectors + `generate_latest` on the same snapshot (baseline).

    .venv/bin/python bench/bench_cycle.py [--cycles 300] [--out bench/results/cycle.md]

Goal (issue 2): under 20 ms of CPU per cycle.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector as PromCollector

from keda_llm.common.vocabulary import ENGINE_LABELS, ENGINE_METRICS, GPU_LABELS, GPU_METRICS
from keda_llm.exporter.collect import Collector, Snapshot
from keda_llm.exporter.config import parse_config
from keda_llm.exporter.discovery import Discovery
from keda_llm.exporter.engines import normalize
from keda_llm.exporter.fake_nvml import FakeNvml, fake_gpus
from keda_llm.exporter.nvml import NvmlCollector
from keda_llm.exporter.render import fmt, render

ROOT = Path(__file__).resolve().parent.parent
BODY = ROOT / "tests" / "fixtures" / "engines" / "vllm-0.32.0-cpu-load.prom"
ENGINES = 8
GPUS = 8


def _serve_engines(body: bytes, count: int, ports: mp.Queue[list[int]], stop: threading.Event | None = None) -> None:
    """In the engines' own process: `count` HTTP servers answering every GET with `body`."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    servers = [ThreadingHTTPServer(("127.0.0.1", 0), Handler) for _ in range(count)]
    for s in servers:
        s.daemon_threads = True
        threading.Thread(target=s.serve_forever, daemon=True).start()
    ports.put([int(s.server_address[1]) for s in servers])
    threading.Event().wait()  # until the parent terminates us


# -- the baseline renderer: prometheus_client custom collectors ---------------------------------------


class _SnapshotCollector(PromCollector):
    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        snap = self.snapshot
        for metric in ENGINE_METRICS:
            fam: Metric
            if metric.type == "histogram":
                fam = HistogramMetricFamily(metric.name, metric.help, labels=ENGINE_LABELS)
            elif metric.type == "counter":
                fam = CounterMetricFamily(metric.name, metric.help, labels=ENGINE_LABELS)
            else:
                fam = GaugeMetricFamily(metric.name, metric.help, labels=ENGINE_LABELS)
            for st in snap.targets:
                for m in st.metrics:
                    value = getattr(m, metric.field)
                    if value is None:
                        continue
                    labels = [m.model, m.engine, m.role, st.target.namespace, st.target.pod, snap.node]
                    if isinstance(fam, HistogramMetricFamily):
                        fam.add_metric(labels, [(fmt(b), c) for b, c in value.buckets], value.sum)
                    elif isinstance(fam, CounterMetricFamily | GaugeMetricFamily):
                        fam.add_metric(labels, value)
            yield fam
        for metric in GPU_METRICS:
            cls = CounterMetricFamily if metric.type == "counter" else GaugeMetricFamily
            gfam = cls(metric.name, metric.help, labels=GPU_LABELS)
            for g in snap.gpus:
                v = getattr(g, metric.field)
                if v is not None:
                    gfam.add_metric([g.index, g.uuid, g.gpu_model, g.mig_profile, snap.node, "", "", ""], v)
            yield gfam


def render_with_client(snapshot: Snapshot) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_SnapshotCollector(snapshot))
    return generate_latest(registry).decode()


# -- measuring --------------------------------------------------------------------------------------


def cpu_ms(fn: Callable[[], object], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.process_time()
        fn()
        out.append((time.process_time() - t0) * 1000)
    return out


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cycles", type=int, default=300)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cycle.md"))
    args = ap.parse_args()

    ctx = mp.get_context("spawn")
    ports_q: mp.Queue[list[int]] = ctx.Queue()
    body = BODY.read_bytes()
    engines = ctx.Process(target=_serve_engines, args=(body, ENGINES, ports_q), daemon=True)
    engines.start()
    try:
        ports = ports_q.get(timeout=60)
        cfg = parse_config({"interval": "5s", "timeout": "2s", "node_name": "bench-node", "targets": [
            {"url": f"http://127.0.0.1:{port}/metrics", "namespace": "llm", "pod": f"vllm-{i}"}
            for i, port in enumerate(ports)]}, env={})
        nvml = NvmlCollector(FakeNvml(fake_gpus(GPUS)))
        collector = Collector(cfg, Discovery(cfg), normalize, render, gpu_source=nvml, max_workers=8)
        for _ in range(10):  # warm-up: connections, imports, NVML discovery
            snapshot = collector.run_cycle()
        assert all(st.up for st in snapshot.targets), [st.last_error for st in snapshot.targets]
        assert len(snapshot.gpus) == GPUS

        cycle = cpu_ms(collector.run_cycle, args.cycles)
        text = body.decode()
        target = snapshot.targets[0].target
        parse_one = cpu_ms(lambda: normalize(text, target), args.cycles)
        gpus = cpu_ms(nvml.collect, args.cycles)
        direct = cpu_ms(lambda: render(snapshot), args.cycles)
        client = cpu_ms(lambda: render_with_client(snapshot), args.cycles)
        exposition = render(snapshot)
    finally:
        engines.terminate()
        engines.join(10)

    rows = [
        ("whole cycle (8 engines + 8 GPUs, fetch + parse + normalize + render)", cycle),
        ("parse + normalize, one vLLM body", parse_one),
        ("NVML collect, 8 fake GPUs", gpus),
        ("render, direct text (used)", direct),
        ("render, prometheus_client collectors (baseline)", client),
    ]
    lines = [
        "# Exporter collection cycle: CPU time",
        "",
        f"`bench/bench_cycle.py`, {args.cycles} cycles after 10 warm-up cycles; process CPU time "
        "(`time.process_time`, all threads of the exporter process); the 8 engines serve "
        f"`tests/fixtures/engines/{BODY.name}` ({len(body):,} bytes) from a separate process.",
        f"Python {platform.python_version()} on {platform.machine()}, {mp.cpu_count()} CPUs (shared).",
        f"Exposition per cycle: {len(exposition):,} bytes, {exposition.count(chr(10)):,} lines.",
        "",
        "| step | median CPU ms | p90 CPU ms |",
        "|---|---:|---:|",
        *[f"| {name} | {statistics.median(v):.2f} | {p(v, 0.9):.2f} |" for name, v in rows],
        "",
        f"Goal: under 20 ms per cycle -> median {statistics.median(cycle):.2f} ms "
        f"({'met' if statistics.median(cycle) < 20 else 'NOT met'}).",
        f"Direct rendering is {statistics.median(client) / statistics.median(direct):.1f}x cheaper than "
        "prometheus_client collectors on the same snapshot.",
        "",
    ]
    report = "\n".join(lines)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(report)
    sys.stdout.write(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
