"""The proxy's hot path over real loopback HTTP: each streamed chunk reaches the client before the
upstream writes the next (lock-step, so buffering or a chunk held back for an ACK shows as a stall, not
as a timing to judge), the lock-step through the proxy costs about what it costs direct, and upstream
connections are pooled (a connection per concurrent stream, reused by the next requests) and dropped
once idle for KEEPALIVE_S, on asyncio's loop and on uvloop's when it is installed. The event-loop choice
of `keda-llm activator` too."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import pytest
from activator_harness import Server, act_url, model_config, start_activator, wait_for
from aiohttp import web

from keda_llm.activator.cli import loop_factory
from keda_llm.activator.config import ActivatorConfig, ConfigError
from keda_llm.activator.proxy import Activator

STEPS = 100  # lock-step events per stream (50 pairs)
PAIR_GAP = 0.002  # seconds between the two events of a pair
STEP_WAIT = 10.0  # how long the upstream waits for the client to see a chunk before it calls it a stall


class LockStep:
    """An upstream that writes SSE event i, then waits until the client says it has read event i.

    Streams are keyed by the request's `X-Stream` header; `peers` records the client port of every
    completion request (the proxy's pooled connection it came on)."""

    def __init__(self) -> None:
        self.seen: dict[str, asyncio.Queue[int]] = {}
        self.peers: list[int] = []
        self.stalls = 0
        self.server: Server | None = None

    async def start(self) -> LockStep:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/chat/completions", self._complete)
        self.server = await Server(app).start()
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        peer = request.transport.get_extra_info("peername") if request.transport else None
        self.peers.append(int(peer[1]) if peer else -1)
        key = request.headers["X-Stream"]
        seen = self.seen.setdefault(key, asyncio.Queue())
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(int(body.get("steps", STEPS))):
            await resp.write(b"data: " + json.dumps({"i": i}).encode() + b"\n\n")
            if i % 2 == 0:  # pairs: the second event follows the first while it may be un-ACKed
                await asyncio.sleep(PAIR_GAP)
                continue
            try:
                while await asyncio.wait_for(seen.get(), STEP_WAIT) != i:
                    pass
            except asyncio.TimeoutError:
                self.stalls += 1  # the chunk never reached the client on its own: held somewhere
                break
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp


async def lockstep(upstream: LockStep, session: aiohttp.ClientSession, base: str, key: str,
                   steps: int = STEPS) -> tuple[list[int], float]:
    """One stream in lock-step: (the event indices read, in order; seconds it took)."""
    seen = upstream.seen.setdefault(key, asyncio.Queue())
    got: list[int] = []
    buf = b""
    t0 = time.perf_counter()
    async with session.post(base + "/v1/chat/completions", json={"model": "m", "steps": steps},
                            headers={"X-Stream": key}) as r:
        assert r.status == 200
        async for chunk in r.content.iter_any():
            buf += chunk
            while b"\n\n" in buf:
                event, buf = buf.split(b"\n\n", 1)
                if event.startswith(b"data: {"):
                    got.append(json.loads(event[6:])["i"])
                    seen.put_nowait(got[-1])
    return got, time.perf_counter() - t0


LOOPS: list[tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]] = [("asyncio", None)]
try:
    import uvloop
    LOOPS.append(("uvloop", uvloop.new_event_loop))
except ImportError:  # the [fast] extra is not installed: asyncio's loop only
    pass


def run_on(factory: Callable[[], asyncio.AbstractEventLoop] | None,
           coro_fn: Callable[[], Coroutine[Any, Any, None]]) -> None:
    async def main() -> None:
        await asyncio.wait_for(coro_fn(), 120)
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main())


async def _activator(upstream: LockStep) -> Activator:
    act = await start_activator(ActivatorConfig(models=(model_config("m", (upstream.url,)),), default_model="m",
                                                probe_interval=3600))  # one probe: its connection goes idle
    await wait_for(lambda: bool(act.endpoints.ready("m")), what="the endpoint probed ready")
    return act


@pytest.mark.parametrize("loop", [name for name, _ in LOOPS])
def test_each_chunk_reaches_the_client_before_the_next_is_written_and_costs_about_a_direct_round_trip(
        loop: str) -> None:
    async def main() -> None:
        upstream = await LockStep().start()
        act = await _activator(upstream)
        try:
            async with aiohttp.ClientSession() as s:
                await lockstep(upstream, s, upstream.url, "warm-direct", 2)  # both paths' connections open
                await lockstep(upstream, s, act_url(act), "warm-proxy", 2)
                got_direct, direct = await lockstep(upstream, s, upstream.url, "direct")
                got_proxy, proxied = await lockstep(upstream, s, act_url(act), "proxy")
            assert upstream.stalls == 0
            assert got_direct == got_proxy == list(range(STEPS))
            # 50 round trips through one more hop: a chunk held for a delayed ACK (Nagle: 40 ms each on
            # Linux) or a polling relay would add seconds; the slack is wide for a busy machine
            assert proxied < 3 * direct + 0.5, (proxied, direct)
        finally:
            await act.stop()
            assert upstream.server is not None
            await upstream.server.close()

    run_on(dict(LOOPS)[loop], main)


@pytest.mark.parametrize("loop", [name for name, _ in LOOPS])
def test_upstream_connections_are_pooled_one_per_concurrent_stream(loop: str) -> None:
    async def main() -> None:
        upstream = await LockStep().start()
        act = await _activator(upstream)
        try:
            async with aiohttp.ClientSession() as s:
                for i in range(10):  # one after the other: all on the probe's kept-alive connection
                    assert (await lockstep(upstream, s, act_url(act), f"seq{i}", 3))[0] == [0, 1, 2]
                assert len(set(upstream.peers)) == 1, upstream.peers
                upstream.peers.clear()
                for r in range(3):  # 8 at once, three times: 8 connections, the last two rounds reuse them
                    results = await asyncio.gather(*(lockstep(upstream, s, act_url(act), f"c{r}.{i}", 3)
                                                     for i in range(8)))
                    assert all(got == [0, 1, 2] for got, _ in results)
                assert len(upstream.peers) == 24 and len(set(upstream.peers)) == 8, upstream.peers
        finally:
            await act.stop()
            assert upstream.server is not None
            await upstream.server.close()

    run_on(dict(LOOPS)[loop], main)


def test_event_loop_choice() -> None:
    assert loop_factory("asyncio") is None
    with pytest.raises(ConfigError, match="--event-loop"):
        loop_factory("trio")
    if len(LOOPS) > 1:
        assert loop_factory("uvloop") is uvloop.new_event_loop
        assert loop_factory("auto") is uvloop.new_event_loop


def test_event_loop_uvloop_named_but_not_installed_is_an_error_and_auto_falls_back(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # `import uvloop` raises ImportError
    with pytest.raises(ConfigError, match="uvloop is not installed"):
        loop_factory("uvloop")
    assert loop_factory("auto") is None


def test_idle_upstream_connections_are_dropped_before_the_engines_keepalive_would(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import keda_llm.activator.proxy as proxy
    assert proxy.KEEPALIVE_S < 5.0  # vLLM closes keep-alive connections idle for 5 s (its default)
    monkeypatch.setattr(proxy, "KEEPALIVE_S", 0.2)

    async def main() -> None:
        upstream = await LockStep().start()
        act = await _activator(upstream)
        try:
            async with aiohttp.ClientSession() as s:
                await lockstep(upstream, s, act_url(act), "a", 2)
                await lockstep(upstream, s, act_url(act), "b", 2)  # at once: same connection
                await asyncio.sleep(1.5)  # idle well past 0.2 s: the activator closed it
                await lockstep(upstream, s, act_url(act), "c", 2)
            assert upstream.peers[0] == upstream.peers[1] != upstream.peers[2], upstream.peers
        finally:
            await act.stop()
            assert upstream.server is not None
            await upstream.server.close()

    run_on(None, main)


def test_what_is_alive_once_serving_is_out_of_the_collectors_reach() -> None:
    """A full collection walks only what requests create: startup's objects (here a cycle standing for
    the app, its modules and config) are frozen, so no collection visits or frees them. In a child process:
    freezing the test process's heap would change when its own collections run for every later test."""
    code = """
import gc
from keda_llm.activator.cli import settle_heap

class Startup:
    pass

alive = Startup()
alive.me = alive
settle_heap()
assert gc.get_freeze_count() > 0
assert not any(o is alive for o in gc.get_objects())  # no generation the collector walks holds it
gc.collect()
assert alive.me is alive
gc.unfreeze()
assert any(o is alive for o in gc.get_objects())
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
