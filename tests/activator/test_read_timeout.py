"""`read_timeout`, the longest silence from an upstream, over real loopback HTTP: silent before its
headers the request is answered 504; silent mid-stream the client's connection is cut after the chunks
it already had, so it sees a short answer (not a hang, not a clean end); a stream whose chunks come well
within the limit runs past it whole (the limit is on silence, not on the answer's length)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from activator_harness import Server, act_url, model_config, run, start_activator, wait_for
from aiohttp import web

from keda_llm.activator.config import ActivatorConfig

EVENT = b'data: {"i": 0}\n\n'
LIMIT = 0.5  # the activator's read_timeout here
STEADY, STEADY_GAP = 20, 0.05  # 1 s of answer, never silent for a tenth of LIMIT


class Silent:
    """An upstream that goes silent: before its headers (`/v1/completions`) or after two events
    (`/v1/chat/completions`), for far longer than the activator's read_timeout."""

    def __init__(self) -> None:
        self.release = asyncio.Event()
        self.server: Server | None = None

    async def start(self) -> Silent:
        app = web.Application()
        app.router.add_get("/health", self._ok)
        app.router.add_post("/v1/completions", self._before)
        app.router.add_post("/v1/chat/completions", self._midway)
        app.router.add_post("/v1/steady", self._steady)
        self.server = await Server(app).start()
        return self

    async def _ok(self, request: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _before(self, request: web.Request) -> web.Response:
        await request.read()
        await self.release.wait()
        return web.json_response({})

    async def _steady(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for _ in range(STEADY):
            await resp.write(EVENT)
            await asyncio.sleep(STEADY_GAP)
        await resp.write_eof()
        return resp

    async def _midway(self, request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(EVENT)
        await resp.write(EVENT)
        await self.release.wait()
        await resp.write_eof()
        return resp


def test_an_upstream_silent_past_read_timeout_is_cut_off() -> None:
    async def main() -> None:
        up = await Silent().start()
        assert up.server is not None
        act = await start_activator(ActivatorConfig(
            models=(model_config("m", (up.server.url,)),), default_model="m", probe_interval=3600,
            read_timeout=LIMIT))
        try:
            await wait_for(lambda: bool(act.endpoints.ready("m")))
            async with aiohttp.ClientSession() as s:
                async with s.post(act_url(act) + "/v1/completions", json={"model": "m"}) as r:
                    assert r.status == 504
                    assert (await r.json())["error"]["type"] == "upstream"
                got = b""
                with pytest.raises(aiohttp.ClientPayloadError):
                    async with s.post(act_url(act) + "/v1/chat/completions", json={"model": "m"}) as r:
                        assert r.status == 200
                        async for chunk in r.content.iter_any():
                            got += chunk
                assert got == EVENT * 2  # what came before the silence, then a cut, not a clean end
                async with s.post(act_url(act) + "/v1/steady", json={"model": "m"}) as r:
                    assert await r.read() == EVENT * STEADY
        finally:
            up.release.set()
            await act.stop()
            await up.server.close()

    run(main(), timeout=30)
