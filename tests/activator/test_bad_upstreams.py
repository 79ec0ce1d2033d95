"""Upstreams that misbehave at the HTTP level, served by a raw asyncio server that writes exactly the bytes
each case needs (found by a review against real local servers):

- a request the upstream takes and then drops the connection on, unanswered, was sent again and again until
  max_wait (120 times in a minute, each one setting the endpoint aside): now once more, then a 502;
- a malformed chunked answer stalled aiohttp's parser without an error and the client hung past
  read_timeout: now cut at read_timeout;
- `Expect: 100-continue` was passed on with a body already read, and aiohttp waited for a 100 that an
  upstream need not send: now dropped, the request answered;
- a body that is not JSON (and so names no model) is a 400, not "model None is not served here";
- an endpoint whose connection is never made (a vanished pod's silent address) was a 504: now the request
  goes to another endpoint.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from activator_harness import act_url, model_config, run, start_activator, wait_for

from keda_llm.activator.config import ActivatorConfig

LIMIT = 1.0  # the activator's read_timeout here


class RawUpstream:
    """GET /health answers 200; POST /v1/drop closes the connection unanswered; POST /v1/badchunk sends one good
    chunk and then a chunk size that is not hex, and stays open; POST /v1/ok reads the body (never sending a
    100 Continue) and answers 200."""

    def __init__(self) -> None:
        self.posts: dict[str, int] = {}
        self.server: asyncio.Server | None = None
        self.url = ""
        self._open: list[asyncio.StreamWriter] = []

    async def start(self) -> RawUpstream:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self

    async def stop(self) -> None:
        for w in self._open:
            w.close()
        if self.server is not None:
            self.server.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._open.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:] if h)}
                await reader.readexactly(int(headers.get("content-length", "0")))
                if method == "GET":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                    await writer.drain()
                    continue
                self.posts[path] = self.posts.get(path, 0) + 1
                if path == "/v1/drop":
                    writer.close()
                    return
                if path == "/v1/badchunk":
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                 b"Transfer-Encoding: chunked\r\n\r\n10\r\ndata: {\"i\": 0}\n\n\r\n")
                    await writer.drain()
                    await asyncio.sleep(0.2)  # the first event is through; then a chunk size that is not hex
                    writer.write(b"zz\r\n")
                    await writer.drain()
                    await asyncio.sleep(3600)
                body = b'{"ok": true}'
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
                             + str(len(body)).encode() + b"\r\n\r\n" + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass


@contextlib.asynccontextmanager
async def _world(**kw: Any) -> AsyncIterator[tuple[RawUpstream, Any]]:
    """One RawUpstream behind a started activator (stopped, both, on the way out)."""
    up = await RawUpstream().start()
    kw.setdefault("default_model", "m")
    act = await start_activator(ActivatorConfig(models=(model_config("m", (up.url,)),), probe_interval=3600,
                                                read_timeout=LIMIT, **kw))
    try:
        await wait_for(lambda: bool(act.endpoints.ready("m")))
        yield up, act
    finally:
        await act.stop()
        await up.stop()


def test_a_request_the_upstream_drops_is_tried_once_more_then_502() -> None:
    async def main() -> None:
        async with _world() as (up, act):  # max_wait 5 m: before the fix the request was resent until then
            async with aiohttp.ClientSession() as s, s.post(act_url(act) + "/v1/drop", json={"model": "m"}) as r:
                assert r.status == 502
                assert (await r.json())["error"]["type"] == "upstream"
            assert up.posts["/v1/drop"] == 2  # the stale pooled connection allowance, then the answer
            assert act.endpoints.ready("m")  # not set aside: it answers other requests

    run(main())


def test_a_malformed_chunked_answer_is_cut_at_read_timeout() -> None:
    async def main() -> None:
        async with _world() as (_up, act):
            async with aiohttp.ClientSession() as s:
                got = b""
                try:
                    async with s.post(act_url(act) + "/v1/badchunk", json={"model": "m"}) as r:
                        assert r.status == 200
                        async for chunk in r.content.iter_any():
                            got += chunk
                    ended = "clean end"
                except aiohttp.ClientPayloadError:
                    ended = "cut"
            assert ended == "cut" and got == b'data: {"i": 0}\n\n'  # what came before, then a short answer

    run(main(), timeout=30.0)  # a hang here is the bug: read_timeout is 1 s


def test_expect_100_continue_is_not_passed_on() -> None:
    async def main() -> None:
        async with _world() as (_up, act), aiohttp.ClientSession() as s, \
                s.post(act_url(act) + "/v1/ok", json={"model": "m"}, expect100=True) as r:
            assert r.status == 200 and (await r.json()) == {"ok": True}

    run(main(), timeout=30.0)


def test_a_body_that_is_not_json_is_a_bad_request() -> None:
    async def main() -> None:
        # the model must be read from the body
        async with _world(default_model="") as (_up, act), aiohttp.ClientSession() as s:
            async with s.post(act_url(act) + "/v1/ok", data=b"not json") as r:
                assert r.status == 400 and (await r.json())["error"]["type"] == "bad_request"
            async with s.post(act_url(act) + "/v1/ok", json={"model": "other"}) as r:
                assert r.status == 404  # JSON naming a model not served here

    run(main())


def test_an_endpoint_never_connected_to_sends_the_request_elsewhere() -> None:
    async def main() -> None:
        good, silent = await RawUpstream().start(), await RawUpstream().start()
        act = await start_activator(ActivatorConfig(models=(model_config("m", (silent.url, good.url)),),
                                                    default_model="m", probe_interval=3600, read_timeout=LIMIT))
        try:
            await wait_for(lambda: len(act.endpoints.ready("m")) == 2)
            assert act._session is not None
            real = act._session.request

            async def request(method: str, url: Any, **kw: Any) -> Any:
                if str(url).startswith(silent.url):  # as aiohttp reports a connect that no SYN-ACK answers
                    raise aiohttp.ConnectionTimeoutError(f"Connection timeout to host {silent.url}")
                return await real(method, url, **kw)

            act._session.request = request  # type: ignore[method-assign]
            async with aiohttp.ClientSession() as s:
                for _ in range(4):
                    async with s.post(act_url(act) + "/v1/ok", json={"model": "m"}) as r:
                        assert r.status == 200
            assert good.posts["/v1/ok"] == 4 and "/v1/ok" not in silent.posts
        finally:
            await act.stop()
            await good.stop()
            await silent.stop()

    run(main())


def test_the_model_list_is_answered_without_waking_anything() -> None:
    """`GET /v1/models` (OpenAI clients list models first) lists the served names and aliases from the config:
    no wake, no 404 when no default model is set."""
    async def main() -> None:
        async with _world(default_model="") as (up, act):
            async with aiohttp.ClientSession() as s, s.get(act_url(act) + "/v1/models") as r:
                assert r.status == 200
                doc = await r.json()
            assert doc["object"] == "list" and [m["id"] for m in doc["data"]] == ["m"]
            assert up.posts == {}

    run(main())
