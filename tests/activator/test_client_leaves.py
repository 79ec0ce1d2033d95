"""A client that leaves in the middle of a streamed answer, or right after its last event, is the
client's doing: the proxy drops the answer quietly (no ERROR from aiohttp's handler, no "broke off"
warning that blames the endpoint) and the endpoint keeps serving the next request.

The proxy runs with aiohttp's handler cancellation, so a client gone while the proxy awaits the upstream
cancels the forward (what these cases exercise). The demo found the narrower race: the client closes at
`[DONE]` in the same loop turn as the proxy's final write, which then raises ClientConnectionResetError
(a ConnectionResetError and an aiohttp ClientError at once) before the cancellation lands; proxy.py
catches it as the client's, ahead of the upstream's errors. That turn cannot be forced over loopback."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
import pytest
from activator_harness import Server, act_url, model_config, run, start_activator, wait_for
from aiohttp import web

from keda_llm.activator.config import ActivatorConfig


class Slow:
    """An upstream streaming `events` SSE events `gap` seconds apart; counts the streams it finished."""

    def __init__(self, events: int, gap: float) -> None:
        self.events, self.gap = events, gap
        self.finished = 0
        self.cut = 0
        self.server: Server | None = None

    async def start(self) -> Slow:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/completions", self._complete)
        self.server = await Server(app).start()
        return self

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for i in range(self.events):
                await resp.write(b"data: {\"i\": %d}\n\n" % i)
                await asyncio.sleep(self.gap)
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
        except (ConnectionResetError, asyncio.CancelledError):
            self.cut += 1
            raise
        self.finished += 1
        return resp


@pytest.mark.parametrize("leave_after", [2, "done"])
def test_a_client_that_leaves_mid_stream_is_dropped_quietly_and_the_endpoint_keeps_serving(
        leave_after: int | str, caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        upstream = await Slow(events=20 if leave_after != "done" else 3, gap=0.05).start()
        assert upstream.server is not None
        act = await start_activator(ActivatorConfig(models=(model_config("m", (upstream.server.url,)),),
                                                    default_model="m"))
        try:
            await wait_for(lambda: bool(act.endpoints.ready("m")), what="the endpoint probed ready")
            for _ in range(3):
                async with aiohttp.ClientSession() as s:
                    r = await s.post(act_url(act) + "/v1/completions", json={"model": "m", "stream": True})
                    assert r.status == 200
                    buf = b""
                    while True:
                        chunk = await r.content.readany()
                        buf += chunk
                        if (leave_after == "done" and b"[DONE]" in buf) or (
                                isinstance(leave_after, int) and buf.count(b"\n\n") >= leave_after):
                            break
                        assert chunk, "the answer ended before the client meant to leave"
                    r.close()  # leave: the connection goes, the proxy may still be writing
            await asyncio.sleep(0.5)  # the proxy notices on its next write (or its end of the answer)
            # the endpoint was not set aside: a whole answer still comes through it
            async with aiohttp.ClientSession() as s, s.post(act_url(act) + "/v1/completions",
                                                            json={"model": "m", "stream": True}) as r:
                assert r.status == 200
                body = await r.read()
            assert body.endswith(b"data: [DONE]\n\n")
            assert act.endpoints.ready("m")
        finally:
            await act.stop()
            assert upstream.server is not None
            await upstream.server.close()

    with caplog.at_level(logging.DEBUG):
        run(main())
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not errors, [r.getMessage() for r in errors]
    assert not [r for r in caplog.records if "broke off" in r.getMessage()]
