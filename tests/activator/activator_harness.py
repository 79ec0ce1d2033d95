"""Real loopback servers for the activator's tests: a fake OpenAI-shaped model server, a fake scaler
activation endpoint, a fake exporter, and the activator itself, all aiohttp on 127.0.0.1.

FakeModel answers `GET /health` 503 until it is ready, then 200; `POST /v1/chat/completions` and
`/v1/completions` echo the request id (header `X-Req`) in an OpenAI-shaped JSON body, or, with
`"stream": true`, in an SSE stream of `chunks` events `gap` seconds apart ending with `data: [DONE]`.
It records every id it received (duplicates show up as repeats), in arrival order.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from keda_llm.activator.config import ActivatorConfig, ModelConfig, StaticEndpoint
from keda_llm.activator.proxy import Activator

HOST = "127.0.0.1"


def expected_stream(rid: str, chunks: int) -> bytes:
    out = b""
    for i in range(chunks):
        delta = {"index": 0, "delta": {"content": f"t{i} "}}
        event = {"id": rid, "object": "chat.completion.chunk", "choices": [delta]}
        out += b"data: " + json.dumps(event).encode() + b"\n\n"
    return out + b"data: [DONE]\n\n"


def expected_json(rid: str) -> dict[str, Any]:
    return {"id": rid, "object": "chat.completion", "choices": [{"index": 0, "message": {
        "role": "assistant", "content": f"reply to {rid}"}, "finish_reason": "stop"}]}


class Server:
    """One aiohttp app on a loopback port; `port` is fixed after the first start (restart reuses it)."""

    def __init__(self, app: web.Application, port: int = 0) -> None:
        self.app = app
        self.port = port
        self.runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://{HOST}:{self.port}"

    async def start(self) -> Server:
        self.runner = web.AppRunner(self.app, access_log=None, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, HOST, self.port, reuse_address=True)
        await site.start()
        self.port = int(self.runner.addresses[0][1])
        return self

    async def close(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None


@dataclass
class FakeModel:
    ready: bool = True
    chunks: int = 5
    gap: float = 0.01  # seconds between SSE events
    delay: float = 0.0  # seconds before a non-streaming answer
    name: str = "m"
    seen: list[str] = field(default_factory=list)
    early: int = 0  # completions asked for while not ready
    active: int = 0
    server: Server | None = None

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", self._health)
        app.router.add_post("/v1/chat/completions", self._complete)
        app.router.add_post("/v1/completions", self._complete)
        return app

    async def start(self, port: int = 0) -> FakeModel:
        self.server = await Server(self.app(), port).start()
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.ready else 503, text="ok" if self.ready else "loading")

    async def _complete(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        rid = request.headers.get("X-Req", "")
        if not self.ready:
            self.early += 1
            return web.Response(status=503, text="not ready")
        self.seen.append(rid)
        self.active += 1
        try:
            if body.get("stream"):
                resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                                   "X-Served-By": self.name})
                await resp.prepare(request)
                whole = expected_stream(rid, self.chunks)
                for event in whole.split(b"\n\n")[:-1]:
                    await resp.write(event + b"\n\n")
                    await asyncio.sleep(self.gap)
                await resp.write_eof()
                return resp
            if self.delay:
                await asyncio.sleep(self.delay)
            return web.json_response(expected_json(rid), headers={"X-Served-By": self.name})
        finally:
            self.active -= 1


@dataclass
class FakeScaler:
    """Records activation calls; `on_activate` runs (once per call) to bring a model up."""

    token: str = ""
    calls: list[tuple[str, str]] = field(default_factory=list)  # (path, Authorization)
    on_activate: Callable[[], Awaitable[None]] | None = None
    server: Server | None = None

    async def start(self) -> FakeScaler:
        app = web.Application()
        app.router.add_post("/v1/activate/{ns}/{name}", self._activate)
        self.server = await Server(app).start()
        return self

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    async def _activate(self, request: web.Request) -> web.Response:
        auth = request.headers.get("Authorization", "")
        self.calls.append((request.path, auth))
        if self.token and auth != f"Bearer {self.token}":
            return web.json_response({"error": "bad token"}, status=401)
        if self.on_activate is not None:
            asyncio.get_running_loop().create_task(self.on_activate())
        return web.json_response({"scaledObject": request.match_info["ns"] + "/" + request.match_info["name"],
                                  "streams": 1, "forwarded": False, "peers": {}})


def model_config(name: str = "m", urls: tuple[str, ...] = (), **kw: Any) -> ModelConfig:
    eps = tuple(StaticEndpoint(u) if isinstance(u, str) else u for u in urls)
    kw.setdefault("namespace", "llm")
    kw.setdefault("scaled_object", "llama")
    return ModelConfig(name=name, endpoints=eps, **kw)


async def start_activator(cfg: ActivatorConfig) -> Activator:
    act = Activator(cfg)
    await act.start((HOST, 0), (HOST, 0))
    return act


def act_url(act: Activator, which: str = "proxy") -> str:
    return f"http://{HOST}:{act.ports[which]}"


async def wait_for(cond: Callable[[], bool], timeout: float = 10.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def run(coro: Awaitable[None], timeout: float = 60.0) -> None:
    async def main() -> None:
        await asyncio.wait_for(coro, timeout)
    asyncio.run(main())
