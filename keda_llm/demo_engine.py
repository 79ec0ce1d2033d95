"""What one simulated replica of the demo serves: vLLM-format `/metrics` from the simulator's engine state.

The engine is the simulator's (`simulator.replica.Replica`: continuous batching, a KV-block budget with
preemption, chunked prefill); this module only renders its gauges and counters under vLLM's metric
names, with the latency histograms vLLM keeps (`Latency`, fed with each finished request), and serves
them over loopback. The real exporter scrapes that body like any vLLM pod's.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from keda_llm.simulator.replica import Replica, Request

#: TTFT histogram bounds, seconds (a subset of vLLM's own buckets).
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0)
#: inter-token latency bounds, seconds (a subset of vLLM's own buckets).
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)


@dataclass
class Histogram:
    """A Prometheus histogram: cumulative buckets, sum and count."""

    bounds: tuple[float, ...]
    buckets: list[int] = field(default_factory=list)
    count: int = 0
    sum: float = 0.0

    def __post_init__(self) -> None:
        if not self.buckets:
            self.buckets = [0] * len(self.bounds)

    def observe(self, value: float, n: int = 1) -> None:
        self.count += n
        self.sum += value * n
        for i, le in enumerate(self.bounds):
            if value <= le:
                self.buckets[i] += n

    def lines(self, name: str, labels: str) -> list[str]:
        out = [f'{name}_bucket{{{labels},le="{le}"}} {n}.0' for le, n in zip(self.bounds, self.buckets, strict=True)]
        out.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}.0')
        out.append(f"{name}_count{{{labels}}} {self.count}.0")
        out.append(f"{name}_sum{{{labels}}} {self.sum!r}")
        return out


@dataclass
class Latency:
    """One replica's TTFT and inter-token latency histograms, with vLLM's semantics: TTFT one observation
    per request (from its arrival, gateway wait included); ITL one per inter-token gap (a request adds
    output tokens - 1 gaps of its mean gap), as the simulator counts its own `ttft`/`itl` sums."""

    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))

    def add(self, finished: Iterable[Request]) -> None:
        for q in finished:
            if q.first_token_s is None or q.finish_s is None:
                continue
            self.ttft.observe(q.first_token_s - q.arrival_s)
            if q.target_output >= 2:
                gaps = q.target_output - 1
                self.itl.observe((q.finish_s - q.first_token_s) / gaps, gaps)


def render(model: str, engine: Replica, latency: Latency) -> str:
    """The body vLLM 0.32 serves, reduced to the families a vLLM dashboard (and the exporter) reads."""
    lbl = f'engine="0",model_name="{model}"'
    c = engine.counters
    cfg = engine.config

    def family(name: str, kind: str, help_text: str, value: float | int) -> list[str]:
        return [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", f"{name}{{{lbl}}} {float(value)!r}"]

    lines = [
        *family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                engine.num_running),
        *family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                engine.num_waiting),
        *family("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", engine.kv_usage),
        *family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.",
                c.preemptions),
        *family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", c.prompt_tokens),
        *family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.",
                c.generation_tokens),
        *family("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of "
                "queried tokens.", c.prefix_queried_tokens),
        *family("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached "
                "tokens.", c.prefix_hit_tokens),
        "# HELP vllm:request_success_total Count of successfully processed requests.",
        "# TYPE vllm:request_success_total counter",
        f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="{model}"}} '
        f"{float(c.requests_finished)!r}",
        "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
        "# TYPE vllm:cache_config_info gauge",
        f'vllm:cache_config_info{{block_size="{cfg.block_size}",engine="0",num_gpu_blocks="{cfg.kv_blocks}"}} 1.0',
        "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
        "# TYPE vllm:time_to_first_token_seconds histogram",
        *latency.ttft.lines("vllm:time_to_first_token_seconds", lbl),
        "# HELP vllm:inter_token_latency_seconds Histogram of inter-token latency in seconds.",
        "# TYPE vllm:inter_token_latency_seconds histogram",
        *latency.itl.lines("vllm:inter_token_latency_seconds", lbl),
    ]
    return "\n".join(lines) + "\n"


class EngineServer:
    """Serves one replica's `/metrics` on loopback; `body()` is called under `lock` for each scrape.

    The port is bound at construction (so a pod can announce it) but not listened on until
    `start()`: until then a connection is refused, as it is while vLLM loads its weights.
    """

    def __init__(self, body: Callable[[], str], lock: threading.Lock, host: str = "127.0.0.1") -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                with lock:
                    text = body().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(text)))
                self.end_headers()
                self.wfile.write(text)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer((host, 0), Handler, bind_and_activate=False)
        self._httpd.daemon_threads = True
        self._httpd.server_bind()  # bound, not listening: connections are refused until start()
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://{host}:{self.port}/metrics"
        self._thread: threading.Thread | None = None

    @property
    def serving(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Open the port (the engine finished loading)."""
        self._httpd.server_activate()
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.2,), name="demo-engine",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._httpd.shutdown()
            self._thread.join(5.0)
        self._httpd.server_close()
