"""A small simulated vLLM engine that serves a real-shaped `/metrics` body, for the demo.

It is not the simulator's physics model: it only needs to behave like an LLM server under load
(a batch limit, a KV budget, a queue, tokens flowing) so that the real exporter and the real
scaler have something true-to-format to read. The core (`DemoEngine`) is pure: the caller passes
`now`; the HTTP server is a thin edge.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: TTFT histogram bounds, seconds (a subset of vLLM's own buckets).
TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0)


@dataclass
class EngineRequest:
    """One request inside an engine; `rid` is the caller's id, the times are the caller's clock."""

    prompt: int
    output: int
    arrived: float
    rid: int = 0
    generated: int = 0
    first_token_at: float | None = None
    finished_at: float | None = None


@dataclass
class DemoEngine:
    """One replica: continuous batching with `max_num_seqs` and a KV budget of `num_blocks x block_size`."""

    model: str
    max_num_seqs: int = 8
    num_blocks: int = 512
    block_size: int = 16
    decode_tokens_per_s: float = 40.0  # per sequence
    waiting: deque[EngineRequest] = field(default_factory=deque)
    running: list[EngineRequest] = field(default_factory=list)
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    finished_total: int = 0
    preemptions_total: int = 0
    ttft_count: int = 0
    ttft_sum: float = 0.0
    ttft_buckets: list[int] = field(default_factory=lambda: [0] * len(TTFT_BUCKETS))
    _last: float | None = None
    _credit: float = 0.0

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def tokens_held(self) -> int:
        return sum(s.prompt + s.generated for s in self.running)

    def submit(self, prompt: int, output: int, now: float, rid: int = 0) -> EngineRequest:
        req = EngineRequest(prompt, max(1, output), now, rid)
        self.waiting.append(req)
        return req

    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def tick(self, now: float) -> list[EngineRequest]:
        """Advance to `now`: admit from the queue, then decode whole tokens for the elapsed time.

        Returns the requests that finished in this step. A request is admitted only when its prompt
        and its whole output fit in the KV budget, so there are no preemptions (vLLM would preempt).
        """
        if self._last is None:
            self._last = now
        dt = max(0.0, now - self._last)
        self._last = now
        while self.waiting and len(self.running) < self.max_num_seqs:
            nxt = self.waiting[0]
            if self.running and self.tokens_held() + nxt.prompt + nxt.output > self.capacity_tokens:
                break
            self.waiting.popleft()
            self.prompt_tokens_total += nxt.prompt
            self.running.append(nxt)
        # A bigger batch decodes each sequence a little slower (memory-bound steps get longer).
        slowdown = 1.0 + 0.03 * len(self.running)
        self._credit += dt * self.decode_tokens_per_s / slowdown
        steps = int(self._credit)
        self._credit -= steps
        if not steps:
            return []
        done: list[EngineRequest] = []
        for s in self.running:
            n = min(steps, s.output - s.generated)
            if s.first_token_at is None and n > 0:
                s.first_token_at = now
                self._observe_ttft(now - s.arrived)
            s.generated += n
            self.generation_tokens_total += n
            if s.generated >= s.output:
                s.finished_at = now
                done.append(s)
        if done:
            self.running = [s for s in self.running if s.finished_at is None]
            self.finished_total += len(done)
        return done

    def _observe_ttft(self, seconds: float) -> None:
        self.ttft_count += 1
        self.ttft_sum += seconds
        for i, le in enumerate(TTFT_BUCKETS):
            if seconds <= le:
                self.ttft_buckets[i] += 1

    def render(self) -> str:
        """The body vLLM 0.32 serves, reduced to the families a vLLM dashboard reads."""
        lbl = f'engine="0",model_name="{self.model}"'
        usage = self.tokens_held() / self.capacity_tokens
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{lbl}}} {len(self.running)}.0",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{lbl}}} {len(self.waiting)}.0",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{lbl}}} {usage!r}",
            "# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.",
            "# TYPE vllm:num_preemptions_total counter",
            f"vllm:num_preemptions_total{{{lbl}}} {self.preemptions_total}.0",
            "# HELP vllm:prompt_tokens_total Number of prefill tokens processed.",
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{lbl}}} {self.prompt_tokens_total}.0",
            "# HELP vllm:generation_tokens_total Number of generation tokens processed.",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{lbl}}} {self.generation_tokens_total}.0",
            "# HELP vllm:request_success_total Count of successfully processed requests.",
            "# TYPE vllm:request_success_total counter",
            f'vllm:request_success_total{{engine="0",finished_reason="length",model_name="{self.model}"}} '
            f"{self.finished_total}.0",
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{block_size="{self.block_size}",engine="0",'
            f'num_gpu_blocks="{self.num_blocks}"}} 1.0',
            "# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.",
            "# TYPE vllm:time_to_first_token_seconds histogram",
        ]
        for le, n in zip(TTFT_BUCKETS, self.ttft_buckets, strict=True):
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lbl},le="{le}"}} {n}.0')
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lbl},le="+Inf"}} {self.ttft_count}.0')
        lines.append(f"vllm:time_to_first_token_seconds_count{{{lbl}}} {self.ttft_count}.0")
        lines.append(f"vllm:time_to_first_token_seconds_sum{{{lbl}}} {self.ttft_sum!r}")
        return "\n".join(lines) + "\n"


class EngineServer:
    """Serves one DemoEngine's `/metrics` on loopback.

    The port is bound at construction (so a pod can announce it) but not listened on until
    `start()`: until then a connection is refused, as it is while vLLM loads its weights.
    """

    def __init__(self, engine: DemoEngine, lock: threading.Lock, host: str = "127.0.0.1") -> None:
        self.engine = engine
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?", 1)[0] != "/metrics":
                    self.send_error(404)
                    return
                with lock:
                    body = outer.engine.render().encode()
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = ThreadingHTTPServer((host, 0), Handler, bind_and_activate=False)
        self._httpd.daemon_threads = True
        self._httpd.server_bind()  # bound, not listening: connections are refused until start()
        self.port = int(self._httpd.server_address[1])
        self.url = f"http://{host}:{self.port}/metrics"
        self._thread: threading.Thread | None = None

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
