"""The demo's request path, real HTTP on loopback: `keda-llm activator` in process, and the load's client.

- `LoopThread`: one asyncio event loop on a thread, for the two asyncio parts below (the rest of the demo
  runs on threads);
- `start_activator`: the real activator (activator/proxy.py's `Activator`, configured by activator/config.py's
  parser, the one its YAML file goes through) on that loop: its proxy port in front of the pods' static
  endpoints (probed on /health), its admin port (/metrics, /admin/queues), and its POST /v1/activate to
  the scaler when it holds requests for a model with no ready endpoint;
- `Load`: the script's arrivals, sent on the wall clock as OpenAI completions requests to the proxy port,
  every other one streamed. A 429 or 503 that carries Retry-After is sent again after it, as a
  well-behaved client does; every request ends with exactly one outcome, counted from the HTTP answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import aiohttp

from keda_llm.activator.config import ActivatorConfig
from keda_llm.activator.proxy import Activator

T = TypeVar("T")
#: Requests that are sent again after a Retry-After, at most this many times in all.
MAX_ATTEMPTS = 6


class LoopThread:
    """An asyncio event loop running on its own (daemon) thread; `call` runs a coroutine there and waits."""

    def __init__(self, name: str = "demo-http") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float | None = 30.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def spawn(self, coro: Coroutine[Any, Any, Any]) -> Any:
        """Start `coro` on the loop; returns its concurrent.futures.Future."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def close(self) -> None:
        if self.loop.is_closed():
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10.0)
        if not self._thread.is_alive():
            self.loop.close()


@dataclass
class RunningActivator:
    """A started Activator: its object (metrics, queues), the proxy's base URL and the admin port's."""

    activator: Activator
    proxy_url: str
    admin_url: str


def start_activator(loop: LoopThread, cfg: ActivatorConfig, host: str = "127.0.0.1") -> RunningActivator:
    """`keda-llm activator`'s Activator on `loop`, proxy and admin ports on free ports of `host`."""

    async def start() -> Activator:
        act = Activator(cfg)
        await act.start((host, 0), (host, 0))
        return act

    act = loop.call(start())
    return RunningActivator(act, f"http://{host}:{act.ports['proxy']}", f"http://{host}:{act.ports['admin']}")


def stop_activator(loop: LoopThread, running: RunningActivator) -> None:
    """Its graceful shutdown (activator/proxy.py `stop`): held requests answered, in-flight ones finished."""
    loop.call(running.activator.stop(), timeout=running.activator.cfg.shutdown_grace + 15.0)


@dataclass(frozen=True)
class Send:
    """One request of the load: when (seconds on the load's clock), prompt and output tokens."""

    at: float
    prompt: int
    output: int


@dataclass
class Outcome:
    """What became of one request, from the HTTP answers it got (the last one decides)."""

    sent_at: float
    streamed: bool
    status: int = 0  # the last answer's status (0: none, the connection failed)
    attempts: int = 0
    refusals: list[tuple[int, int]] = field(default_factory=list)  # (status, Retry-After) answers before it
    tokens: int = 0  # completion tokens received
    complete: bool = False  # 200 with every token asked for ([DONE] seen when streamed)
    ttft: float | None = None  # streamed: send -> first token, seconds (holds and retries included)
    latency: float | None = None  # send -> the end of the last answer
    error: str = ""


@dataclass
class LoadStats:
    sent: int = 0
    in_flight: int = 0  # sent, no final outcome yet (waiting on a Retry-After included)
    answered: int = 0  # final outcomes
    served: int = 0  # final outcomes that are complete 200 answers
    ok_responses: int = 0  # HTTP answers with status 200 (one per served request, if each is answered once)
    refusals: dict[int, int] = field(default_factory=dict)  # status -> answers with Retry-After (429, 503)
    retry_after_max: int = 0
    outcomes: list[Outcome] = field(default_factory=list)  # the finished ones

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if not o.complete]


class Load:
    """Sends `schedule` to `url` (a proxy's /v1/completions) on `clock` (seconds; the schedule's zero is
    clock 0), every `stream_every`-th request streamed. Run `run()` on an event loop; read `stats` anywhere
    (plain counters)."""

    def __init__(self, url: str, model: str, schedule: Sequence[Send], clock: Callable[[], float],
                 stream_every: int = 2) -> None:
        self.url = url
        self.model = model
        self.schedule = list(schedule)
        self.clock = clock
        self.stream_every = stream_every
        self.stats = LoadStats()
        self._sent_times: list[float] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._cancelled = False  # cancel(): send nothing more
        self._runner: asyncio.Task[None] | None = None  # run(), awaited by cancel() so its session closes
        self._woken: asyncio.Event | None = None  # set by cancel(): run() stops waiting for its next send
        self.done = False

    def rate(self, now: float, window: float = 5.0) -> float:
        """Requests sent per second over the last `window` seconds."""
        n = 0
        for t in reversed(self._sent_times):
            if t < now - window:
                break
            n += 1
        return n / min(window, max(now, 1.0))

    async def run(self) -> None:
        """Send the whole schedule, then wait for every answer."""
        self._runner = asyncio.current_task()
        self._woken = woken = asyncio.Event()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                         timeout=aiohttp.ClientTimeout(total=None, sock_read=600)) as session:
            for i, s in enumerate(self.schedule):
                delay = s.at - self.clock()
                if delay > 0 and not self._cancelled:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(woken.wait(), delay)
                if self._cancelled:
                    break
                task = asyncio.create_task(self._one(session, i, s))
                self._tasks.add(task)
                task.add_done_callback(self._tasks.discard)
            while self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self.done = True

    async def cancel(self) -> None:
        """Ctrl-C: send nothing more and drop the requests in flight (their connections close; they stay
        counted in flight)."""
        self._cancelled = True
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*list(self._tasks), return_exceptions=True)
        # run() may be asleep until its next send: wake it and let it end, so its client session closes on
        # this loop (left pending, the loop's close printed "Unclosed client session", "Task was destroyed")
        if self._woken is not None:
            self._woken.set()
        runner = self._runner
        if runner is not None and not runner.done() and runner is not asyncio.current_task():
            await asyncio.gather(runner, return_exceptions=True)

    async def _one(self, session: aiohttp.ClientSession, i: int, s: Send) -> None:
        st = self.stats
        streamed = self.stream_every > 0 and i % self.stream_every == 0
        out = Outcome(self.clock(), streamed)
        body = {"model": self.model, "prompt": [(i + k) % 32000 for k in range(s.prompt)], "max_tokens": s.output,
                "stream": streamed}
        st.sent += 1
        st.in_flight += 1
        self._sent_times.append(out.sent_at)
        try:
            while True:
                out.attempts += 1
                retry = await self._attempt(session, body, out)
                if retry is None or out.attempts >= MAX_ATTEMPTS:
                    break
                out.refusals.append((out.status, retry))
                st.refusals[out.status] = st.refusals.get(out.status, 0) + 1
                st.retry_after_max = max(st.retry_after_max, retry)
                await asyncio.sleep(retry)
        except (aiohttp.ClientError, asyncio.TimeoutError, ValueError) as e:
            out.error = f"{type(e).__name__}: {e}"
        out.latency = self.clock() - out.sent_at
        out.complete = out.status == 200 and out.tokens == s.output and not out.error
        st.outcomes.append(out)
        st.answered += 1
        st.served += out.complete
        st.in_flight -= 1

    async def _attempt(self, session: aiohttp.ClientSession, body: dict[str, Any], out: Outcome) -> int | None:
        """One HTTP exchange; the Retry-After seconds when the answer asks to come back, else None."""
        async with session.post(self.url, json=body) as r:
            out.status = r.status
            if r.status in (429, 503) and r.headers.get("Retry-After", "").isdigit():
                await r.read()
                return int(r.headers["Retry-After"])
            if r.status != 200:
                out.error = f"HTTP {r.status}: {(await r.text())[:200]}"
                return None
            self.stats.ok_responses += 1
            if not body["stream"]:
                data = await r.json()
                out.tokens = int(data["usage"]["completion_tokens"])
                return None
            done = False
            async for raw in r.content:  # to the end of the answer, [DONE] included: the connection is then
                line = raw.decode().strip()  # clean for its next request (leaving early cuts it under the proxy)
                if not line.startswith("data: ") or done:
                    continue
                if line == "data: [DONE]":
                    done = True
                    continue
                words = json.loads(line[6:])["choices"][0]["text"].split()
                if words and out.ttft is None:
                    out.ttft = self.clock() - out.sent_at
                out.tokens += len(words)
            if not done:
                out.error = "the stream ended before [DONE]"
            return None

