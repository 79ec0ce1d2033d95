"""What one simulated replica of the demo serves over HTTP: vLLM-format `/metrics` from the simulator's
engine state, `/health`, and `POST /v1/completions` answered by the simulated engine.

The engine is the simulator's (`simulator.hardware.replica.Replica`: continuous batching, a KV-block budget with
preemption, chunked prefill); this module only renders its gauges and counters under vLLM's metric
names, with the latency histograms vLLM keeps (`Latency`, fed with each finished request), and speaks
vLLM's OpenAI completions API in front of it: a request that comes in is handed to the simulated engine
(`Serving.submit`) and answered as the engine emits its tokens, whole or streamed. The real exporter
scrapes /metrics like any vLLM pod's; the real activator probes /health and forwards to /v1/completions.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from keda_llm.simulator.hardware.replica import Replica, Request

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
    per request (from its arrival at the engine: an activator's hold before it is not in it); ITL one per
    inter-token gap (a request adds output tokens - 1 gaps of its mean gap), as the simulator counts its
    own `ttft`/`itl` sums."""

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


#: The words a demo engine "generates", one per token (the text is not the point: the timing is).
WORDS = ("the", "model", "woke", "from", "zero", "and", "answered", "every", "request", "once")


class Serving(Protocol):
    """What one pod's HTTP side asks of the simulated engine behind it (the demo's World implements it)."""

    def ready(self) -> bool:
        """GET /health: True while the pod is ready (not draining)."""
        ...

    def submit(self, prompt_tokens: int, max_tokens: int) -> Request | None:
        """Hand a request to the engine now; None when the pod is gone (the connection is then dropped).
        BadRequest: one the engine can never serve (answered 400)."""
        ...

    def progress(self, request: Request, seen: int, timeout: float) -> tuple[int, bool]:
        """Block until the engine has emitted more than `seen` tokens of `request`, it finished, or `timeout`
        passed; then (tokens emitted so far, finished). A ConnectionError: the engine is gone."""
        ...


@dataclass(frozen=True)
class Completion:
    """An OpenAI completions request as the demo engine reads it (vLLM's /v1/completions)."""

    prompt_tokens: int
    max_tokens: int
    stream: bool


class BadRequest(ValueError):
    """A request body the engine refuses (400), with vLLM's kind of message."""


def parse_completion(body: bytes, model: str) -> Completion:
    """`prompt` (token ids or text: one token per word), `max_tokens` (16 by default, as OpenAI) and `stream`."""
    try:
        obj = json.loads(body or b"null")
    except (ValueError, UnicodeDecodeError) as e:
        raise BadRequest(f"the body is not JSON: {e}") from None
    if not isinstance(obj, dict):
        raise BadRequest("the body must be a JSON object")
    if obj.get("model") != model:
        raise BadRequest(f"the model `{obj.get('model')}` does not exist")
    prompt = obj.get("prompt")
    if isinstance(prompt, str):
        n = len(prompt.split())
    elif isinstance(prompt, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
        n = len(prompt)
    else:
        raise BadRequest("prompt: a string or a list of token ids")
    max_tokens = obj.get("max_tokens", 16)
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest(f"max_tokens: an integer >= 1, not {max_tokens!r}")
    stream = obj.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest(f"stream: true or false, not {stream!r}")
    if n < 1:
        raise BadRequest("prompt: at least one token")
    return Completion(n, max_tokens, stream)


def text(start: int, end: int) -> str:
    """Tokens [start, end) of every answer, as words."""
    return "".join(" " + WORDS[i % len(WORDS)] for i in range(start, end))


def completion_json(rid: int, model: str, prompt_tokens: int, tokens: int) -> dict[str, Any]:
    """A whole (non-streamed) answer, as vLLM's OpenAI server writes it; `finish_reason` length: the
    engine generated `max_tokens`."""
    return {"id": f"cmpl-{rid}", "object": "text_completion", "model": model,
            "choices": [{"index": 0, "text": text(0, tokens), "finish_reason": "length"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": tokens,
                      "total_tokens": prompt_tokens + tokens}}


def stream_event(rid: int, model: str, start: int, end: int, done: bool) -> bytes:
    """One server-sent event of a streamed answer: tokens [start, end)."""
    chunk = {"id": f"cmpl-{rid}", "object": "text_completion", "model": model,
             "choices": [{"index": 0, "text": text(start, end), "finish_reason": "length" if done else None}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


class _Server(ThreadingHTTPServer):
    """A client that leaves before its answer is written (a health probe at shutdown, a scrape cut short) is
    the client's business: no traceback on the demo's terminal for it. Anything else is reported as the
    standard library does."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        if isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipeError, ConnectionResetError, ...
            return
        super().handle_error(request, client_address)


class EngineServer:
    """Serves one replica on loopback: `/metrics` (`body()` is called under `lock` for each scrape) and,
    given a `serving`, GET /health and POST /v1/completions answered by the simulated engine (streamed
    as server-sent events, token by token as the engine emits them, when the body asks for `stream`).

    The port is bound at construction (so a pod can announce it) but not listened on until
    `start()`: until then a connection is refused, as it is while vLLM loads its weights. `port`: a
    fixed port (the demo's pods take the activator's static endpoints' ports), 0: any free one.
    """

    def __init__(self, body: Callable[[], str], lock: threading.Lock, host: str = "127.0.0.1", *, port: int = 0,
                 serving: Serving | None = None, model: str = "") -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/health" and serving is not None:
                    self._send(200 if serving.ready() else 503, b"", "text/plain")
                    return
                if path != "/metrics":
                    self.send_error(404)
                    return
                with lock:
                    text = body().encode()
                self._send(200, text, "text/plain; version=0.0.4; charset=utf-8")

            def do_POST(self) -> None:
                if serving is None or self.path.split("?", 1)[0] != "/v1/completions":
                    self.send_error(404)
                    return
                try:
                    size = int(self.headers.get("Content-Length") or 0)
                    req = parse_completion(self.rfile.read(size), model)
                except (BadRequest, ValueError) as e:
                    err = {"error": {"message": str(e), "type": "BadRequestError", "code": 400}}
                    self._send(400, json.dumps(err).encode(), "application/json")
                    return
                try:
                    q = serving.submit(req.prompt_tokens, req.max_tokens)
                except BadRequest as e:
                    err = {"error": {"message": str(e), "type": "BadRequestError", "code": 400}}
                    self._send(400, json.dumps(err).encode(), "application/json")
                    return
                if q is None:  # the pod went away: drop the connection unanswered, as a closed port would
                    self.close_connection = True
                    return
                try:
                    if req.stream:
                        self._stream(serving, q)
                        return
                    done = False
                    n = 0
                    while not done:
                        n, done = serving.progress(q, n, 1.0)
                    body = json.dumps(completion_json(q.rid, model, req.prompt_tokens, n)).encode()
                    self._send(200, body, "application/json")
                except ConnectionError:  # the client left, or the engine went away: the answer stops short
                    self.close_connection = True

            def _stream(self, serving: Serving, q: Request) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()  # HTTP/1.0: the answer ends when the connection closes
                sent, done = 0, False
                while not done:
                    n, done = serving.progress(q, sent, 1.0)
                    if n > sent or done:
                        self.wfile.write(stream_event(q.rid, model, sent, n, done))
                        self.wfile.flush()
                        sent = n
                self.wfile.write(b"data: [DONE]\n\n")

            def _send(self, status: int, data: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: object) -> None:
                pass

        self._httpd = _Server((host, port), Handler, bind_and_activate=False)
        self._httpd.daemon_threads = True
        self._httpd.server_bind()  # bound, not listening: connections are refused until start()
        self.port = int(self._httpd.server_address[1])
        self.base_url = f"http://{host}:{self.port}"
        self.url = f"{self.base_url}/metrics"
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
