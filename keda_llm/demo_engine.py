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


@dataclass
class _Seq:
    prompt: int
    output: int
    arrived: float
    generated: int = 0
    first_token_at: float | None = None


@dataclass
class DemoEngine:
    """One replica: continuous batching with `max_num_seqs` and a KV budget of `num_blocks x block_size`."""

    model: str
    max_num_seqs: int = 8
    num_blocks: int = 512
    block_size: int = 16
    decode_tokens_per_s: float = 40.0  # per sequence
    prefill_tokens_per_s: float = 4000.0
    waiting: deque[_Seq] = field(default_factory=deque)
    running: list[_Seq] = field(default_factory=list)
    prompt_tokens_total: int = 0
    generation_tokens_total: int = 0
    finished_total: int = 0
    preemptions_total: int = 0
    _last: float | None = None
    _credit: float = 0.0
    ttft: list[float] = field(default_factory=list)

    @property
    def capacity_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def _tokens_held(self) -> int:
        return sum(s.prompt + s.generated for s in self.running)

    def submit(self, prompt: int, output: int, now: float) -> None:
        self.waiting.append(_Seq(prompt, max(1, output), now))

    def outstanding(self) -> int:
        return len(self.waiting) + len(self.running)

    def tick(self, now: float) -> None:
        """Advance to `now`: admit from the queue, then decode whole tokens for the elapsed time."""
        if self._last is None:
            self._last = now
        dt = max(0.0, now - self._last)
        self._last = now
        while self.waiting and len(self.running) < self.max_num_seqs:
            nxt = self.waiting[0]
            if self._tokens_held() + nxt.prompt + nxt.output > self.capacity_tokens:
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
            return
        done: list[_Seq] = []
        for s in self.running:
            n = min(steps, s.output - s.generated)
            if s.first_token_at is None and n > 0:
                s.first_token_at = now
                self.ttft.append(now - s.arrived)
            s.generated += n
            self.generation_tokens_total += n
            if s.generated >= s.output:
                done.append(s)
        for s in done:
            self.running.remove(s)
            self.finished_total += 1

    def render(self) -> str:
        """The body vLLM 0.32 serves, reduced to the families a vLLM dashboard reads."""
        lbl = f'engine="0",model_name="{self.model}"'
        usage = self._tokens_held() / self.capacity_tokens
        buckets = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0)
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
        for le in buckets:
            n = sum(1 for t in self.ttft if t <= le)
            lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lbl},le="{le}"}} {n}.0')
        lines.append(f'vllm:time_to_first_token_seconds_bucket{{{lbl},le="+Inf"}} {len(self.ttft)}.0')
        lines.append(f"vllm:time_to_first_token_seconds_count{{{lbl}}} {len(self.ttft)}.0")
        lines.append(f"vllm:time_to_first_token_seconds_sum{{{lbl}}} {sum(self.ttft)!r}")
        return "\n".join(lines) + "\n"


class EngineServer:
    """Serves one DemoEngine's `/metrics` on loopback; the port is closed until `start()`, as vLLM's is."""

    def __init__(self, engine: DemoEngine, lock: threading.Lock, host: str = "127.0.0.1") -> None:
        self.engine = engine
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/metrics":
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

        self._httpd = ThreadingHTTPServer((host, 0), Handler)
        self._httpd.daemon_threads = True
        self.url = f"http://{host}:{self._httpd.server_address[1]}/metrics"
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="demo-engine", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
